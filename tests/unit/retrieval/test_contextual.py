"""Contextual chunking with a stand-in model and the real SQLite prefix cache."""
from __future__ import annotations

from pathlib import Path

import asyncio
import time

import pytest

from services.retrieval.adapters.bm25_index import keyword_indexed
from services.retrieval.adapters.prefix_cache import SqlitePrefixCache
from services.retrieval.contextual import GIVE_UP_AFTER, MAX_PREFIX_CHARS, Contextualizer, sha256
from services.retrieval.ingestion import NewDocument, ingest_document
from services.retrieval.ports import indexed_text
from services.retrieval.search import search
from shared.errors import DependencyUnavailable
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore

pytestmark = pytest.mark.unit

DOC = "# Report\n\n## Sales\n\nRevenue rose 3 % that quarter.\n\n## Staff\n\nThe team grew to twelve people.\n"


class FakeModel:
    """Answers "About: <the chunk's first words>"; fails for chunks containing any word in `fail_on`."""

    model_name = "fake-ctx"

    def __init__(self, fail_on: tuple[str, ...] = ()) -> None:
        self.prompts: list[str] = []
        self.fail_on = fail_on

    async def complete(self, *, system: str, user: str, max_tokens: int) -> str:
        self.prompts.append(user)
        chunk = user.split("<chunk>\n", 1)[1].split("\n</chunk>", 1)[0]
        if any(word in chunk for word in self.fail_on):
            raise DependencyUnavailable("llm", "the model endpoint answered 500")
        return f"  About:\n{' '.join(chunk.split()[:3])}  "


@pytest.fixture
def cache(tmp_path: Path):
    cache = SqlitePrefixCache(tmp_path / "prefixes.sqlite3")
    yield cache
    cache.close()


async def ingest(document: NewDocument, store: FakeStore, contextualizer: Contextualizer, embedder: FakeEmbedder | None = None):
    return await ingest_document(
        document, embedder=embedder or FakeEmbedder(), store=store, chunk_size=12, chunk_overlap=0, contextualizer=contextualizer
    )


async def test_the_prefixed_text_is_embedded_and_the_content_stays_the_chunk(cache) -> None:
    model, store, embedder = FakeModel(), FakeStore(), FakeEmbedder()
    result = await ingest(NewDocument(text=DOC, doc_id="r"), store, Contextualizer(model=model, cache=cache), embedder)
    assert result.chunks == 2 and len(model.prompts) == 2
    chunks = sorted(store.chunks.values(), key=lambda c: c.metadata["chunk_index"])
    assert chunks[0].content == "# Report\n\n## Sales\n\nRevenue rose 3 % that quarter."
    assert chunks[0].metadata["context"] == "About: # Report ##"
    assert embedder.embedded_texts == [indexed_text(c.content, c.metadata) for c in chunks]
    assert embedder.embedded_texts[0] == "About: # Report ##\n\n# Report\n\n## Sales\n\nRevenue rose 3 % that quarter."
    assert (await store.get_document("r")).metadata["context_model"] == "fake-ctx"
    assert "<document>\n# Report" in model.prompts[0], "the prompt shows the document"


async def test_re_ingesting_costs_no_model_call(cache) -> None:
    model, store = FakeModel(), FakeStore()
    contextualizer = Contextualizer(model=model, cache=cache)
    await ingest(NewDocument(text=DOC, doc_id="r"), store, contextualizer)
    assert (await ingest(NewDocument(text=DOC, doc_id="r"), store, contextualizer)).status == "unchanged"
    # A fresh index (or another replica) reuses the cached prefixes too.
    other = FakeStore()
    await ingest(NewDocument(text=DOC, doc_id="r"), other, contextualizer)
    assert len(model.prompts) == 2
    assert {c.metadata["context"] for c in other.chunks.values()} == {c.metadata["context"] for c in store.chunks.values()}


async def test_a_failed_prefix_leaves_the_chunk_plain_and_is_retried_next_time(cache) -> None:
    store = FakeStore()
    failing = Contextualizer(model=FakeModel(fail_on=("twelve",)), cache=cache)
    result = await ingest(NewDocument(text=DOC, doc_id="r"), store, failing)
    assert (result.status, result.chunks) == ("added", 2), "the optional enrichment never fails an ingest"
    contexts = {c.metadata["section"]: c.metadata.get("context") for c in store.chunks.values()}
    assert contexts == {"Sales": "About: # Report ##", "Staff": None}
    assert "context_model" not in (await store.get_document("r")).metadata

    healed = FakeModel()
    again = await ingest(NewDocument(text=DOC, doc_id="r"), store, Contextualizer(model=healed, cache=cache))
    assert again.status == "replaced"
    assert len(healed.prompts) == 1, "only the missing prefix is asked for; the other comes from the cache"
    assert all(c.metadata.get("context") for c in store.chunks.values())


