"""Chroma behind the VectorStore protocol: embedded (PersistentClient) or server (HttpClient).

We always pass our own embeddings; Chroma's default embedding function would download a model.
Every write is also recorded in a small side collection, "<collection>-changes", so that other
replicas sharing the server can tell which documents changed (see chroma_changes).
The chunk collection's metadata names the embedding model its vectors come from (MODEL_KEY).
"""
from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import json
import logging
import threading
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, TypeVar
from urllib.parse import urlparse

import httpx
import numpy as np
from chromadb.errors import ChromaError

from services.retrieval.adapters.chroma_changes import ChangeLog, changes_collection
from services.retrieval.adapters.chroma_records import chunk_fields, chunks_of, clean, group, to_where
from shared.filters import Filter
from services.retrieval.errors import EmbeddingModelMismatch
from services.retrieval.microbatch import MicroBatcher
from services.retrieval.ports import ChunkHit, DocumentInfo, DocumentPage, StoredChunk, VectorStore, doc_id_of
from shared.errors import DependencyUnavailable

__all__ = ["ChromaStore", "VectorStore", "to_where"]

log = logging.getLogger("cairn.retrieval.chroma")
T = TypeVar("T")

_PAGE = 5000
_IDS_PER_CALL = 500
_UPSERT_PER_CALL = 1000  # well under Chroma's maximum batch size
_WRITES_PER_BATCH = 64
_FAILURES = (ChromaError, httpx.HTTPError, OSError, TimeoutError)
_TIMEOUTS = (TimeoutError, httpx.TimeoutException)
# Chroma calls get threads of their own: a call to a server that stopped answering holds its thread until
# the HTTP timeout, and on the shared default pool (6 threads on 2 cores) a few of them stalled every
# search held in memory too, since BM25 and the exact scan run on that pool.
_THREADS = 8
# Readiness probes wait a few seconds (3 in deploy/k8s, 2 from chat): a heartbeat slower than this counts as down.
_HEARTBEAT_S = 1.0
_HTTP_TIMEOUTS = 3  # a request to the server gives up after this many CHROMA_TIMEOUT_S (see _bound_http_waits)
MODEL_KEY = "cairn:embedding_model"


def _session_of(client: Any) -> Any:
    """The httpx.Client of a Chroma server client (None for an embedded one)."""
    return getattr(getattr(client, "_server", None), "_session", None)


def _matrix(embedding: list[float]) -> np.ndarray:
    # Chroma checks a list's every float in Python; an array is checked at once (~0.6 ms less per query).
    return np.asarray([embedding], dtype=np.float32)


class _Collections(NamedTuple):
    chunks: Any
    changes: Any


class _Query:
    """One caller's nearest-neighbour query. Hashed by identity, like _Write."""

    __slots__ = ("vector", "top_k", "where")

    def __init__(self, vector: list[float], top_k: int, where: dict[str, Any] | None) -> None:
        self.vector, self.top_k, self.where = vector, top_k, where

    def shape(self) -> str:
        """Queries of one shape (vector length, top_k and filter) can go in one Chroma call."""
        return json.dumps([len(self.vector), self.top_k, self.where], sort_keys=True)


class _Write:
    """One caller's chunks. Hashed by identity, so the write batcher never merges two callers into one."""

    __slots__ = ("chunks",)

    def __init__(self, chunks: list[StoredChunk]) -> None:
        self.chunks = chunks


def _calls(writes: list[_Write]) -> list[list[StoredChunk]]:
    """The chunks of `writes` in calls of at most _UPSERT_PER_CALL, each caller's chunks in one call when they
    fit: a server lost between two calls then leaves a document whole or absent, never its first chunks
    only (which carry its content hash, so that a retry would find it unchanged)."""
    # One call cannot hold the same id twice; of a chunk written twice, the later write wins.
    last_writer = {chunk.chunk_id: n for n, write in enumerate(writes) for chunk in write.chunks}
    calls: list[list[StoredChunk]] = [[]]
    for n, write in enumerate(writes):
        own = list({c.chunk_id: c for c in write.chunks if last_writer[c.chunk_id] == n}.values())
        if calls[-1] and len(calls[-1]) + len(own) > _UPSERT_PER_CALL:
            calls.append([])
        calls[-1] += own
    # A caller with more chunks than one call takes is still split.
    return [call[start : start + _UPSERT_PER_CALL] for call in calls for start in range(0, len(call), _UPSERT_PER_CALL)]


