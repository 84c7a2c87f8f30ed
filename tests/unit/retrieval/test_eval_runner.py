"""The evaluation runner on the fake embedder and store: ingestion, search per mode, the HNSW check."""
from __future__ import annotations

from dataclasses import replace

import pytest

from services.retrieval import ingestion, search
from services.retrieval.evaluation.ann import ann_recall
from services.retrieval.evaluation.beir import BeirDataset, BeirDocument
from services.retrieval.evaluation.corpus import RecordingStore
from services.retrieval.evaluation.runner import chunks_to_request, ingest_corpus, run_mode
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore

pytestmark = pytest.mark.unit

DATASET = BeirDataset(
    name="animals",
    corpus={
        "cat": BeirDocument("cat", "Cats", "Cats purr and chase mice at night."),
        "dog": BeirDocument("dog", "Dogs", "Dogs bark at the postman and fetch sticks."),
        "owl": BeirDocument("owl", "Owls", "Owls hoot in the dark forest."),
        "empty": BeirDocument("empty", "", "   "),
    },
    queries={"q1": "which animal purrs and chases mice", "q2": "who barks at the postman", "q3": "hoot forest"},
    qrels={"q1": {"cat": 1}, "q2": {"dog": 1}, "q3": {"owl": 1}},
)


@pytest.fixture
def parts() -> tuple[FakeEmbedder, RecordingStore]:
    return FakeEmbedder(), RecordingStore(FakeStore())


async def ingest_all(embedder: FakeEmbedder, store: RecordingStore, **options):
    async def ingest(document: ingestion.NewDocument) -> ingestion.IngestResult:
        return await ingestion.ingest_document(document, embedder=embedder, store=store, chunk_size=4, chunk_overlap=1)

    done = []
    report = await ingest_corpus(DATASET, ingest=ingest, progress=done.append, count_tokens=embedder.count_tokens, **options)
    return report, done


async def test_the_corpus_goes_through_ingestion_and_bad_documents_are_counted(parts) -> None:
    embedder, store = parts
    report, done = await ingest_all(embedder, store)
    assert report.documents == 3 and len(done) == 4
    assert [doc_id for doc_id, _ in report.failures] == ["empty"]
    assert report.chunks == len(store.embeddings) > 3, "four-token chunks: several per document"
    assert "Cats Cats purr and" in embedder.embedded_texts[0], "the title leads the text"


async def test_truncated_documents_become_single_chunks(parts) -> None:
    embedder, store = parts
    report, _ = await ingest_all(embedder, store, truncate_to=4)
    assert report.chunks == report.documents == 3
    assert sorted(store.embeddings) == ["cat#0", "dog#0", "owl#0"]


async def test_every_query_is_searched_and_scored(parts) -> None:
    embedder, store = parts
    report, _ = await ingest_all(embedder, store)
    calls = []

    async def dense(query: str, mode: str, top_k: int):
        calls.append((mode, top_k))
        return await search.search(query=query, top_k=top_k, embedder=embedder, store=store, mode="dense")

    done = []
    result = await run_mode(DATASET, mode="dense", search=dense, top_k=50, progress=done.append)
    assert calls == [("dense", 50)] * 3 and len(done) == 3
    assert result.scores.means["ndcg@10"] == 1.0 and result.scores.means["recall@100"] == 1.0
    assert result.latency_ms["p50"] > 0 and result.latency_ms["p95"] >= result.latency_ms["p50"]


async def test_a_search_that_ranks_the_wrong_document_first_scores_lower(parts) -> None:
    embedder, store = parts
    await ingest_all(embedder, store)

    async def reversed_search(query: str, mode: str, top_k: int):
        hits = await search.search(query=query, top_k=top_k, embedder=embedder, store=store, mode="dense")
        return [replace(hit, score=-hit.score) for hit in reversed(hits)]

    result = await run_mode(DATASET, mode="dense", search=reversed_search, top_k=50)
    assert result.scores.means["mrr@10"] < 1.0