async def test_after_repeated_failures_the_rest_of_the_document_is_not_tried(cache) -> None:
    model = FakeModel(fail_on=("w",))
    chunks = [f"w{i} text" for i in range(10)]
    prefixes = await Contextualizer(model=model, cache=cache, concurrency=1).prefixes(document="doc", chunks=chunks)
    assert prefixes == [None] * 10
    assert len(model.prompts) == GIVE_UP_AFTER


async def test_the_prompt_shows_only_the_start_of_a_long_document(cache) -> None:
    contextualizer = Contextualizer(model=FakeModel(), cache=cache, max_document_chars=100)
    prompt = contextualizer.prompt(document="a" * 100 + "b" * 50, chunk="the chunk")
    assert "a" * 100 + "\n[...]" in prompt and "b" not in prompt.replace("about", "")
    assert "<chunk>\nthe chunk\n</chunk>" in prompt


async def test_a_rambling_answer_is_cut_at_a_word(cache) -> None:
    class Rambler(FakeModel):
        async def complete(self, *, system: str, user: str, max_tokens: int) -> str:
            return "word " * 500

    (prefix,) = await Contextualizer(model=Rambler(), cache=cache).prefixes(document="d", chunks=["c"])
    assert len(prefix) <= MAX_PREFIX_CHARS and prefix.endswith("word")


async def test_the_cache_is_keyed_by_model_and_document(cache) -> None:
    await cache.put_many(model="m1", document_sha="d1", prefixes={"c1": "p1"})
    assert await cache.get_many(model="m1", document_sha="d1", chunk_shas=["c1", "c2"]) == {"c1": "p1"}
    assert await cache.get_many(model="m2", document_sha="d1", chunk_shas=["c1"]) == {}
    assert await cache.get_many(model="m1", document_sha="d2", chunk_shas=["c1"]) == {}


def test_bad_arguments_are_refused(cache) -> None:
    with pytest.raises(ValueError):
        Contextualizer(model=FakeModel(), cache=cache, concurrency=0)


async def test_contextual_chunking_is_on_only_when_asked_for_and_an_endpoint_is_set(tmp_path: Path, caplog) -> None:
    from services.retrieval.adapters.context_llm import build_contextualizer
    from services.retrieval.settings import Settings

    endpoint = {"llm_base_url": "http://127.0.0.1:9/v1", "llm_model": "m", "data_dir": tmp_path}
    assert build_contextualizer(Settings(**endpoint)) is None, "off by default"
    assert build_contextualizer(Settings(contextual_chunks=True, data_dir=tmp_path)) is None
    assert "CONTEXTUAL_CHUNKS is on but" in caplog.text
    for settings, force in ((Settings(contextual_chunks=True, **endpoint), False), (Settings(**endpoint), True)):
        contextualizer = build_contextualizer(settings, force=force)
        assert contextualizer is not None and contextualizer.model_name == "m"
        await contextualizer.close()


async def test_prefix_and_chunk_together_fit_what_the_model_embeds(cache) -> None:
    class Verbose(FakeModel):
        async def complete(self, *, system: str, user: str, max_tokens: int) -> str:
            return " ".join(f"context{i}" for i in range(40))

    store, small_model = FakeStore(), FakeEmbedder(max_tokens=40)
    text = " ".join(f"word{i}" for i in range(200))
    await ingest_document(
        NewDocument(text=text, doc_id="long"), embedder=small_model, store=store, chunk_size=256, chunk_overlap=0,
        contextualizer=Contextualizer(model=Verbose(), cache=cache),
    )
    assert all(small_model.count_tokens(t) <= 40 for t in small_model.embedded_texts)
    chunk = store.chunks["long#0"]
    assert chunk.metadata["context"] == " ".join(f"context{i}" for i in range(10)), "a quarter of 40 tokens"
    assert len(chunk.content.split()) == 30


