"""The retrieval service's dependencies, each named once.

All async, though none awaits: FastAPI runs a plain `def` dependency on a worker thread, a thread hop per
dependency per request.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from services.retrieval.contextual import Contextualizer
from services.retrieval.ports import Embedder, KeywordIndex, Reranker, VectorStore
from services.retrieval.search import SearchOptions
from services.retrieval.settings import Settings


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


async def _embedder(request: Request) -> Embedder:
    return request.app.state.embedder


async def _store(request: Request) -> VectorStore:
    return request.app.state.store


async def _contextualizer(request: Request) -> Contextualizer | None:
    return getattr(request.app.state, "contextualizer", None)


@dataclass(frozen=True, slots=True)
class SearchParts:
    """What POST /search searches with, as one dependency: FastAPI resolves each dependency of every request
    with bookkeeping of its own (one for five took about 25 us off a search's HTTP handling in one process)."""

    embedder: Embedder
    store: VectorStore
    keywords: KeywordIndex
    reranker: Reranker | None
    options: SearchOptions


async def _search_parts(request: Request) -> SearchParts:
    state = request.app.state
    return SearchParts(
        embedder=state.embedder,
        store=state.store,
        keywords=state.keywords,
        reranker=getattr(state, "reranker", None),
        options=state.search_options,
    )


SettingsDep = Annotated[Settings, Depends(_settings)]
EmbedderDep = Annotated[Embedder, Depends(_embedder)]
StoreDep = Annotated[VectorStore, Depends(_store)]
ContextualizerDep = Annotated[Contextualizer | None, Depends(_contextualizer)]
SearchPartsDep = Annotated[SearchParts, Depends(_search_parts)]
