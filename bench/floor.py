"""The floor: what a search and a chat answer cost in one process with nothing in between.

Search: the query encode (the retrieval service's own embedder, micro-batched across concurrent callers,
query cache off), an exact dense top-N (one numpy product over every chunk vector), a BM25 top-N (the
service's own keyword index: same tokenizer, stemmer and bm25s) run while the encode is in flight, and
reciprocal rank fusion. Chat: the same search for the chat's passages, then the offline generator's
answer function, called directly. No HTTP, no validation, no events, no conversation kept.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from bench.chunks import Chunks
from services.chat.context_format import ContextBlock
from services.chat.offline_llm import extractive
from services.retrieval.adapters.bm25_index import Bm25Index
from services.retrieval.encoding import BatchingEmbedder
from services.retrieval.ports import StoredChunk

RRF_K = 60.0


def fuse(rankings: Sequence[Sequence[int]], *, top_k: int, k: float = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of row rankings (best first), equal weights: the top_k (row, score) pairs,
    ties in order of first appearance, as services.retrieval.fusion ranks them."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, start=1):
            scores[row] = scores.get(row, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: pair[1], reverse=True)[:top_k]


def dense_top(vectors: np.ndarray, query: np.ndarray, n: int) -> np.ndarray:
    """Rows of the n highest cosine similarities (rows and query normalised), best first: exact."""
    scores = vectors @ query
    n = min(n, len(scores))
    top = np.argpartition(-scores, n - 1)[:n]
    return top[np.argsort(-scores[top], kind="stable")]


class Floor:
    def __init__(self, chunks: Chunks, *, embedder: BatchingEmbedder, candidates: int) -> None:
        self.chunks = chunks
        self.embedder = embedder
        self.candidates = candidates
        self._row = {chunk_id: row for row, chunk_id in enumerate(chunks.ids)}
        self.keywords = Bm25Index()
        self.keywords.load(
            [StoredChunk(cid, doc, text, [], {}) for cid, doc, text in zip(chunks.ids, chunks.doc_ids, chunks.texts)],
            doc_ids=None, since=0,
        )
        self.keywords.build()

    async def search(self, query: str, *, top_k: int) -> list[int]:
        """The rows of the top_k chunks by hybrid search."""
        encoding = asyncio.ensure_future(self.embedder.embed_query(query))
        await asyncio.sleep(0)  # let the encode join the current micro-batch before the BM25 leg takes the loop
        keyword_rows = [self._row[hit.chunk_id] for hit in self.keywords.search_now(query=query, top_k=self.candidates)]
        vector = np.asarray(await encoding, dtype=np.float32)
        dense_rows = dense_top(self.chunks.vectors, vector, self.candidates).tolist()
        return [row for row, _ in fuse([dense_rows, keyword_rows], top_k=top_k)]

    async def chat(self, query: str, *, top_k: int) -> str:
        """The offline generator's answer over the top_k passages, numbered as chat numbers them."""
        rows = await self.search(query, top_k=top_k)
        blocks = [ContextBlock(n, self.chunks.titles[row], self.chunks.texts[row]) for n, row in enumerate(rows, start=1)]
        return extractive.answer(query, blocks)
