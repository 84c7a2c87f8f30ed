from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import bm25s
import numpy as np
import pytest

from services.retrieval.adapters import bm25_index
from services.retrieval.adapters.bm25_index import Bm25Index, tokenize
from shared.filters import matches, parse_filter
from services.retrieval.ports import CONTEXT_KEY, StoredChunk
from shared.errors import DependencyUnavailable

pytestmark = pytest.mark.unit


def chunk(doc_id: str, index: int, text: str, **meta) -> StoredChunk:
    return StoredChunk(f"{doc_id}#{index}", doc_id, text, [], {"chunk_index": index, **meta})


def loaded(*chunks: StoredChunk) -> Bm25Index:
    index = Bm25Index()
    index.load(list(chunks), doc_ids=None, since=index.generation)
    return index


def ids(hits) -> list[str]:
    return [h.chunk_id for h in hits]


def test_tokenizer_lowercases_drops_stopwords_and_stems() -> None:
    assert tokenize("The Running of the Bulls, and running bulls!") == ["run", "bull", "run", "bull"]
    assert tokenize("Studies studied studying") == ["studi", "studi", "studi"]
    assert tokenize("a I of to x") == []  # stopwords and one-letter words
    assert tokenize("Größe 42 café") == ["größe", "42", "café"]


def test_chinese_japanese_and_korean_runs_become_pairs_of_characters() -> None:
    assert tokenize("东京大学的研究") == ["东京", "京大", "大学", "学的", "的研", "研究"]
    assert tokenize("GPT模型の学習") == ["gpt", "模型", "型の", "の学", "学習"]  # the Latin word split off
    assert tokenize("서울에서 만나요") == ["서울", "울에", "에서", "만나", "나요"]
    assert tokenize("猫。Running cats") == ["run", "cat", "猫"]  # a lone character is a term of its own


def test_text_that_reads_the_same_gives_the_same_terms_however_its_unicode_is_written() -> None:
    # Decomposed accents (macOS, many PDFs), NFD Hangul and kana, and full-width letters in CJK text.
    assert tokenize("re\u0301sume\u0301 cafe\u0301") == tokenize("résumé café") == ["résumé", "café"]
    assert tokenize("\u1106\u116e\u11ab\u1109\u1165") == tokenize("문서")
    assert tokenize("\u30ab\u3099\u30a4\u30c8\u3099") == tokenize("ガイド")
    assert tokenize("ｃａｉｒｎ ｶﾞｲﾄﾞ") == tokenize("cairn ガイド")


def test_words_of_scripts_written_with_combining_vowel_signs_stay_whole() -> None:
    """Devanagari, Bengali and Tamil write vowels and viramas as combining marks, which are no word
    characters to Python's re: "हिन्दी" fell apart into one-letter pieces, dropped as too short."""
    assert tokenize("हिन्दी भाषा") == ["हिन्दी", "भाषा"]
    assert tokenize("বাংলা ভাষা") == ["বাংলা", "ভাষা"]
    assert tokenize("தமிழ் மொழி") == ["தமிழ்", "மொழி"]


def test_a_word_of_a_script_with_vowel_signs_is_found() -> None:
    index = loaded(
        chunk("ta", 0, "காப்புப்பிரதியை மீட்டெடுக்க சேவையை நிறுத்தவும்."),
        chunk("hi", 0, "हिन्दी में दस्तावेज़ खोजें।"),
        chunk("en", 0, "Stop the service before restoring a backup."),
    )
    assert ids(index.search_now(query="சேவையை", top_k=3)) == ["ta#0"]
    assert ids(index.search_now(query="हिन्दी", top_k=3)) == ["hi#0"]


def test_a_word_with_soft_hyphens_in_it_is_the_word() -> None:
    """Web pages put soft hyphens (&shy;) into long words as break points: they split the word in two."""
    assert tokenize("Bundes\u00adregierung retrie\u00adval") == tokenize("Bundesregierung retrieval")