async def test_a_prefix_without_spaces_is_cut_not_dropped(cache) -> None:
    """Chinese or Japanese sentences hold no spaces: a long prefix is cut at a character, and the
    document counts as situated, so ingesting it again is a no-op."""

    class Chinese(FakeModel):
        async def complete(self, *, system: str, user: str, max_tokens: int) -> str:
            return "这一段来自灯塔管理员手册的雾号一节，说明能见度低于一英里时每分钟鸣笛两次。"

    class PerCharacter(FakeEmbedder):  # as BERT tokenizers count Chinese: a token per character
        def count_tokens(self, text: str) -> int:
            return len("".join(text.split()))

    store, embedder = FakeStore(), PerCharacter(max_tokens=40)
    document = NewDocument(text="雾天值班。" * 10, doc_id="zh")
    contextualizer = Contextualizer(model=Chinese(), cache=cache)
    await ingest_document(document, embedder=embedder, store=store, chunk_size=30, chunk_overlap=0, contextualizer=contextualizer)
    assert store.chunks["zh#0"].metadata["context"] == "这一段来自灯塔管理员", "a quarter of 40 tokens"
    assert all(embedder.count_tokens(t) <= 40 for t in embedder.embedded_texts)
    again = await ingest_document(document, embedder=embedder, store=store, chunk_size=30, chunk_overlap=0, contextualizer=contextualizer)
    assert again.status == "unchanged"


class RecordingReranker:
    def __init__(self) -> None:
        self.passages: list[str] = []

    async def score(self, *, query: str, passages: list[str]) -> list[float]:
        self.passages += passages
        return [0.0] * len(passages)


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
async def test_the_reranker_reads_each_chunk_with_its_prefix(cache, mode: str) -> None:
    """The prefix says what "it" is in "Revenue rose 3 % that quarter": a cross-encoder given the chunk
    alone would push down the very chunks the prefix helped find."""
    embedder = FakeEmbedder()
    store, index, sync = keyword_indexed(FakeStore())
    await sync.refresh()
    await ingest(NewDocument(text=DOC, doc_id="r"), store, Contextualizer(model=FakeModel(), cache=cache), embedder)
    reranker = RecordingReranker()
    hits = await search(
        query="report sales revenue staff", top_k=5, mode=mode, embedder=embedder, store=store, keywords=index, reranker=reranker,
    )
    assert len(hits) == 2
    assert sorted(reranker.passages) == sorted(f"{h.metadata['context']}\n\n{h.content}" for h in hits)
    assert all("About:" not in h.content for h in hits), "the returned content stays the chunk"


async def test_an_empty_answer_is_logged_as_a_missing_prefix(cache, caplog) -> None:
    """No prefix means the document is re-done on every ingest: the operator must be able to see why."""

    class Silent(FakeModel):
        async def complete(self, *, system: str, user: str, max_tokens: int) -> str:
            return " \n "

    caplog.set_level("WARNING", logger="cairn.retrieval.contextual")
    prefixes = await Contextualizer(model=Silent(), cache=cache).prefixes(document=DOC, chunks=["a chunk", "another"])
    assert prefixes == [None, None]
    missing = [r for r in caplog.records if r.getMessage() == "document indexed with missing contextual prefixes"]
    assert [(r.missing, r.chunks) for r in missing] == [(2, 2)]


REASONING = {
    "a closed block": ("<think>\nThe user wants the chunk situated. It is about sales.\n</think>\n\nFrom the report, on sales.", "From the report, on sales."),
    "a block cut off by max_tokens": ("<think>\nOkay, the user wants me to situate this chunk within the report", None),
    "only its end (the template opened it)": ("Let me read the chunk first.\n</think>\nFrom the report, on sales.", "From the report, on sales."),
}


@pytest.mark.parametrize(("answer", "expected"), REASONING.values(), ids=REASONING.keys())
async def test_what_a_reasoning_model_thought_is_not_the_prefix(cache, answer: str, expected: str | None) -> None:
    """Open models served without a reasoning parser write their thoughts before the answer (as chat knows):
    they must be neither embedded nor keyword-indexed, nor cached as the chunk's prefix."""

    class Thinker(FakeModel):
        async def complete(self, *, system: str, user: str, max_tokens: int) -> str:
            return answer

    contextualizer = Contextualizer(model=Thinker(), cache=cache)
    assert await contextualizer.prefixes(document=DOC, chunks=["Revenue rose 3 % that quarter."]) == [expected]
    cached = await cache.get_many(
        model="fake-ctx", document_sha=contextualizer.cache_key(DOC), chunk_shas=[sha256("Revenue rose 3 % that quarter.")]
    )
    assert list(cached.values()) == ([expected] if expected else [])