async def test_a_query_s_own_document_is_left_out_of_its_ranking_as_beir_does() -> None:
    """ArguAna and Quora hold each query in the corpus under the query's own id; BEIR's evaluation (and so
    every published figure) drops that document from the query's ranking."""
    arguments = BeirDataset(
        name="arguments",
        corpus={
            "a1": BeirDocument("a1", "", "Zoos protect endangered species."),
            "a2": BeirDocument("a2", "", "Zoos confine wild animals for show."),
            "a3": BeirDocument("a3", "", "Homework helps pupils learn."),
        },
        queries={"a1": "Zoos protect endangered species."},
        qrels={"a1": {"a2": 1}},
    )
    assert arguments.queries_in_corpus == 1

    async def itself_first(query: str, mode: str, top_k: int) -> list[search.SearchHit]:
        return [
            search.SearchHit(f"{doc_id}#0", doc_id, "", score, score, None, {})
            for doc_id, score in (("a1", 1.0), ("a2", 0.8), ("a3", 0.3))
        ]

    result = await run_mode(arguments, mode="dense", search=itself_first, top_k=3)
    assert result.scores.means["mrr@10"] == 1.0 and result.scores.means["ndcg@10"] == 1.0


def test_enough_chunks_are_requested_for_a_hundred_documents() -> None:
    assert chunks_to_request(chunks=5000, documents=5000) == 100
    assert chunks_to_request(chunks=5000, documents=5000, ranked=101) == 101, "one more when a query's own is left out"
    assert chunks_to_request(chunks=22000, documents=5000) == 500
    assert chunks_to_request(chunks=40, documents=30) == 40, "never more than there are"


class VectorsStore(FakeStore):
    """Holds hand-made vectors; `skip_best` plays an approximate search that misses the nearest one."""

    def __init__(self, vectors: dict[str, list[float]], *, skip_best: bool = False) -> None:
        super().__init__()
        self.vectors, self.skip_best = vectors, skip_best

    async def nearest(self, *, embedding, top_k, where=None) -> list[tuple[str, float]]:
        ranked = sorted(self.vectors, key=lambda cid: -sum(a * b for a, b in zip(embedding, self.vectors[cid])))
        ranked = ranked[1 : top_k + 1] if self.skip_best else ranked[:top_k]
        return [(cid, 0.0) for cid in ranked]


async def test_the_hnsw_check_compares_with_exact_search() -> None:
    vectors = {"a": [1.0, 0.0, 0.0], "b": [0.8, 0.6, 0.0], "c": [0.0, 1.0, 0.0], "d": [0.0, 0.0, 1.0]}
    queries = {"near a": [1.0, 0.0, 0.0], "near c": [0.0, 1.0, 0.0]}

    async def embed_query(text: str) -> list[float]:
        return queries[text]

    async def check(store: VectorsStore):
        return await ann_recall(queries=list(queries), embed_query=embed_query, store=store, embeddings=vectors, k=2)

    exact = await check(VectorsStore(vectors))
    assert (exact.recall, exact.k, exact.queries, exact.chunks) == (1.0, 2, 2, 4)
    assert exact.query_ms["p50"] >= 0
    # Missing the nearest of the exact top-2 each time: half of it is returned.
    assert (await check(VectorsStore(vectors, skip_best=True))).recall == 0.5


async def test_a_duplicate_vector_in_place_of_an_exact_neighbour_is_not_a_miss() -> None:
    vectors = {"a": [1.0, 0.0], "a-copy": [1.0, 0.0], "b": [0.0, 1.0]}

    async def embed_query(text: str) -> list[float]:
        return [1.0, 0.0]

    store = VectorsStore({"a-copy": vectors["a-copy"], "b": vectors["b"]})  # returns a-copy where a was expected
    report = await ann_recall(queries=["q"], embed_query=embed_query, store=store, embeddings=vectors, k=1)
    assert report.recall == 1.0


async def test_the_recording_store_forgets_deleted_chunks(parts) -> None:
    embedder, store = parts
    await ingest_all(embedder, store)
    before = len(store.embeddings)
    cat_chunks = [c for c in store.embeddings if c.startswith("cat#")]
    assert await store.delete(doc_id="cat", from_chunk_index=1) == len(cat_chunks) - 1
    assert sorted(c for c in store.embeddings if c.startswith("cat#")) == ["cat#0"]
    assert len(store.embeddings) == before - len(cat_chunks) + 1
    assert (await store.get_document("dog")).doc_id == "dog", "other calls pass through"