def test_a_decomposed_query_finds_a_composed_text_and_back() -> None:
    index = loaded(chunk("fr", 0, "Le café est prêt."), chunk("nfd", 0, "Un re\u0301sume\u0301 du projet."))
    assert ids(index.search_now(query="cafe\u0301", top_k=3)) == ["fr#0"]
    assert ids(index.search_now(query="résumé", top_k=3)) == ["nfd#0"]


def test_a_word_inside_an_unspaced_sentence_is_found() -> None:
    index = loaded(
        chunk("zh", 0, "本研究使用机器学习方法分析了大量的医学图像数据。"),
        chunk("ja", 0, "東京都は日本の首都であり、多くの大学が集まっています。"),
        chunk("en", 0, "Machine learning methods for image analysis."),
    )
    assert ids(index.search_now(query="机器学习", top_k=3)) == ["zh#0"]
    assert ids(index.search_now(query="大学はどこ", top_k=3)) == ["ja#0"]
    assert ids(index.search_now(query="machine learning", top_k=3)) == ["en#0"]


def test_search_ranks_by_bm25_and_matches_word_forms() -> None:
    index = loaded(
        chunk("a", 0, "Mice were fed a diet rich in vitamins."),
        chunk("b", 0, "Vitamin D deficiency and vitamin supplements in older adults."),
        chunk("c", 0, "Unrelated text about the weather."),
    )
    hits = index.search_now(query="vitamin supplementation", top_k=5)
    assert ids(hits) == ["b#0", "a#0"]
    assert hits[0].score > hits[1].score > 0
    assert hits[0].content.startswith("Vitamin D") and hits[0].metadata["chunk_index"] == 0
    assert index.search_now(query="vitamins", top_k=1)[0].chunk_id == "b#0"
    assert index.search_now(query="zebra", top_k=3) == []
    with pytest.raises(ValueError):
        index.search_now(query="x", top_k=0)


def test_duplicate_chunks_rank_alike_whatever_top_k() -> None:
    copies = [chunk(f"doc{i:03d}", 0, "Results may vary; consult your physician.") for i in range(300)]
    index = loaded(*copies, chunk("other", 0, "A physician wrote this about vitamins and other results."))
    longest = ids(index.search_now(query="consult physician results", top_k=300))
    assert longest == [f"doc{i:03d}#0" for i in range(300)]
    for top_k in (1, 4, 10, 17, 100):
        assert ids(index.search_now(query="consult physician results", top_k=top_k)) == longest[:top_k]


def test_the_contextual_prefix_is_indexed_but_not_returned() -> None:
    index = loaded(chunk("a", 0, "It rose by 3%.", **{CONTEXT_KEY: "ACME revenue in 2023"}))
    (hit,) = index.search_now(query="acme revenue", top_k=1)
    assert hit.content == "It rose by 3%."


def test_local_adds_and_removes_show_at_once() -> None:
    index = loaded(chunk("a", 0, "apples and pears"))
    index.add([chunk("b", 0, "pears and plums"), chunk("b", 1, "plums only")])
    assert set(ids(index.search_now(query="plums", top_k=5))) == {"b#0", "b#1"}
    index.remove("b", from_chunk_index=1)
    assert ids(index.search_now(query="plums", top_k=5)) == ["b#0"]
    index.remove("b")
    assert index.search_now(query="plums", top_k=5) == [] and len(index) == 1
    index.add([chunk("a", 0, "cherries now")])  # same chunk id, new text
    assert ids(index.search_now(query="cherries", top_k=5)) == ["a#0"] and index.search_now(query="apples", top_k=5) == []


def test_filters_apply_before_top_k() -> None:
    index = loaded(*[chunk(f"d{i}", 0, "report " * (10 - i), page=i) for i in range(6)])
    hits = index.search_now(query="report", top_k=2, where=parse_filter({"page": {"$gte": 4}}))
    assert ids(hits) == ["d4#0", "d5#0"]
    assert ids(index.search_now(query="report", top_k=2, where=parse_filter({"doc_id": "d3"}))) == ["d3#0"]


