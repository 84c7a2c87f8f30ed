"""The floor's own fusion and exact dense ranking match the retrieval service's definitions, and its
hybrid search is RRF over exactly those two legs (a fixed vector stands in for the model)."""
from __future__ import annotations

import numpy as np
import pytest

from bench.chunks import Chunks
from bench.floor import Floor, dense_top, fuse
from services.retrieval.adapters.bm25_index import Bm25Index
from services.retrieval.fusion import reciprocal_rank_fusion
from services.retrieval.ports import StoredChunk

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("dense", "keyword", "top_k"),
    [
        ([3, 1, 4, 5], [1, 5, 9, 2, 6], 10),
        ([0, 1, 2], [2, 1, 0], 3),  # every id in both legs: ties broken by first appearance
        ([7, 8], [9, 10], 4),  # no overlap: equal scores pairwise
        ([1, 2, 3, 4, 5, 6], [], 2),
    ],
)
def test_fuse_equals_the_services_reciprocal_rank_fusion(dense, keyword, top_k) -> None:
    ours = fuse([dense, keyword], top_k=top_k)
    theirs = reciprocal_rank_fusion({"dense": [str(r) for r in dense], "keyword": [str(r) for r in keyword]})[:top_k]
    assert [row for row, _ in ours] == [int(i) for i, _ in theirs]
    assert [score for _, score in ours] == pytest.approx([score for _, score in theirs])


def test_dense_top_is_the_exact_cosine_ranking() -> None:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(500, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = vectors[42] + 0.1 * rng.normal(size=16).astype(np.float32)
    query /= np.linalg.norm(query)
    expected = np.argsort(-(vectors @ query), kind="stable")[:20]
    assert dense_top(vectors, query, 20).tolist() == expected.tolist()
    assert dense_top(vectors[:5], query, 20).shape == (5,)  # fewer rows than asked: all of them


class FixedEmbedder:
    """Embeds every query as the same vector, as the micro-batched embedder's interface does."""

    def __init__(self, vector: np.ndarray) -> None:
        self.vector = vector
        self.queries: list[str] = []

    async def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self.vector.tolist()


def _chunks() -> Chunks:
    texts = [
        "Statins lower cholesterol in adults with heart disease.",
        "Aspirin reduces the risk of stroke in older adults.",
        "Vitamin D supplements and bone density in children.",
        "Cholesterol synthesis is inhibited by statins in the liver.",
        "Exercise improves insulin sensitivity.",
        "Gut bacteria shape the immune response.",
    ]
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(len(texts), 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return Chunks(
        ids=[f"c{i}" for i in range(len(texts))], doc_ids=[f"d{i}" for i in range(len(texts))],
        titles=[f"Title {i}" for i in range(len(texts))], texts=texts, vectors=vectors,
    )


async def test_floor_search_fuses_the_exact_dense_and_the_services_bm25_legs() -> None:
    chunks = _chunks()
    embedder = FixedEmbedder(chunks.vectors[4])
    floor = Floor(chunks, embedder=embedder, candidates=3)
    rows = await floor.search("statins cholesterol", top_k=4)

    dense = [f"c{r}" for r in np.argsort(-(chunks.vectors @ chunks.vectors[4]))[:3]]
    bm25 = Bm25Index()
    bm25.load([StoredChunk(i, d, t, [], {}) for i, d, t in zip(chunks.ids, chunks.doc_ids, chunks.texts)], doc_ids=None, since=0)
    keyword = [hit.chunk_id for hit in bm25.search_now(query="statins cholesterol", top_k=3)]
    assert set(keyword) == {"c0", "c3"}  # stemmed: "statins" and "cholesterol" in both, nowhere else
    expected = [chunk_id for chunk_id, _ in reciprocal_rank_fusion({"dense": dense, "keyword": keyword})[:4]]
    assert [chunks.ids[r] for r in rows] == expected
    assert embedder.queries == ["statins cholesterol"]


async def test_floor_chat_answers_from_numbered_passages_with_the_offline_generator() -> None:
    chunks = _chunks()
    floor = Floor(chunks, embedder=FixedEmbedder(chunks.vectors[0]), candidates=3)
    answer = await floor.chat("Do statins lower cholesterol?", top_k=3)
    assert "Statins lower cholesterol" in answer and "[1]" in answer