class ChromaStore:
    """HNSW in cosine space with explicit parameters. ef_search may change on an existing collection;
    ef_construction and max_neighbors are fixed when the collection is created.

    With `model_id` (embedding_cache.model_identity), the collection records the model when it is created,
    and one that records another is refused on every connection (EmbeddingModelMismatch); None checks
    nothing (temporary collections). One created before models were recorded gets `model_id` recorded once
    check_model has compared its vectors' length with the model's."""

    def __init__(
        self,
        *,
        collection: str,
        path: Path | None = None,
        url: str | None = None,
        timeout_s: float = 10.0,
        ef_search: int = 100,
        ef_construction: int = 200,
        max_neighbors: int = 32,
        max_query_batch: int = 32,
        model_id: str | None = None,
    ) -> None:
        if (path is None) == (url is None):
            raise ValueError("give exactly one of path (embedded) or url (server)")
        if min(ef_search, ef_construction, max_neighbors) < 1:
            raise ValueError("HNSW parameters must be >= 1")
        self._name = collection
        self._path = path
        self._url = url
        self.shared = url is not None  # a server may have other retrieval replicas writing to it
        self._timeout_s = timeout_s
        self._model_id = model_id
        self._dimension: int | None = None  # the model's, once check_model knows it
        self._mismatch_logged: str | None = None  # the mismatch last logged, while it lasts
        self._hnsw = {"space": "cosine", "ef_search": ef_search, "ef_construction": ef_construction, "max_neighbors": max_neighbors}
        self._client: Any = None
        self._collections: _Collections | None = None
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(_THREADS, thread_name_prefix="chroma")
        self._log = ChangeLog()
        # A Chroma write has a fixed cost (about 13 ms of CPU for a 4-chunk upsert, against 0.8 ms per chunk
        # in large ones), so the chunks of documents ingested at the same time go in one upsert.
        self._writes: MicroBatcher[_Write, None] = MicroBatcher(
            self._upsert_together, window_s=0, max_batch=_WRITES_PER_BATCH, name="chroma_write"
        )
        # Likewise for concurrent searches: one call of 32 queries measured 3x cheaper per query than 32 calls.
        self._queries: MicroBatcher[_Query, list[tuple[str, float]] | Exception] = MicroBatcher(
            self._nearest_together, window_s=0, max_batch=max_query_batch, name="chroma_search"
        )

    def _connect(self) -> _Collections:
        with self._lock:
            return self._connect_locked()

    def _connect_locked(self) -> _Collections:
        if self._collections is not None:
            return self._collections
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        no_telemetry = ChromaSettings(anonymized_telemetry=False)  # a pydantic BaseSettings: milliseconds to build
        if self._client is None:
            if self._url is not None:
                parsed = urlparse(self._url)
                host, ssl = parsed.hostname or "127.0.0.1", parsed.scheme == "https"
                port = parsed.port or (443 if ssl else 8000)
                # HttpClient asks the server at once and without a timeout: a server that accepts connections
                # but never answers would hold this thread, and the lock, for good.
                netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # an IPv6 address in brackets
                heartbeat = f"{'https' if ssl else 'http'}://{netloc}/api/v2/heartbeat"
                httpx.get(heartbeat, timeout=self._timeout_s).raise_for_status()
                self._client = chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=no_telemetry)
                self._bound_http_waits(self._client)
            else:
                self._path.mkdir(parents=True, exist_ok=True)
                self._client = chromadb.PersistentClient(path=str(self._path), settings=no_telemetry)
        if self._collections is None:
            chunks = self._client.get_or_create_collection(
                self._name,
                configuration={"hnsw": dict(self._hnsw)},
                metadata={MODEL_KEY: self._model_id} if self._model_id else None,  # kept by an existing one
                embedding_function=None,
            )
            self._check_hnsw(chunks)
            self._check_model(chunks)
            changes = self._client.get_or_create_collection(changes_collection(self._name), embedding_function=None)
            self._collections = _Collections(chunks, changes)
        return self._collections

    def _bound_http_waits(self, client: Any) -> None:
        """Chroma's HTTP client waits for an answer forever; give each of its requests a limit, so a silent
        server frees the thread (asyncio's timeout only stops waiting for it). A few times ours: a write that
        is slow but lands still gets its change record, written after it on the same thread, so that the
        other replicas hear of it."""
        session = _session_of(client)
        if isinstance(session, httpx.Client):
            session.timeout = httpx.Timeout(_HTTP_TIMEOUTS * self._timeout_s)
        else:
            log.warning("cannot set a timeout on chroma's HTTP client; a silent server may hold threads")

    def _check_hnsw(self, collection: Any) -> None:
        with warnings.catch_warnings():
            # Chroma warns about the embedding function config of a collection made without one.
            warnings.simplefilter("ignore", DeprecationWarning)
            current = (collection.configuration or {}).get("hnsw") or {}
            if current.get("ef_search") != self._hnsw["ef_search"]:
                collection.modify(configuration={"hnsw": {"ef_search": self._hnsw["ef_search"]}})
        if current.get("space") != "cosine":
            log.warning("collection is not in cosine space; scores will be wrong", extra={"space": current.get("space")})
        fixed = {k: current.get(k) for k in ("ef_construction", "max_neighbors")}
        if fixed != {k: self._hnsw[k] for k in fixed}:
            log.warning("collection was created with other HNSW build parameters; rebuild it to change them", extra=fixed)

    def _check_model(self, chunks: Any) -> None:
        if self._model_id is None:
            return
        recorded = (chunks.metadata or {}).get(MODEL_KEY)
        if recorded not in (None, self._model_id):
            raise self._mismatch(chunks, recorded)
        if self._dimension is None:
            return  # the model's vector length is not known yet: check_model finishes the check
        if self._stored_dimension(chunks) not in (None, self._dimension):
            raise self._mismatch(chunks, recorded)
        if recorded is not None:
            return
        chunks.modify(metadata=(chunks.metadata or {}) | {MODEL_KEY: self._model_id})
        log.info("recorded the embedding model of a collection that named none", extra={"model": self._model_id})
        # Two replicas with different models recording at once: the one whose record was overwritten finds out here.
        recorded = (self._client.get_collection(self._name, embedding_function=None).metadata or {}).get(MODEL_KEY)
        if recorded != self._model_id:
            raise self._mismatch(chunks, recorded)

    def _mismatch(self, chunks: Any, recorded: str | None) -> EmbeddingModelMismatch:
        dimension = f", {self._dimension}-dimensional" if self._dimension else ""
        return EmbeddingModelMismatch(
            collection=self._name,
            model=f"{self._model_id}{dimension}",
            built_with=recorded,
            dimension=self._stored_dimension(chunks),
        )

    @staticmethod
    def _stored_dimension(chunks: Any) -> int | None:
        """The length of the collection's vectors; None while it holds none."""
        stored = chunks.get(limit=1, include=["embeddings"])["embeddings"]
        return None if stored is None or len(stored) == 0 else len(stored[0])

    async def check_model(self, *, dimension: int) -> None:
        """Check the collection against the model now that its vectors' length is known: a collection that
        records no model is refused when its vectors have another length, and else records this one.
        Raises EmbeddingModelMismatch; while Chroma is down, the next connection checks."""
        self._dimension = dimension

        def check(c: _Collections) -> None:  # read afresh: another replica may have recorded its model meanwhile
            self._check_model(self._client.get_collection(self._name, embedding_function=None))

        with contextlib.suppress(DependencyUnavailable):
            await self._run(check, at_start=True)

    async def _run(
        self, operation: Callable[[_Collections], T], *, timeout_s: float | None = None, at_start: bool = False
    ) -> T:
        def call() -> T:
            try:
                return operation(self._connect())
            except ValueError as exc:
                if self._client is None:  # HttpClient raises ValueError when the server does not answer
                    raise ConnectionError(str(exc)) from exc
                raise

        context = contextvars.copy_context()  # as asyncio.to_thread does: logs keep the request id
        running = asyncio.get_running_loop().run_in_executor(self._threads, context.run, call)
        try:
            async with asyncio.timeout(timeout_s or self._timeout_s):
                result = await running
        except EmbeddingModelMismatch as exc:
            if at_start:
                raise
            # Found on reconnecting (the collection recreated meanwhile, or Chroma down at the start), and again
            # on every call while it lasts: logged when it begins, not once per request and keyword sync.
            if str(exc) != self._mismatch_logged:
                log.error(str(exc))
                self._mismatch_logged = str(exc)
            raise DependencyUnavailable("chroma") from exc
        except _FAILURES as exc:
            # Look the collections up again next time: the collection may have been recreated meanwhile. A server
            # client is kept: its connections are remade as needed, and Chroma never lets go of part of every
            # server client it makes (chromadb 1.5: AdminClient.from_system files the system under an extra id).
            self._collections = None
            log.warning("chroma call failed", extra={"error": type(exc).__name__, "detail": str(exc)[:200]})
            raise DependencyUnavailable("chroma") from exc
        self._mismatch_logged = None  # the collection served: a later mismatch is news again
        return result

    async def open(self) -> None:
        """Connect now; failures surface later as 503s and readiness false, not as a crash. A collection
        that records another embedding model raises EmbeddingModelMismatch."""
        with contextlib.suppress(DependencyUnavailable):
            await self._run(lambda c: c, at_start=True)

    # -- writes ---------------------------------------------------------------------------------

    async def upsert(self, chunks: list[StoredChunk]) -> None:
        if chunks:
            await self._writes.submit(_Write(chunks))

    async def _upsert_together(self, writes: list[_Write]) -> list[None]:
        for part in _calls(writes):

            def write(c: _Collections, part: list[StoredChunk] = part) -> None:
                c.chunks.upsert(
                    ids=[chunk.chunk_id for chunk in part],
                    embeddings=[chunk.embedding for chunk in part],
                    documents=[chunk.content for chunk in part],
                    metadatas=[clean(chunk.metadata) | {"doc_id": chunk.doc_id} for chunk in part],
                )
                self._log.record(c.changes, {chunk.doc_id for chunk in part})

            await self._run(write)
        return [None] * len(writes)

    async def delete(self, *, doc_id: str, from_chunk_index: int = 0) -> int:
        where: dict[str, Any] = {"doc_id": doc_id}
        if from_chunk_index > 0:
            where = {"$and": [where, {"chunk_index": {"$gte": from_chunk_index}}]}

        def remove(c: _Collections) -> int:
            deleted = int((c.chunks.delete(where=where) or {}).get("deleted", 0))
            if deleted:
                self._log.record(c.changes, {doc_id})
            return deleted

        return await self._run(remove)

    # -- reads ----------------------------------------------------------------------------------

    async def query(
        self, *, embedding: list[float], top_k: int, where: Filter | Mapping[str, Any] | None = None
    ) -> list[ChunkHit]:
        if top_k < 1:
            raise ValueError("top_k must be >= 1")
        clause = to_where(where)
        result = await self._run(
            lambda c: c.chunks.query(
                query_embeddings=_matrix(embedding), n_results=top_k, where=clause, include=["documents", "metadatas", "distances"]
            )
        )
        return [
            ChunkHit(chunk_id=cid, doc_id=str(meta.get("doc_id", "")), content=doc or "", distance=float(dist), metadata=chunk_fields(meta))
            for cid, doc, meta, dist in zip(
                result["ids"][0], result["documents"][0], result["metadatas"][0], result["distances"][0]
            )
        ]

    async def nearest(
        self, *, embedding: list[float], top_k: int, where: Filter | Mapping[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        if top_k < 1:
            raise ValueError("top_k must be >= 1")
        try:
            # A deadline of its own: a query queued behind a batch that waits for a silent server would
            # otherwise wait for that batch and then for its own call, twice the timeout.
            query = _Query(embedding, top_k, to_where(where))
            async with asyncio.timeout(self._timeout_s):
                found = await self._queries.submit(query)
        except TimeoutError as exc:
            raise DependencyUnavailable("chroma") from exc
        if isinstance(found, Exception):
            raise found
        return found

    async def _nearest_together(self, queries: list[_Query]) -> list[list[tuple[str, float]] | Exception]:
        by_shape: dict[str, list[int]] = {}
        for position, query in enumerate(queries):
            by_shape.setdefault(query.shape(), []).append(position)
        results: list[list[tuple[str, float]] | Exception] = [[] for _ in queries]
        unavailable: DependencyUnavailable | None = None  # timed out
        for positions in by_shape.values():
            first = queries[positions[0]]
            if unavailable is not None:  # a silent server: each further shape would wait out the timeout again
                for p in positions:
                    results[p] = unavailable
                continue
            try:
                matrix = np.asarray([queries[p].vector for p in positions], dtype=np.float32)
                found = await self._run(
                    lambda c, m=matrix, q=first: c.chunks.query(
                        query_embeddings=m, n_results=q.top_k, where=q.where, include=["distances"]
                    )
                )
            except Exception as exc:  # one shape's failure (a filter Chroma rejects) stays with its callers
                for p in positions:
                    results[p] = exc
                if isinstance(exc, DependencyUnavailable) and isinstance(exc.__cause__, _TIMEOUTS):
                    unavailable = exc
                continue
            for row, p in enumerate(positions):
                results[p] = [(cid, float(dist)) for cid, dist in zip(found["ids"][row], found["distances"][row])]
        return results

    async def get_chunks(
        self, *, ids: list[str] | None = None, doc_ids: list[str] | None = None, with_embeddings: bool = False
    ) -> list[StoredChunk]:
        include = ["documents", "metadatas"] + (["embeddings"] if with_embeddings else [])
        # Each page is converted as it arrives, so that only one of Chroma's raw pages is alive at a time.
        chunks: list[StoredChunk] = []
        if ids is None and doc_ids is None:
            for batch in await self._id_pages():
                page = await self._run(lambda c, b=batch: c.chunks.get(ids=b, include=include))
                chunks += chunks_of(page, with_embeddings)
            return chunks
        for start in range(0, len(ids or []), _IDS_PER_CALL):
            batch = ids[start : start + _IDS_PER_CALL]
            chunks += chunks_of(await self._run(lambda c, b=batch: c.chunks.get(ids=b, include=include)), with_embeddings)
        for start in range(0, len(doc_ids or []), _IDS_PER_CALL):
            where = {"doc_id": {"$in": doc_ids[start : start + _IDS_PER_CALL]}}
            chunks += chunks_of(await self._run(lambda c, w=where: c.chunks.get(where=w, include=include)), with_embeddings)
        return chunks

    async def changes(self, cursor: object | None) -> tuple[set[str] | None, object]:
        return await self._run(lambda c: self._log.read(chunks=c.chunks, changes=c.changes, cursor=cursor))

    async def get_document(self, doc_id: str) -> DocumentInfo | None:
        result = await self._run(lambda c: c.chunks.get(where={"doc_id": doc_id}, include=["metadatas"]))
        documents = group(result["metadatas"])
        return documents[0] if documents else None

    async def list_documents(self) -> list[DocumentInfo]:
        metadatas: list[dict[str, Any]] = []
        for batch in await self._id_pages():
            metadatas += (await self._run(lambda c, b=batch: c.chunks.get(ids=b, include=["metadatas"])))["metadatas"]
        return group(metadatas)

    async def document_page(self, *, after: str | None, limit: int) -> DocumentPage:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        # Every chunk id, then the metadata of this page's chunks only: at 5,000 documents (50,000 chunks) a
        # page of 100 took 0.1 s, against 1.5 s for list_documents' read of every chunk's metadata.
        by_doc: dict[str, list[str]] = {}
        for chunk_id in (await self._run(lambda c: c.chunks.get(include=[])))["ids"]:
            by_doc.setdefault(doc_id_of(chunk_id), []).append(chunk_id)
        doc_ids = sorted(by_doc)
        start = bisect.bisect_right(doc_ids, after) if after is not None else 0
        wanted = [chunk_id for doc_id in doc_ids[start : start + limit] for chunk_id in by_doc[doc_id]]
        metadatas: list[dict[str, Any]] = []
        for first in range(0, len(wanted), _PAGE):
            batch = wanted[first : first + _PAGE]
            metadatas += (await self._run(lambda c, b=batch: c.chunks.get(ids=b, include=["metadatas"])))["metadatas"]
        return DocumentPage(documents=group(metadatas), total=len(doc_ids), more=start + limit < len(doc_ids))

    async def _id_pages(self) -> list[list[str]]:
        """Every chunk id, in pages of _PAGE, for reading the whole collection page by page. Pages by
        limit and offset skipped chunks that never changed when another replica deleted some of an
        earlier page meanwhile (the offsets shifted), and no change record would bring them back; a
        chunk deleted after its id was read is simply not returned, and one added is a change to replay."""
        ids: list[str] = (await self._run(lambda c: c.chunks.get(include=[])))["ids"]
        return [ids[start : start + _PAGE] for start in range(0, len(ids), _PAGE)]

    def close(self) -> None:
        """Let go of the client: Chroma keeps each client's system (an embedded store's open files and
        loaded index) until it is closed, however long the process lives. A call still running on one of
        the store's threads is not waited for; later calls fail."""
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._collections = None
        # A server client's systems (its own and its admin client's) stop without closing their connections.
        client, self._client = self._client, None
        sessions = [_session_of(c) for c in (client, getattr(client, "_admin_client", None))]
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # a client that fails to close leaves nothing more to do
                log.warning("chroma client did not close cleanly", extra={"error": type(exc).__name__})
        for session in sessions:
            if isinstance(session, httpx.Client):
                session.close()


    async def heartbeat(self) -> bool:
        try:
            await self._run(lambda c: self._client.heartbeat(), timeout_s=min(self._timeout_s, _HEARTBEAT_S))
            return True
        except DependencyUnavailable:
            return False