def test_load_replaces_documents_but_keeps_newer_local_changes() -> None:
    index = loaded(chunk("a", 0, "old apples"), chunk("b", 0, "old bananas"))
    since = index.generation
    index.add([chunk("b", 0, "fresh bananas")])  # a local write while the store was being read
    skipped = index.load([chunk("a", 0, "new apples"), chunk("b", 0, "old bananas")], doc_ids=["a", "b"], since=since)
    assert skipped == {"b"}
    assert ids(index.search_now(query="new apples", top_k=1)) == ["a#0"]
    assert index.search_now(query="fresh", top_k=1)[0].content == "fresh bananas"
    # A full load drops documents the store no longer has (searches see it once built).
    index.load([chunk("c", 0, "cherries")], doc_ids=None, since=index.generation)
    assert index.search_now(query="apples", top_k=1) != [], "the previous matrix until the next build"
    index.build()
    assert len(index) == 1 and index.search_now(query="apples", top_k=1) == []


def test_an_index_never_loaded_is_unavailable_not_empty() -> None:
    with pytest.raises(DependencyUnavailable):
        Bm25Index().search_now(query="anything", top_k=1)
    assert loaded().search_now(query="anything", top_k=1) == []


def test_rebuilds_only_when_changed() -> None:
    index = loaded(chunk("a", 0, "apples"))
    index.build()
    assert not index.dirty
    index.add([chunk("b", 0, "bananas")])
    assert index.dirty
    index.search_now(query="bananas", top_k=1)
    assert not index.dirty


def test_a_search_beside_the_build_of_local_writes_waits_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two searches just after a local write: the second must not take the matrix the first is replacing."""
    index = loaded(chunk("a", 0, "apples"))
    index.search_now(query="apples", top_k=1)
    index.add([chunk("b", 0, "bread and butter")])
    building, release = _hold_builds(monkeypatch)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(index.search_now, query="bread", top_k=1)
        assert building.wait(5)
        second = pool.submit(index.search_now, query="bread", top_k=1)
        time.sleep(0.05)
        assert not second.done()  # waiting for the build, not answering from the old matrix
        release.set()
        assert ids(first.result(5)) == ids(second.result(5)) == ["b#0"]


def _hold_builds(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """(building, release): BM25 builds signal `building` when they start, then wait for `release`."""
    building, release = threading.Event(), threading.Event()
    real_index = bm25s.BM25.index

    def slow_index(self, *args, **kwargs):
        building.set()
        assert release.wait(5)
        return real_index(self, *args, **kwargs)

    monkeypatch.setattr(bm25s.BM25, "index", slow_index)
    return building, release


def test_a_search_beside_the_first_build_after_a_load_waits_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service is ready once the index is loaded and builds it in the background: a search that comes
    during that first build must wait for it, not answer from the empty matrix of before the load."""
    index = loaded(chunk("a", 0, "apples and pears"))
    building, release = _hold_builds(monkeypatch)
    with ThreadPoolExecutor(max_workers=2) as pool:
        background = pool.submit(index.build)
        assert building.wait(5)
        search = pool.submit(index.search_now, query="apples", top_k=1)
        time.sleep(0.05)
        assert not search.done()
        release.set()
        background.result(5)
        assert ids(search.result(5)) == ["a#0"]


