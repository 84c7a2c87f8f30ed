"""One contract, three implementations: the in-memory fake, embedded Chroma and Chroma server."""
from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from services.retrieval.adapters import chroma_store
from services.retrieval.adapters.chroma_store import ChromaStore
from shared.filters import matches, parse_filter
from services.retrieval.ports import StoredChunk, VectorStore
from tests.unit.retrieval.fakes import FakeStore

pytestmark = pytest.mark.integration


def unit(*values: float) -> list[float]:
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


def chunk(doc_id: str, index: int, embedding: list[float], **meta) -> StoredChunk:
    metadata = {"chunk_index": index, "content_hash": meta.pop("content_hash", "h1"), "title": doc_id.upper(), **meta}
    return StoredChunk(f"{doc_id}#{index}", doc_id, f"{doc_id} chunk {index}", embedding, metadata)


@pytest.fixture(params=["fake", "embedded", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> AsyncIterator[VectorStore]:
    if request.param == "fake":
        yield FakeStore()
        return
    if request.param == "embedded":
        chroma = ChromaStore(collection=unique, path=tmp_path / "chroma")
    else:
        chroma = ChromaStore(collection=unique, url=request.getfixturevalue("chroma_server").url)
    yield chroma
    chroma.close()


async def test_query_ranks_by_cosine_distance_and_filters(store: VectorStore) -> None:
    await store.upsert(
        [
            chunk("a", 0, unit(1, 0, 0), category="x"),
            chunk("a", 1, unit(1, 1, 0), category="y"),
            chunk("b", 0, unit(0, 0, 1), category="x"),
        ]
    )
    hits = await store.query(embedding=unit(1, 0.1, 0), top_k=3)
    assert [h.chunk_id for h in hits] == ["a#0", "a#1", "b#0"]
    assert hits[0].distance == pytest.approx(1 - unit(1, 0.1, 0)[0], abs=1e-4)
    assert hits[2].distance == pytest.approx(1.0, abs=1e-4)
    assert hits[0].metadata["title"] == "A" and hits[0].content == "a chunk 0" and hits[0].doc_id == "a"
    filtered = await store.query(embedding=unit(1, 0.1, 0), top_k=3, where={"category": "x", "doc_id": "b"})
    assert [h.chunk_id for h in filtered] == ["b#0"]
    assert await store.query(embedding=unit(1, 0, 0), top_k=1) != []
    nearest = await store.nearest(embedding=unit(1, 0.1, 0), top_k=3)
    assert [cid for cid, _ in nearest] == ["a#0", "a#1", "b#0"]
    assert [d for _, d in nearest] == pytest.approx([h.distance for h in hits], abs=1e-6)
    assert await store.nearest(embedding=unit(1, 0.1, 0), top_k=3, where={"category": "y"}) == [("a#1", pytest.approx(hits[1].distance, abs=1e-6))]


async def test_documents_are_listed_and_deleted(store: VectorStore) -> None:
    await store.upsert([chunk("a", i, unit(1, i, 0)) for i in range(3)] + [chunk("b", 0, unit(0, 1, 0), url="http://b")])
    listed = await store.list_documents()
    assert [(d.doc_id, d.chunks) for d in listed] == [("a", 3), ("b", 1)]
    assert listed[1].metadata == {"title": "B", "url": "http://b", "content_hash": "h1"}
    info = await store.get_document("a")
    assert info is not None and info.content_hashes == frozenset({"h1"})
    assert await store.delete(doc_id="a", from_chunk_index=1) == 2
    assert (await store.get_document("a")).chunks == 1
    assert await store.delete(doc_id="a") == 1
    assert await store.get_document("a") is None
    assert await store.delete(doc_id="a") == 0


async def test_documents_are_listed_a_page_at_a_time_after_a_doc_id(store: VectorStore) -> None:
    names = ["a", "a#b", "b/c", "b", "ü.md", "c"]  # a '#' in a doc_id, a path, beyond ASCII
    await store.upsert([chunk(name, i, unit(1, n, i)) for n, name in enumerate(names) for i in range(n % 2 + 1)])
    first = await store.document_page(after=None, limit=4)
    assert [(d.doc_id, d.chunks) for d in first.documents] == [("a", 1), ("a#b", 2), ("b", 2), ("b/c", 1)]
    assert (first.total, first.more) == (6, True)
    assert first.documents[1].metadata["title"] == "A#B" and first.documents[1].content_hashes == frozenset({"h1"})
    rest = await store.document_page(after="b/c", limit=4)
    assert ([d.doc_id for d in rest.documents], rest.total, rest.more) == (["c", "ü.md"], 6, False)
    between = await store.document_page(after="a$", limit=1)  # a doc_id that is not stored still places the page
    assert ([d.doc_id for d in between.documents], between.more) == (["b"], True)
    assert (await store.document_page(after="ü.md", limit=4)).documents == []


async def test_upsert_overwrites_by_chunk_id(store: VectorStore) -> None:
    await store.upsert([chunk("a", 0, unit(1, 0), content_hash="old")])
    await store.upsert([chunk("a", 0, unit(0, 1), content_hash="new")])
    (info,) = await store.list_documents()
    assert info.content_hashes == frozenset({"new"}) and info.chunks == 1
    assert await store.heartbeat() is True


@pytest.fixture(params=["fake", "embedded", "server"])
async def two_writers(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> tuple[VectorStore, VectorStore]:
    """Two stores on one index, as two retrieval replicas see it."""
    if request.param == "fake":
        first = FakeStore()
        return first, FakeStore(shared_with=first)
    if request.param == "embedded":
        return ChromaStore(collection=unique, path=tmp_path / "chroma"), ChromaStore(collection=unique, path=tmp_path / "chroma")
    server = request.getfixturevalue("chroma_server")
    return ChromaStore(collection=unique, url=server.url), ChromaStore(collection=unique, url=server.url)


async def test_concurrent_writes_all_land_and_a_chunk_written_twice_keeps_the_later_write(store: VectorStore) -> None:
    writes = [[chunk(f"d{d}", i, unit(1, d, i)) for i in range(3)] for d in range(10)]
    writes.append([chunk("d0", 0, unit(0, 0, 1), content_hash="again")])
    await asyncio.gather(*(store.upsert(w) for w in writes))
    listed = await store.list_documents()
    assert [(d.doc_id, d.chunks) for d in listed] == [(f"d{d}", 3) for d in range(10)]
    (first,) = await store.get_chunks(ids=["d0#0"], with_embeddings=True)
    assert first.metadata["content_hash"] == "again" and first.embedding == pytest.approx(unit(0, 0, 1), abs=1e-6)


async def test_chroma_writes_of_concurrent_callers_share_upsert_calls(tmp_path: Path, unique: str) -> None:
    store = ChromaStore(collection=unique, path=tmp_path / "chroma")
    await store.open()
    calls: list[int] = []
    collection = store._connect().chunks
    original = collection.upsert

    def counting_upsert(**kwargs):
        calls.append(len(kwargs["ids"]))
        return original(**kwargs)

    collection.upsert = counting_upsert
    await store.upsert([chunk("warm", 0, unit(1, 0))])
    await asyncio.gather(*(store.upsert([chunk(f"d{d}", i, unit(1, d)) for i in range(2)]) for d in range(12)))
    assert sum(calls) == 25 and len(calls) <= 3, f"12 concurrent writes took {len(calls) - 1} upsert calls"
    assert len(await store.list_documents()) == 13


async def test_chunks_are_read_back_by_id_by_document_or_all(store: VectorStore) -> None:
    await store.upsert([chunk("a", 0, unit(1, 0)), chunk("a", 1, unit(0, 1)), chunk("b", 0, unit(1, 1), page=2)])
    by_id = await store.get_chunks(ids=["a#1", "b#0", "nope#0"], with_embeddings=True)
    assert sorted(c.chunk_id for c in by_id) == ["a#1", "b#0"]
    b0 = next(c for c in by_id if c.chunk_id == "b#0")
    assert b0.doc_id == "b" and b0.content == "b chunk 0" and b0.metadata["page"] == 2
    assert b0.embedding == pytest.approx(unit(1, 1), abs=1e-6)
    by_doc = await store.get_chunks(doc_ids=["a"])
    assert sorted(c.chunk_id for c in by_doc) == ["a#0", "a#1"] and all(c.embedding == [] for c in by_doc)
    assert len(await store.get_chunks()) == 3
    assert await store.get_chunks(ids=[]) == []


async def test_each_writer_sees_the_documents_the_other_wrote(two_writers) -> None:
    first, second = two_writers
    changed, cursor1 = await first.changes(None)
    assert changed is None, "no cursor yet: reload everything"
    _, cursor2 = await second.changes(None)
    await first.upsert([chunk("a", 0, unit(1, 0)), chunk("b", 0, unit(0, 1))])
    await second.upsert([chunk("c", 0, unit(1, 1))])
    assert await second.delete(doc_id="zzz") == 0  # deleting nothing is no change

    changed, cursor1 = await first.changes(cursor1)
    assert changed == {"c"}, "its own writes are not reported back"
    changed, cursor2 = await second.changes(cursor2)
    assert changed == {"a", "b"}
    await second.delete(doc_id="a")
    changed, cursor1 = await first.changes(cursor1)
    assert changed == {"a"}
    assert (await first.changes(cursor1))[0] == set() and (await second.changes(cursor2))[0] == set()


FILTERS = [
    {"category": "x"},
    {"category": {"$ne": "x"}},
    {"category": {"$in": ["y", "z"]}},
    {"category": {"$nin": ["y"]}},
    {"page": 2},
    {"page": 2.0},
    {"page": {"$gte": 2}},
    {"page": {"$gt": 1, "$lte": 3}},
    {"page": {"$in": [1, 3.0]}},  # a whole-number field: 3.0 is read as 3
    {"score": {"$in": [1, 0.25]}},  # ints and floats on a field of fractions
    {"score": {"$lt": 0.5}},
    {"draft": True},
    {"draft": {"$ne": True}},
    {"published": {"$gte": "2024-05-01"}},
    {"doc_id": "b", "page": {"$lt": 10}},
    {"page": "2"},
    # Fractions against a field of whole numbers (some stored as floats): Chroma cuts the fraction off before
    # comparing it with an integer, so 2 == 2.5 there unless the clause says otherwise.
    {"level": 2.5},
    {"level": {"$ne": 2.5}},
    {"level": {"$in": [1, 2.5]}},
    {"level": {"$in": [2, 2.5]}},
    {"level": {"$nin": [2, 2.5]}},
    {"level": {"$nin": [2.5, -2.5]}},
    {"level": {"$lt": 2.5}},
    {"level": {"$lte": -2.5}},
    {"level": {"$gt": -2.5}},
    {"level": {"$gte": 2.5}},
    {"level": {"$gt": 1.5, "$lt": 2.75}},
    {"published": {"$lt": "2024-05-01T00:00:00.5+00:00"}},
]


@pytest.mark.parametrize("where", FILTERS, ids=[str(f) for f in FILTERS])
async def test_filters_select_exactly_what_the_keyword_leg_selects(store: VectorStore, where: dict) -> None:
    """Chroma's `where` and shared.filters.matches must agree, or modes would disagree."""
    metas = [
        {"category": "x", "page": 1, "score": 0.25, "draft": True, "published": 1714521600, "level": 2},
        {"category": "y", "page": 2, "score": 0.75, "draft": False, "published": 1714521599, "level": -2},
        {"category": "z", "page": 3.5, "level": 2.5},
        {"page": "2", "level": -3},
        {"level": 2.0},
        {"level": True},
    ]
    await store.upsert([chunk(doc, i, unit(1, i + 1), **meta) for i, (doc, meta) in enumerate(zip("abcdef", metas))])
    hits = await store.query(embedding=unit(1, 1), top_k=10, where=where)
    expected = {c.chunk_id for c in await store.get_chunks() if matches(parse_filter(where), c.metadata | {"doc_id": c.doc_id})}
    assert {h.chunk_id for h in hits} == expected


async def test_hnsw_parameters_are_set_and_ef_search_follows_settings(tmp_path: Path, unique: str) -> None:
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    store = ChromaStore(collection=unique, path=tmp_path / "chroma", ef_search=77, ef_construction=150, max_neighbors=24)
    await store.upsert([chunk("a", 0, unit(1, 0))])
    # Closed first, as a restarted service's store would be: a second embedded client writing the same files
    # while the first still holds them can find SQLite locked ("database is locked").
    store.close()
    reopened = ChromaStore(collection=unique, path=tmp_path / "chroma", ef_search=120)
    assert await reopened.get_document("a") is not None
    reopened.close()
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"), settings=ChromaSettings(anonymized_telemetry=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Chroma's, about collections made without an embedding function
        hnsw = client.get_collection(unique).configuration["hnsw"]
    assert hnsw["space"] == "cosine" and hnsw["ef_search"] == 120
    assert (hnsw["ef_construction"], hnsw["max_neighbors"]) == (150, 24), "fixed when the collection was created"


async def test_concurrent_searches_share_chroma_calls_and_each_gets_its_own_answer(tmp_path: Path, unique: str) -> None:
    store = ChromaStore(collection=unique, path=tmp_path / "chroma")
    await store.upsert([chunk(f"d{d}", 0, unit(1, d, 0), category="even" if d % 2 == 0 else "odd") for d in range(8)])
    collection = store._connect().chunks
    calls: list[int] = []
    original = collection.query

    def counting_query(**kwargs):
        calls.append(len(kwargs["query_embeddings"]))
        return original(**kwargs)

    collection.query = counting_query
    await store.nearest(embedding=unit(1, 0, 0), top_k=1)  # warm: the first call goes alone
    calls.clear()
    plain = [store.nearest(embedding=unit(1, d, 0), top_k=1) for d in range(8)]
    filtered = [store.nearest(embedding=unit(1, d, 0), top_k=1, where={"category": "odd"}) for d in range(8)]
    results = await asyncio.gather(*plain, *filtered)
    assert [r[0][0] for r in results[:8]] == [f"d{d}#0" for d in range(8)], "each query its own nearest chunk"
    assert all(r[0][0] in {f"d{d}#0" for d in (1, 3, 5, 7)} for r in results[8:]), "the filter applied to its own queries"
    assert sum(calls) == 16 and len(calls) <= 4, f"16 concurrent searches took {len(calls)} Chroma calls"


async def test_a_search_chroma_rejects_fails_alone(tmp_path: Path, unique: str) -> None:
    store = ChromaStore(collection=unique, path=tmp_path / "chroma")
    await store.upsert([chunk("a", 0, unit(1, 0)), chunk("b", 0, unit(0, 1))])
    wrong_size = store.nearest(embedding=[1.0, 0.0, 0.0], top_k=1)  # the collection's vectors have 2 dimensions
    good = store.nearest(embedding=unit(1, 0), top_k=1)
    bad, fine = await asyncio.gather(wrong_size, good, return_exceptions=True)
    assert isinstance(bad, Exception) and fine == [("a#0", pytest.approx(0.0, abs=1e-5))]


async def test_reading_everything_while_another_writer_deletes_skips_no_other_chunk(
    tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full read comes in pages; a chunk of an earlier page deleted meanwhile (by another replica) once
    shifted the later pages and hid a chunk that never changed, until the next full reload."""
    monkeypatch.setattr(chroma_store, "_PAGE", 5)
    store = ChromaStore(collection=unique, path=tmp_path / "chroma")
    await store.upsert([chunk(f"doc{n:02d}", 0, unit(1, n)) for n in range(20)])
    first_page_read = False
    run = store._run

    async def deleting_after_the_first_page(operation):
        nonlocal first_page_read
        result = await run(operation)
        if isinstance(result, dict) and result.get("documents") and not first_page_read:
            first_page_read = True
            await store.delete(doc_id=result["ids"][0].split("#")[0])  # another replica's delete, meanwhile
        return result

    monkeypatch.setattr(store, "_run", deleting_after_the_first_page)
    read = {c.chunk_id for c in await store.get_chunks()}
    left = {c.chunk_id for c in await ChromaStore(collection=unique, path=tmp_path / "chroma").get_chunks()}
    assert first_page_read and len(left) == 19
    assert left <= read  # every chunk still stored was read


def _open_files_under(path: Path) -> list[str]:
    return [f.path for f in psutil.Process().open_files() if Path(f.path).is_relative_to(path)]


def _connections_to(port: int) -> set[int]:
    """The local ports of this process's open connections to `port`."""
    return {
        c.laddr.port for c in psutil.Process().net_connections("tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    }


async def test_closing_an_embedded_store_lets_go_of_its_files_and_its_data_stays(tmp_path: Path, unique: str) -> None:
    """Chroma keeps a client's system, with its open files and loaded index, for as long as the process
    lives unless the client is closed: `cairn eval` and a process that opens many stores held them all."""
    store = ChromaStore(collection=unique, path=tmp_path / "chroma")
    await store.upsert([chunk("a", 0, unit(1, 0, 0))])
    assert [cid for cid, _ in await store.nearest(embedding=unit(1, 0, 0), top_k=1)] == ["a#0"]
    assert _open_files_under(tmp_path / "chroma")

    store.close()
    store.close()  # a second close does nothing

    assert _open_files_under(tmp_path / "chroma") == []
    reopened = ChromaStore(collection=unique, path=tmp_path / "chroma")
    try:
        assert [c.chunk_id for c in await reopened.get_chunks()] == ["a#0"]
    finally:
        reopened.close()


async def test_closing_a_server_store_closes_its_connections(chroma_server, unique: str) -> None:
    others = _connections_to(chroma_server.port)  # other tests' stores on the same server
    store = ChromaStore(collection=unique, url=chroma_server.url)
    await store.upsert([chunk("a", 0, unit(1, 0, 0))])
    its_own = _connections_to(chroma_server.port) - others
    assert its_own

    store.close()

    assert its_own & _connections_to(chroma_server.port) == set()
