"""The retrieval service's dependencies, each named once.

All async, though none awaits: FastAPI runs a plain `def` dependency on a worker thread, a thread hop per
dependency per request.
"""
from __future__ import annotations

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


async def _keywords(request: Request) -> KeywordIndex:
    return request.app.state.keywords


async def _reranker(request: Request) -> Reranker | None:
    return getattr(request.app.state, "reranker", None)


async def _search_options(request: Request) -> SearchOptions:
    return request.app.state.search_options


SettingsDep = Annotated[Settings, Depends(_settings)]
EmbedderDep = Annotated[Embedder, Depends(_embedder)]
StoreDep = Annotated[VectorStore, Depends(_store)]
ContextualizerDep = Annotated[Contextualizer | None, Depends(_contextualizer)]
KeywordsDep = Annotated[KeywordIndex, Depends(_keywords)]
RerankerDep = Annotated[Reranker | None, Depends(_reranker)]
SearchOptionsDep = Annotated[SearchOptions, Depends(_search_options)]