def test_a_full_reload_keeps_the_entries_of_unchanged_chunks_and_replaces_changed_ones() -> None:
    def with_vector(c: StoredChunk, vector: list[float]) -> StoredChunk:
        return StoredChunk(c.chunk_id, c.doc_id, c.content, np.array(vector, dtype=np.float32), dict(c.metadata))

    first = [with_vector(chunk("a", 0, "Vitamin D in older adults."), [1, 0]),
             with_vector(chunk("b", 0, "Mice fed vitamins."), [0, 1]),
             with_vector(chunk("c", 0, "Weather reports."), [0.6, 0.8])]
    index = Bm25Index(exact_max_chunks=10)
    index.load(first, doc_ids=None, since=index.generation)
    before = dict(index._entries)
    again = [with_vector(first[0], [1, 0]),  # unchanged, read anew
             with_vector(first[1], [0.8, 0.6]),  # re-embedded
             with_vector(chunk("c", 0, "Weather reports.", category="news"), [0.6, 0.8])]  # new metadata
    index.load(again, doc_ids=None, since=index.generation)
    assert index._entries["a#0"] is before["a#0"], "nothing to replace: the entry itself stays"
    assert index._entries["b#0"] is not before["b#0"] and index._entries["b#0"].vector.tolist() == pytest.approx([0.8, 0.6])
    assert index._entries["c#0"] is not before["c#0"] and index._entries["c#0"].metadata["category"] == "news"
    index.build()
    dense = index.exact_dense()
    assert dense is not None and [hit[0] for hit in dense.nearest(np.array([[0.8, 0.6]], dtype=np.float32), 1)[0]] == ["b#0"]


def test_terms_of_documents_gone_leave_the_vocabulary_and_live_terms_stay_searchable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Documents that keep changing (tickets, logs, news) bring new names and numbers each time.
    monkeypatch.setattr(bm25_index, "_VOCAB_SLACK", 8)
    index = loaded(chunk("stable", 0, "Vitamin supplements for older adults."))
    for day in range(30):
        index.add([chunk("news", 0, " ".join(f"day{day}item{i}" for i in range(50)))])
        assert ids(index.search_now(query=f"day{day}item7", top_k=3)) == ["news#0"]
        index.remove("news")
    assert ids(index.search_now(query="vitamin adults", top_k=3)) == ["stable#0"]
    assert index.search_now(query="day29item7 day3item7", top_k=3) == []
    assert index.vocabulary_size < 300  # 1,504 terms were seen
    index.add([chunk("news", 0, "day3item7 returns")])
    assert ids(index.search_now(query="day3item7", top_k=3)) == ["news#0"]


def written(index: Bm25Index, write: str, chunks: list[StoredChunk]) -> None:
    """`chunks` indexed as an ingest writes them ("add") or as the keyword sync reads them ("load", then a build)."""
    if write == "add":
        index.add(chunks)
    else:
        index.load(chunks, doc_ids=[c.doc_id for c in chunks], since=index.generation)
        index.build()


