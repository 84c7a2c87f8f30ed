"""The embedder around any encoder: one worker thread, micro-batched queries, LRU, documents batched."""
from __future__ import annotations

import asyncio
import threading

import pytest

from services.retrieval.encoding import QUERIES_PER_CALL, BatchingEmbedder
from tests.unit.retrieval.fakes import bag_of_words

pytestmark = pytest.mark.unit


class RecordingEncoder:
    """Hashed bags of words; records each encode call and the thread it ran on. `gate` holds an encode."""

    model_name = "fake"
    backend = "fake"
    max_tokens = 512

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.threads: set[str] = set()
        self.gate: threading.Event | None = None
        self.fail = False

    def encode(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        self.threads.add(threading.current_thread().name)
        if self.gate is not None:
            self.gate.wait(timeout=10)
        if self.fail:
            raise RuntimeError("model exploded")
        return [bag_of_words(t) for t in texts]

    def count_tokens(self, text: str) -> int:
        return len(text.split())


@pytest.fixture
def encoder() -> RecordingEncoder:
    return RecordingEncoder()


async def test_concurrent_queries_share_one_encode_call_off_the_event_loop(encoder: RecordingEncoder) -> None:
    embedder = BatchingEmbedder(encoder, batch_window_ms=50, max_query_batch=32)
    queries = [f"query number {i}" for i in range(12)]
    vectors = await asyncio.gather(*(embedder.embed_query(q) for q in queries))
    assert vectors == [bag_of_words(q) for q in queries], "each query gets its own vector"
    assert [len(c) for c in encoder.calls] == [12]
    assert encoder.threads and threading.main_thread().name not in encoder.threads
    embedder.close()


async def test_a_large_query_batch_is_encoded_in_calls_of_similar_length(encoder: RecordingEncoder) -> None:
    # One call pads every query to the longest; short ones go together, long ones together.
    embedder = BatchingEmbedder(encoder, batch_window_ms=50, max_query_batch=32)
    queries = [" ".join(["word"] * (1 + (7 * i) % 30)) + f" q{i}" for i in range(32)]
    vectors = await asyncio.gather(*(embedder.embed_query(q) for q in queries))
    assert vectors == [bag_of_words(q) for q in queries], "each query gets its own vector"
    assert [len(c) for c in encoder.calls] == [QUERIES_PER_CALL] * (32 // QUERIES_PER_CALL)
    assert max(len(q) for q in encoder.calls[0]) <= min(len(q) for q in encoder.calls[1]), "the shorter half first"
    assert len(encoder.threads) == 1
    embedder.close()


async def test_max_query_batch_of_one_turns_micro_batching_off(encoder: RecordingEncoder) -> None:
    embedder = BatchingEmbedder(encoder, batch_window_ms=5, max_query_batch=1)
    await asyncio.gather(*(embedder.embed_query(f"q{i}") for i in range(5)))
    assert [len(c) for c in encoder.calls] == [1, 1, 1, 1, 1]
    embedder.close()


async def test_repeated_queries_come_from_the_cache(encoder: RecordingEncoder) -> None:
    embedder = BatchingEmbedder(encoder, batch_window_ms=0, cache_size=2)
    first = await embedder.embed_query("alpha")
    assert await embedder.embed_query("alpha") == first
    assert encoder.calls == [["alpha"]] and embedder.cache_hits == 1
    await embedder.embed_query("beta")
    await embedder.embed_query("alpha")  # refreshes alpha, so beta is now the oldest
    await embedder.embed_query("gamma")  # evicts beta
    await embedder.embed_query("alpha")
    await embedder.embed_query("beta")
    assert encoder.calls == [["alpha"], ["beta"], ["gamma"], ["beta"]]
    embedder.close()


async def test_cache_size_zero_encodes_every_time(encoder: RecordingEncoder) -> None:
    embedder = BatchingEmbedder(encoder, batch_window_ms=0, cache_size=0)
    await embedder.embed_query("same")
    await embedder.embed_query("same")
    assert encoder.calls == [["same"], ["same"]]
    embedder.close()


async def test_documents_are_encoded_in_batches_and_keep_their_order(encoder: RecordingEncoder) -> None:
    embedder = BatchingEmbedder(encoder, batch_size=4)
    texts = [f"chunk {i} of a long document" for i in range(10)]
    assert await embedder.embed_documents(texts) == [bag_of_words(t) for t in texts]
    assert [len(c) for c in encoder.calls] == [4, 4, 2]
    assert await embedder.embed_documents([]) == []
    embedder.close()


async def test_concurrent_ingests_are_merged_into_full_batches(encoder: RecordingEncoder) -> None:
    embedder = BatchingEmbedder(encoder, batch_size=8)
    encoder.gate = threading.Event()
    first = asyncio.ensure_future(embedder.embed_documents(["warm up"]))
    await asyncio.sleep(0.05)  # the first encode is now running (and held)
    documents = [[f"doc {d} chunk {c}" for c in range(3)] for d in range(4)]
    rest = asyncio.ensure_future(asyncio.gather(*(embedder.embed_documents(doc) for doc in documents)))
    await asyncio.sleep(0.05)
    encoder.gate.set()
    await first
    results = await rest
    assert results == [[bag_of_words(t) for t in doc] for doc in documents]
    assert [len(c) for c in encoder.calls] == [1, 8, 4], "twelve chunks of four ingests in two encodes, not four"
    embedder.close()


async def test_document_texts_are_encoded_in_calls_of_similar_length(encoder: RecordingEncoder) -> None:
    # Each call pads its texts to the longest one: mixing short and long texts wastes the encode.
    embedder = BatchingEmbedder(encoder, batch_size=2)
    texts = ["a", "a b c d e f", "a b", "a b c d e f g h", "a b c", "a b c d"]
    assert await embedder.embed_documents(texts) == [bag_of_words(t) for t in texts], "results keep the input order"
    assert encoder.calls == [["a b c d e f g h", "a b c d e f"], ["a b c d", "a b c"], ["a b", "a"]]
    embedder.close()


async def test_a_query_waits_for_at_most_the_running_document_batch(encoder: RecordingEncoder) -> None:
    embedder = BatchingEmbedder(encoder, batch_size=2, batch_window_ms=0)
    encoder.gate = threading.Event()
    ingest = asyncio.ensure_future(embedder.embed_documents([f"c{i}" for i in range(6)]))
    await asyncio.sleep(0.05)
    query = asyncio.ensure_future(embedder.embed_query("urgent question"))
    await asyncio.sleep(0.05)
    encoder.gate.set()
    await asyncio.gather(ingest, query)
    assert encoder.calls[:2] == [["c0", "c1"], ["urgent question"]], "the query goes before the rest of the ingest"
    assert encoder.calls[2:] == [["c2", "c3"], ["c4", "c5"]]
    embedder.close()


async def test_an_encoder_error_reaches_every_waiting_query(encoder: RecordingEncoder) -> None:
    embedder = BatchingEmbedder(encoder, batch_window_ms=30)
    encoder.fail = True
    results = await asyncio.gather(*(embedder.embed_query(f"q{i}") for i in range(3)), return_exceptions=True)
    assert [str(r) for r in results] == ["model exploded"] * 3
    assert len(encoder.calls) == 1
    encoder.fail = False
    assert await embedder.embed_query("q0") == bag_of_words("q0"), "failures are not cached"
    embedder.close()


def test_arguments_are_checked(encoder: RecordingEncoder) -> None:
    for bad in ({"batch_size": 0}, {"max_query_batch": 0}, {"cache_size": -1}, {"batch_window_ms": -1}):
        with pytest.raises(ValueError):
            BatchingEmbedder(encoder, **bad)
    embedder = BatchingEmbedder(encoder)
    assert (embedder.max_tokens, embedder.count_tokens("two words"), embedder.backend) == (512, 2, "fake")
    embedder.close()
