"""The retrieval app: wires the embedder and the vector store, opened in the lifespan."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from services.retrieval.adapters.bm25_index import keyword_indexed
from services.retrieval.adapters.chroma_store import ChromaStore
from services.retrieval.adapters.context_llm import build_contextualizer
from services.retrieval.adapters.embedder import embedder_from_settings, export_onnx_copy
from services.retrieval.adapters.reranker import CrossEncoderReranker
from services.retrieval.api import router
from services.retrieval.embedding_cache import CachingEmbedder, model_fingerprint, model_identity
from services.retrieval.encoding import BatchingEmbedder
from services.retrieval.keyword_sync import KeywordSync
from services.retrieval.ports import Embedder, VectorStore
from services.retrieval.search import SearchOptions
from services.retrieval.settings import Settings
from shared.errors import DependencyUnavailable
from shared.web import create_service_app, narrow_schema_field, service_token_guard

log = logging.getLogger("cairn.retrieval")


async def _open_index(
    app: FastAPI, settings: Settings, store: VectorStore | None, model_id: Callable[[], str]
) -> tuple[KeywordSync, ChromaStore | None]:
    """Open the configured store (or `store`), wrap it with the keyword index, and load the index once."""
    chroma = None
    if store is None:
        chroma = ChromaStore(
            collection=settings.chroma_collection,
            path=None if settings.chroma_url else settings.chroma_path,
            url=settings.chroma_url,
            timeout_s=settings.chroma_timeout_s,
            ef_search=settings.hnsw_ef_search,
            ef_construction=settings.hnsw_ef_construction,
            max_neighbors=settings.hnsw_max_neighbors,
            max_query_batch=settings.search_max_query_batch,
            model_id=model_id(),
        )
    try:
        if chroma is not None:
            await chroma.open()
        # Every write goes through the synced store, so the keyword index (and the vectors it keeps for exact
        # search) follows this replica's writes at once and other replicas' within about keyword_sync_interval_s.
        app.state.store, app.state.keywords, keyword_sync = keyword_indexed(
            chroma if store is None else store,
            interval_s=settings.keyword_sync_interval_s,
            exact_max_chunks=settings.exact_search_max_chunks,
            max_scan_batch=settings.search_max_query_batch,
        )
        try:
            await keyword_sync.refresh()
        except DependencyUnavailable:
            log.warning("keyword index not loaded: chroma unavailable; retrying in the background")
    except BaseException:
        if chroma is not None:
            chroma.close()
        raise
    return keyword_sync, chroma


async def _close_loaded(owned: BatchingEmbedder | None, loading: asyncio.Future[BatchingEmbedder] | None) -> None:
    """A start that failed: close the embedder it loaded, waiting for a load still under way (its thread
    cannot be stopped; left alone it would hold the model, and the process, until it ends)."""
    if owned is None and loading is not None:
        with contextlib.suppress(Exception, asyncio.CancelledError):  # its own failure, or a second cancellation
            owned = await loading
    if owned is not None:
        owned.close()


def create_app(
    settings: Settings | None = None, *, embedder: Embedder | None = None, store: VectorStore | None = None
) -> FastAPI:
    """The retrieval service. `embedder` / `store` replace the configured adapters (tests share one model)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = settings
        identity = functools.cache(lambda: model_identity(settings.model_path()))  # hashes the model files once
        loading = None
        if embedder is None:
            # The model's ONNX copy is exported (a child process, on a first start) before this process holds
            # anything large, then the model loads while the keyword index is read from the store: neither
            # needs the other. On the SciFact bench index the start's peak fell from ~1.65 to ~1.35 GiB, and
            # with the copy already exported ready came 1.03-1.35x sooner (bench/README.md, start-up section).
            await asyncio.to_thread(export_onnx_copy, settings)
            loading = asyncio.ensure_future(asyncio.to_thread(embedder_from_settings, settings))
        owned = chroma = None
        try:
            keyword_sync, chroma = await _open_index(app, settings, store, identity)
            if loading is not None:
                owned = await loading
            if chroma is not None:  # only the vectors' length is wanted from this query
                await chroma.check_model(dimension=len(await (embedder or owned).embed_query("dimension")))
            app.state.reranker = None
            if settings.rerank_model is not None:
                app.state.reranker = await asyncio.to_thread(CrossEncoderReranker, settings.rerank_model)
        except BaseException:
            await _close_loaded(owned, loading)
            if chroma is not None:
                chroma.close()
            raise
        app.state.search_options = SearchOptions(
            candidates=settings.hybrid_candidates,
            rrf_k=settings.rrf_k,
            dense_weight=settings.hybrid_dense_weight,
            keyword_weight=settings.hybrid_keyword_weight,
            rerank_candidates=settings.rerank_candidates,
        )
        app.state.embedder = embedder or owned
        vector_cache = None
        if settings.embedding_cache:
            vector_cache = app.state.embedder = CachingEmbedder(
                app.state.embedder,
                path=settings.embedding_cache_path,
                model_id=model_fingerprint(settings.model_path(), backend=settings.embedding_backend, identity=identity()),
            )
        app.state.contextualizer = build_contextualizer(settings)
        log.info(
            "retrieval ready",
            extra={
                "chroma": settings.chroma_url or str(settings.chroma_path),
                # Chunks never exceed what the model embeds without truncation.
                "chunk_size_tokens": min(settings.chunk_size_tokens, app.state.embedder.max_tokens),
            },
        )
        sync_task = asyncio.create_task(keyword_sync.run(), name="keyword-sync")
        try:
            yield
        finally:
            sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sync_task
            if app.state.reranker is not None:
                app.state.reranker.close()
            if vector_cache is not None:
                vector_cache.close()
            if owned is not None:
                owned.close()
            if app.state.contextualizer is not None:
                await app.state.contextualizer.close()
            if chroma is not None:
                chroma.close()

    async def readiness() -> dict[str, bool]:
        current_store, keywords = getattr(app.state, "store", None), getattr(app.state, "keywords", None)
        return {
            "chroma": current_store is not None and await current_store.heartbeat(),
            "embedder": getattr(app.state, "embedder", None) is not None,
            "index": keywords is not None and keywords.loaded,
        }

    # Once its index is loaded, a replica answers the searches it holds in memory while Chroma is down, and
    # names Chroma in the 503 of the others: it stays in its load balancer. Chroma is reported.
    app = create_service_app(
        service="retrieval",
        title="Cairn retrieval",
        lifespan=lifespan,
        readiness=readiness,
        needed={"embedder", "index"},
        service_token=settings.service_token,
    )
    app.include_router(router, dependencies=[Depends(service_token_guard(settings))])
    if settings.rerank_model is None:  # rerank: true is then a 422
        narrow_schema_field(
            app, model="SearchRequest", field="rerank", any_of=[{"type": "boolean", "enum": [False]}, {"type": "null"}]
        )
    return app