@pytest.mark.parametrize("write", ["add", "load"])
def test_a_write_prepared_while_the_vocabulary_is_compacted_is_prepared_again(
    monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    monkeypatch.setattr(bm25_index, "_VOCAB_SLACK", 0)
    index = loaded(chunk("stable", 0, "Vitamin supplements for older adults."))
    index.add([chunk("old", 0, " ".join(f"obsolete{i} archived{i}" for i in range(20)))])
    index.remove("old")  # its 40 terms are now unused
    term_ids = index._term_ids

    def compacting_after_the_first_terms(tokens: list[str]) -> np.ndarray:
        found = term_ids(tokens)
        if index.dirty:
            index.build()  # drops the terms of "old" and renumbers the rest
        return found

    monkeypatch.setattr(index, "_term_ids", compacting_after_the_first_terms)
    written(index, write, [chunk("fresh", 0, "Zebrafish regenerate heart tissue.")])
    assert ids(index.search_now(query="zebrafish heart", top_k=3)) == ["fresh#0"]
    assert ids(index.search_now(query="vitamin", top_k=3)) == ["stable#0"]
    assert index.search_now(query="obsolete1 archived2", top_k=3) == []
    assert index.vocabulary_size < 40


@pytest.mark.parametrize("write", ["add", "load"])
def test_a_write_bringing_many_new_terms_is_not_compacted_away_by_every_build_while_it_is_prepared(
    monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    # A reload of documents other replicas ingested brings more new terms than the index uses: they alone
    # make a build count the vocabulary, and they are in no chunk until the reload is in.
    monkeypatch.setattr(bm25_index, "_VOCAB_SLACK", 0)
    index = loaded(chunk("stable", 0, "Vitamin supplements for older adults."))
    term_ids = index._term_ids
    interruptions = []

    def ingesting_and_searching_meanwhile(tokens: list[str]) -> np.ndarray:
        found = term_ids(tokens)
        if tokens[0].startswith("report0"):  # once per preparation of the big write
            assert len(interruptions) < 5, "the write is prepared again and again"
            interruptions.append(index.generation)
            index.add([chunk(f"ticket{len(interruptions)}", 0, f"pump valve {len(interruptions)}")])
            index.build()  # what a search does after this replica's own write
        return found

    monkeypatch.setattr(index, "_term_ids", ingesting_and_searching_meanwhile)
    reports = [chunk(f"report{n}", 0, " ".join(f"report{n}code{k}" for k in range(10))) for n in range(3)]
    written(index, write, reports)
    assert len(interruptions) == 2  # prepared again once only
    assert ids(index.search_now(query="report2code7", top_k=3)) == ["report2#0"]
    assert ids(index.search_now(query="vitamin", top_k=3)) == ["stable#0"]
    for report in reports:
        index.remove(report.doc_id)
    index.add([chunk("old", 0, " ".join(f"obsolete{i}" for i in range(80)))])
    index.remove("old")
    index.build()
    assert index.vocabulary_size < 20  # compaction runs again once the write is in


def test_writes_builds_and_searches_from_several_threads_beside_compactions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingestion, the keyword sync, the background build and searches at once, with the vocabulary compacted
    many times: every write is found as soon as it returns, no removed document is returned, nothing raises."""
    monkeypatch.setattr(bm25_index, "_VOCAB_SLACK", 16)
    stable = chunk("stable", 0, "Vitamin supplements for older adults.")
    store = {"stable": [stable]}  # what Chroma holds: written before the index, as SyncedStore does
    index = loaded(stable)
    index.build()
    problems: list[object] = []
    deadline = time.monotonic() + 1.5
    epochs = set()
    synced = ["stable", "stable"]  # documents the sync loaded, newest last

    def words(tag: str) -> str:
        return " ".join(f"{tag}w{k}" for k in range(20))

    def ingest(worker: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            doc = f"local{worker}x{n}"
            store[doc] = [chunk(doc, 0, words(doc))]
            index.add(store[doc])
            if ids(index.search_now(query=f"{doc}w3", top_k=3)) != [f"{doc}#0"]:
                problems.append(("not found after add", doc))
            del store[doc]
            index.remove(doc)
            if index.search_now(query=f"{doc}w3", top_k=3):
                problems.append(("found after remove", doc))

    def sync() -> None:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            doc = f"remote{n}"
            store[doc] = [chunk(doc, 0, words(doc))]
            index.load(store[doc], doc_ids=[doc], since=index.generation)
            synced.append(doc)
            store.pop(f"remote{n - 3}", None)
            index.load([], doc_ids=[f"remote{n - 3}"], since=index.generation)
            if n % 20 == 0:
                since = index.generation
                index.load([c for chunks in list(store.values()) for c in chunks], doc_ids=None, since=since)

    def build() -> None:  # the background build
        while time.monotonic() < deadline:
            index.build()
            epochs.add(index._vocab_epoch)

    def search() -> None:  # searches beside those builds, with no write of their own to wait for
        while time.monotonic() < deadline:
            if ids(index.search_now(query="vitamin adults", top_k=3)) != ["stable#0"]:
                problems.append("stable chunk not found")
            term = f"{synced[-2]}w5"  # its id moves at compactions, unlike those of the first terms seen
            if any(term not in hit.content for hit in index.search_now(query=term, top_k=3)):
                problems.append(("a hit without the term", term))

    def guarded(work, *args) -> None:
        try:
            work(*args)
        except Exception as exc:  # reported below: a thread would swallow it
            problems.append(exc)

    threads = [threading.Thread(target=guarded, args=(ingest, w)) for w in range(2)]
    threads += [threading.Thread(target=guarded, args=(work,)) for work in (sync, build, search)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert problems == []
    assert len(epochs) > 3  # the vocabulary was compacted while all this went on
    index.build()
    for doc, chunks in store.items():
        assert ids(index.search_now(query=tokenize(chunks[0].content)[-1], top_k=3)) == [f"{doc}#0"]
    assert len(index) == len(store)


def test_the_rows_a_filter_lets_through_are_worked_out_once_per_build() -> None:
    def with_vector(c: StoredChunk, vector: list[float]) -> StoredChunk:
        return StoredChunk(c.chunk_id, c.doc_id, c.content, np.array(vector, dtype=np.float32), dict(c.metadata))

    index = Bm25Index(exact_max_chunks=10)
    chunks = [with_vector(chunk("a", 0, "one", category="guide", page=2), [1, 0]),
              with_vector(chunk("b", 0, "two", category="faq", page=5), [0, 1]),
              with_vector(chunk("c", 0, "three", category="guide"), [0.6, 0.8])]
    index.load(chunks, doc_ids=None, since=index.generation)
    index.build()
    guides = parse_filter({"category": "guide"})
    dense, mask = index.exact_dense_matching(guides)
    assert dense is index.exact_dense() and mask.tolist() == [True, False, True]
    assert index.exact_dense_matching(parse_filter({"category": "guide"}))[1] is mask, "kept for the build"
    assert index.exact_dense_matching(parse_filter({"doc_id": "b", "page": {"$gte": 3}}))[1].tolist() == [False, True, False]
    assert index.exact_dense_matching(parse_filter({"page": {"$lt": 3}}))[1].tolist() == [True, False, False]
    index.add([with_vector(chunk("d", 0, "four", category="guide"), [0.8, 0.6])])
    assert index.exact_dense_matching(guides) is None, "this replica's own write is not built in yet"
    index.build()
    assert index.exact_dense_matching(guides)[1].tolist() == [True, False, True, True]


def test_a_filters_rows_are_those_it_matches_one_by_one() -> None:
    """The mask checks each distinct value once, and is kept per filter: values and filters that compare
    equal across types ({"flag": True} and {"flag": 1}) must still get each their own verdict."""
    values = [True, False, 1, 0, 1.0, 2.5, "1", "guide", "faq", None]
    chunks = []
    for i in range(60):
        meta = {"flag": values[i % len(values)], "category": values[(i * 7) % len(values)]}
        if i % 4 == 0:
            meta.pop("flag")
        chunks.append(StoredChunk(f"d{i % 9}#{i}", f"d{i % 9}", "text", np.array([1.0, i / 60], dtype=np.float32), meta))
    index = Bm25Index(exact_max_chunks=100)
    index.load(chunks, doc_ids=None, since=index.generation)
    index.build()
    dense = index.exact_dense()
    for raw in ({"flag": True}, {"flag": 1}, {"flag": {"$ne": 1}}, {"flag": {"$nin": [False]}},
                {"flag": {"$gte": 1}}, {"category": "guide", "flag": {"$lt": 2}}, {"doc_id": {"$in": ["d1", "d4"]}},
                {"doc_id": "d2", "category": {"$ne": "faq"}}, {"flag": {"$in": [True, False]}}, {"flag": {"$in": [1, 0]}}):
        where = parse_filter(raw)
        rows = [chunk_id for chunk_id, _ in sorted((c.chunk_id, c) for c in chunks)]
        expected = [matches(where, {**c.metadata, "doc_id": c.doc_id}) for _, c in sorted((c.chunk_id, c) for c in chunks)]
        found, mask = index.exact_dense_matching(where)
        assert found is dense and len(rows) == len(mask) and mask.tolist() == expected, raw