async def test_prefixes_written_from_a_differently_cut_document_are_not_reused(cache) -> None:
    """The model saw only the first CONTEXTUAL_MAX_DOCUMENT_CHARS of the document: after that setting (or
    the answer's token limit) changes, its cached prefixes describe a prompt the model is no longer given."""
    long_document, chunks = "a" * 100 + "b" * 100, ["the chunk"]
    first = FakeModel()
    await Contextualizer(model=first, cache=cache, max_document_chars=100).prefixes(document=long_document, chunks=chunks)
    for changed in ({"max_document_chars": 150}, {"max_document_chars": 100, "max_tokens": 400}):
        model = FakeModel()
        await Contextualizer(model=model, cache=cache, **changed).prefixes(document=long_document, chunks=chunks)
        assert len(model.prompts) == 1, f"asked again after {changed}"
    same = FakeModel()
    await Contextualizer(model=same, cache=cache, max_document_chars=100).prefixes(document=long_document, chunks=chunks)
    assert same.prompts == [], "the same prompt is answered from the cache"

    short = FakeModel()
    await Contextualizer(model=short, cache=cache, max_document_chars=300).prefixes(document="short doc", chunks=chunks)
    await Contextualizer(model=short, cache=cache, max_document_chars=250).prefixes(document="short doc", chunks=chunks)
    assert len(short.prompts) == 1, "a document shown whole either way keeps its prefixes"


async def test_reasoning_cached_by_an_earlier_version_is_not_served(cache) -> None:
    """Prefixes cached before the thoughts of reasoning models were taken out may hold them."""
    model = FakeModel()
    contextualizer = Contextualizer(model=model, cache=cache)
    thought, cut_off = "Revenue rose 3 % that quarter.", "The team grew to twelve people."
    await cache.put_many(
        model="fake-ctx", document_sha=contextualizer.cache_key(DOC),
        prefixes={
            sha256(thought): "<think>\nThe user wants it situated.\n</think>\nFrom the report, on sales.",
            sha256(cut_off): "<think>\nOkay, the user wants me to situate",
        },
    )
    assert await contextualizer.prefixes(document=DOC, chunks=[thought, cut_off]) == [
        "From the report, on sales.", "About: The team grew",
    ]
    assert len(model.prompts) == 1, "a cached prefix that was all thoughts is asked for again"


class Slow(FakeModel):
    """Answers at once, except for chunks containing "slow", which it answers after a minute."""

    async def complete(self, *, system: str, user: str, max_tokens: int) -> str:
        answer = await super().complete(system=system, user=user, max_tokens=max_tokens)
        await asyncio.sleep(60 if "slow" in user.split("<chunk>", 1)[1] else 0)
        return answer


async def test_a_slow_endpoint_holds_a_document_up_only_until_its_deadline(cache, caplog) -> None:
    caplog.set_level("WARNING", logger="cairn.retrieval.contextual")
    chunks = ["fast one", "slow two", "fast three", "fast four"]
    contextualizer = Contextualizer(model=Slow(), cache=cache, concurrency=1, deadline_s=0.3)
    started = time.monotonic()
    prefixes = await contextualizer.prefixes(document=DOC, chunks=chunks)
    assert time.monotonic() - started < 5
    assert prefixes == ["About: fast one", None, None, None]
    late = [r for r in caplog.records if r.getMessage().startswith("contextual prefix deadline passed")]
    assert [(r.late, r.chunks) for r in late] == [(3, 4)], "logged once for the document"
    assert not [r for r in caplog.records if r.getMessage().startswith("contextual prefix failed")], "late is no failure"

    healed = FakeModel()
    again = await Contextualizer(model=healed, cache=cache, deadline_s=0.3).prefixes(document=DOC, chunks=chunks)
    assert again == ["About: fast one", "About: slow two", "About: fast three", "About: fast four"]
    assert len(healed.prompts) == 3, "the next ingest asks only for the prefixes the deadline cut off"


def test_a_deadline_must_be_positive(cache) -> None:
    with pytest.raises(ValueError):
        Contextualizer(model=FakeModel(), cache=cache, deadline_s=0)


async def test_a_prefix_cache_that_cannot_be_opened_costs_model_calls_not_the_ingest(tmp_path: Path) -> None:
    (tmp_path / "prefixes.sqlite3").mkdir()  # SQLite cannot open a folder: as a file locked, corrupt or on a full disk
    model, store = FakeModel(), FakeStore()
    contextualizer = Contextualizer(model=model, cache=SqlitePrefixCache(tmp_path / "prefixes.sqlite3"))
    result = await ingest(NewDocument(text=DOC, doc_id="r"), store, contextualizer)
    assert result.chunks == 2 and len(model.prompts) == 2
    assert all(indexed_text(c.content, c.metadata).startswith("About:") for c in store.chunks.values())
