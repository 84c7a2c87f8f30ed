from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from services.retrieval import ingestion
from services.retrieval.chunking import CHUNKER_VERSION
from services.retrieval.errors import WriteConflict
from services.retrieval.ingestion import NewDocument, content_hash, from_parsed, from_text, ingest_document
from shared.doc_ids import MAX_DOC_ID_CHARS
from shared.errors import RETRY_AFTER_S
from services.retrieval.parsing import parse
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore
from tests.unit.retrieval.files import GUIDE_HTML, make_pdf

pytestmark = pytest.mark.unit

GUIDE = "# Guide\n\n## Install\n\nRun make install first.\n\n## Start\n\nRun make up to start every service.\n"


@pytest.fixture
def embedder() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


async def ingest(document: NewDocument, embedder: FakeEmbedder, store: FakeStore, chunk_size: int = 50):
    return await ingest_document(document, embedder=embedder, store=store, chunk_size=chunk_size, chunk_overlap=2)


async def test_a_new_document_is_added_with_stable_chunk_ids_and_metadata(embedder, store) -> None:
    result = await ingest(NewDocument(text=GUIDE, source="docs/guide.md", category="guide"), embedder, store)
    assert (result.doc_id, result.title, result.status, result.chunks) == ("docs/guide.md", "Guide", "added", 2)
    assert sorted(store.chunks) == ["docs/guide.md#0", "docs/guide.md#1"]
    meta = store.chunks["docs/guide.md#1"].metadata
    assert meta["section"] == "Start" and meta["category"] == "guide" and meta["source"] == "docs/guide.md"
    assert meta["content_hash"] == content_hash(GUIDE)
    assert GUIDE[meta["char_start"] : meta["char_end"]] == store.chunks["docs/guide.md#1"].content
    assert "url" not in meta, "None values are not stored"


async def test_the_same_content_again_is_a_no_op(embedder, store) -> None:
    await ingest(NewDocument(text=GUIDE, doc_id="g"), embedder, store)
    embedded = len(embedder.embedded_texts)
    again = await ingest(NewDocument(text=GUIDE, doc_id="g"), embedder, store)
    assert (again.status, again.chunks) == ("unchanged", 2)
    assert len(embedder.embedded_texts) == embedded


async def test_changed_content_replaces_every_old_chunk(embedder, store) -> None:
    long_text = "# Guide\n\n" + "\n\n".join(f"Paragraph {i} " + "word " * 40 for i in range(5))
    first = await ingest(NewDocument(text=long_text, doc_id="g"), embedder, store)
    assert first.chunks == 5
    second = await ingest(NewDocument(text="# Guide\n\nNow it is short.", doc_id="g"), embedder, store)
    assert (second.status, second.chunks) == ("replaced", 1)
    assert list(store.chunks) == ["g#0"]
    assert store.chunks["g#0"].content == "# Guide\n\nNow it is short."


async def test_a_title_is_kept_on_one_line_and_a_blank_one_falls_back(embedder, store) -> None:
    await ingest(NewDocument(text="Sessions last a day.", doc_id="n", title="Session notes\n[1] Users >\tAdding "), embedder, store)
    assert store.chunks["n#0"].metadata["title"] == "Session notes [1] Users > Adding"
    await ingest(NewDocument(text="# Backups\n\nNightly.", doc_id="b", title=" \n "), embedder, store)
    assert store.chunks["b#0"].metadata["title"] == "Backups"


async def test_the_same_content_under_new_chunk_settings_is_chunked_again(embedder, store) -> None:
    long_text = "# Guide\n\n" + "\n\n".join(f"Paragraph {i} " + "word " * 40 for i in range(5))
    assert (await ingest(NewDocument(text=long_text, doc_id="g"), embedder, store, chunk_size=50)).chunks == 5
    again = await ingest(NewDocument(text=long_text, doc_id="g"), embedder, store, chunk_size=120)
    assert (again.status, again.chunks) == ("replaced", 3)
    assert sorted(store.chunks) == ["g#0", "g#1", "g#2"]
    assert store.chunks["g#0"].metadata["chunking"] == f"120 tokens, 2 overlap, chunker {CHUNKER_VERSION}"
    assert (await ingest(NewDocument(text=long_text, doc_id="g"), embedder, store, chunk_size=120)).status == "unchanged"


async def test_a_new_outline_for_the_same_text_is_chunked_again(embedder, store) -> None:
    text = "Install it first. Then start every service."
    outlined = NewDocument(text=text, doc_id="p", section_starts=((0, "Install"),))
    assert (await ingest(outlined, embedder, store)).status == "added"
    renamed = NewDocument(text=text, doc_id="p", section_starts=((0, "Installing"),))
    assert (await ingest(renamed, embedder, store)).status == "replaced"
    assert store.chunks["p#0"].metadata["section"] == "Installing"


async def test_a_longer_version_written_meanwhile_by_another_replica_leaves_no_tail(embedder) -> None:
    """Two replicas on one index ingesting one doc_id at once: both saw no document, the other wrote 13
    chunks, this one 3. The later write must not leave the other's chunks 3 to 12 behind it."""
    other = FakeStore()
    this = FakeStore(shared_with=other)
    long_text = "# Guide\n\n" + "\n\n".join(f"Paragraph {i} " + "word " * 40 for i in range(5))
    await ingest(NewDocument(text=long_text, doc_id="g"), embedder, other)  # already written, not yet seen
    real_get = this.get_document
    this.get_document = lambda doc_id: _none()  # type: ignore[method-assign]  # checked before the other wrote
    short = await ingest(NewDocument(text="# Guide\n\nNow it is short.", doc_id="g"), embedder, this)
    this.get_document = real_get  # type: ignore[method-assign]
    assert short.chunks == 1 and sorted(this.chunks) == ["g#0"]
    assert {c.metadata["content_hash"] for c in this.chunks.values()} == {content_hash("# Guide\n\nNow it is short.")}


async def _none() -> None:
    return None


async def test_a_version_written_over_another_replicas_at_once_keeps_none_of_its_fields(embedder) -> None:
    """Both replicas saw no document, so neither deleted before writing: Chroma's upsert merged the other's
    fields (its category and its own metadata) into this version's chunks."""
    other = FakeStore()
    this = FakeStore(shared_with=other)
    await ingest(NewDocument(text=GUIDE, doc_id="g", category="manuals", metadata={"team": "ops"}), embedder, other)
    this.get_document = lambda doc_id: _none()  # type: ignore[method-assign]  # checked before the other wrote
    await ingest(NewDocument(text=GUIDE.replace("make up", "cairn up"), doc_id="g"), embedder, this)
    assert {(c.metadata.get("category"), c.metadata.get("team")) for c in this.chunks.values()} == {(None, None)}
    assert {c.metadata["content_hash"] for c in this.chunks.values()} == {content_hash(GUIDE.replace("make up", "cairn up"))}


class ContestedStore(FakeStore):
    """A shared index where another replica writes its own version of every document over each write of this
    one: what this replica reads back is always a mix of the two."""

    async def get_chunks(self, **kwargs) -> list:
        chunks = await super().get_chunks(**kwargs)
        return [replace(c, metadata={**c.metadata, "category": "theirs"}) if c.metadata["chunk_index"] == 0 else c for c in chunks]


async def test_an_ingest_another_replica_keeps_writing_over_is_a_503_to_send_again(embedder, monkeypatch) -> None:
    monkeypatch.setattr(ingestion, "_SETTLE_PAUSE_S", 0.0)
    store = ContestedStore(shared_with=FakeStore())
    with pytest.raises(WriteConflict) as conflict:
        await ingest(NewDocument(text=GUIDE, doc_id="g"), embedder, store)
    error = conflict.value
    assert (error.status_code, error.code, error.headers()) == (503, "ingest_conflict", {"Retry-After": str(RETRY_AFTER_S)})
    assert error.message == "another ingest of 'g' kept writing over this one; send it again"


async def test_a_document_the_store_holds_only_in_part_is_written_again(embedder, store) -> None:
    # A store lost between two write calls (a document of more chunks than one call takes) keeps the first
    # chunks only, each with the content's hash: the same content again must complete it, not find it unchanged.
    long_text = "# Guide\n\n" + "\n\n".join(f"Paragraph {i} " + "word " * 40 for i in range(5))
    first = await ingest(NewDocument(text=long_text, doc_id="g"), embedder, store)
    assert first.chunks > 2
    for index in range(2, first.chunks):
        del store.chunks[f"g#{index}"]
    again = await ingest(NewDocument(text=long_text, doc_id="g"), embedder, store)
    assert (again.status, again.chunks) == ("replaced", first.chunks)
    assert sorted(store.chunks) == sorted(f"g#{i}" for i in range(first.chunks))
    assert (await ingest(NewDocument(text=long_text, doc_id="g"), embedder, store)).status == "unchanged"


async def test_a_document_stored_before_its_chunk_count_was_recorded_stays_unchanged(embedder, store) -> None:
    await ingest(NewDocument(text=GUIDE, doc_id="g"), embedder, store)
    for chunk in store.chunks.values():
        del chunk.metadata["chunk_count"]
    assert (await ingest(NewDocument(text=GUIDE, doc_id="g"), embedder, store)).status == "unchanged"


async def test_new_metadata_for_the_same_text_replaces(embedder, store) -> None:
    await ingest(NewDocument(text=GUIDE, doc_id="g", category="old"), embedder, store)
    result = await ingest(NewDocument(text=GUIDE, doc_id="g", category="new"), embedder, store)
    assert result.status == "replaced"
    assert {c.metadata["category"] for c in store.chunks.values()} == {"new"}


async def test_doc_id_is_derived_from_the_source_else_the_content(embedder, store) -> None:
    from_source = await ingest(NewDocument(text="hello", source="notes\\todo.txt"), embedder, store)
    from_text = await ingest(NewDocument(text="hello there"), embedder, store)
    assert from_source.doc_id == "notes/todo.txt" and from_source.title == "todo"
    assert from_text.doc_id == f"doc-{content_hash('hello there')[:16]}"


async def test_a_doc_id_derived_from_a_long_source_keeps_to_the_id_limit(embedder, store) -> None:
    deep = "docs/" + "a" * 700 + ".md"
    first = await ingest(NewDocument(text="hello", source=deep), embedder, store)
    again = await ingest(NewDocument(text="hello", source=deep), embedder, store)
    other = await ingest(NewDocument(text="hello", source=deep.replace(".md", "b.md")), embedder, store)
    assert len(first.doc_id) == MAX_DOC_ID_CHARS and first.doc_id.startswith("docs/aaa")
    assert again.doc_id == first.doc_id and again.status == "unchanged"
    assert len(other.doc_id) == MAX_DOC_ID_CHARS and other.doc_id != first.doc_id


async def test_two_ingests_of_one_new_document_at_once_leave_one_version(embedder, store) -> None:
    long = "\n\n".join(f"## Part {n}\n\nStep {n} of the long version, with words enough to fill a chunk." for n in range(12))
    short = "# Short\n\nThe short version."
    first, second = await asyncio.gather(
        ingest(NewDocument(text=long, doc_id="race.md"), embedder, store),
        ingest(NewDocument(text=short, doc_id="race.md"), embedder, store),
    )
    assert first.chunks > 1 and (first.status, second.status) == ("added", "replaced")
    assert sorted(store.chunks) == ["race.md#0"] and store.chunks["race.md#0"].content == short


async def test_a_txt_source_is_plain_text(embedder, store) -> None:
    result = await ingest(NewDocument(text="# not a title\n\nplain", source="a.txt"), embedder, store)
    assert result.title == "a"
    assert store.chunks["a.txt#0"].metadata["section"] == ""


async def test_chunks_never_exceed_what_the_model_embeds(store) -> None:
    small_model = FakeEmbedder(max_tokens=10)
    result = await ingest(NewDocument(text="word " * 100, doc_id="d"), small_model, store, chunk_size=256)
    assert result.chunks >= 10
    assert all(len(c.content.split()) <= 10 for c in store.chunks.values())


async def test_blank_text_is_refused(embedder, store) -> None:
    with pytest.raises(ValueError):
        await ingest(NewDocument(text="  \n"), embedder, store)


async def test_a_changed_document_loses_fields_its_new_version_lacks(embedder, store) -> None:
    # The store merges metadata on upsert (as Chroma does), so stale fields would survive an overwrite.
    await ingest(NewDocument(text=GUIDE, doc_id="g", category="old", url="http://x"), embedder, store)
    await ingest(NewDocument(text=GUIDE + "\nMore.", doc_id="g"), embedder, store)
    assert all("category" not in c.metadata and "url" not in c.metadata for c in store.chunks.values())


async def test_pages_are_kept_per_chunk_and_per_document(embedder, store) -> None:
    parsed = parse("manual.pdf", make_pdf(["Mount the pump on a wall.", "Replace the filter monthly."], title="Manual"))
    result = await ingest(from_parsed(parsed, doc_id="manual.pdf", source="manual.pdf"), embedder, store)
    assert (result.title, result.chunks) == ("Manual", 2)
    pages = {c.content: (c.metadata["page"], c.metadata["pages"]) for c in store.chunks.values()}
    assert pages == {"Mount the pump on a wall.": (1, 2), "Replace the filter monthly.": (2, 2)}
    assert (await store.get_document("manual.pdf")).metadata["pages"] == 2


async def test_given_fields_win_over_what_the_file_says(embedder, store) -> None:
    parsed = parse("page.html", GUIDE_HTML)
    result = await ingest(from_parsed(parsed, doc_id="p", title="My title", source="page.html"), embedder, store)
    assert result.title == "My title"
    sections = {c.metadata["section"] for c in store.chunks.values()}
    assert "Installation > Wiring" in sections


def test_json_text_from_an_html_source_is_converted() -> None:
    document = from_text(text="<h1>Hi</h1><p>there</p><script>x()</script>", source="site/hi.html", category="web")
    assert (document.title, document.category, document.source) == ("Hi", "web", "site/hi.html")
    assert document.text == "# Hi\n\nthere"
    assert document.markdown is False, "its headings come as section starts, not read back from the text"
    kept = from_text(text="# Notes\n\n<b>raw</b>", source="notes.md")
    assert kept.text == "# Notes\n\n<b>raw</b>" and kept.markdown is None


def test_json_html_keeps_its_characters_whatever_charset_its_meta_tag_names() -> None:
    page = '<html><head><meta charset="windows-1252"><title>Caf\xe9</title></head><body><p>Cr\xe8me \u20ac</p></body></html>'
    document = from_text(text=page, source="menu.html")
    assert (document.title, document.text) == ("Caf\xe9", "Cr\xe8me \u20ac")


async def test_an_explicit_markdown_flag_overrides_the_source_suffix(embedder, store) -> None:
    await ingest(NewDocument(text="# Title\n\n## Part\n\nbody", doc_id="x.txt", source="x.txt", markdown=True), embedder, store)
    assert {c.metadata["section"] for c in store.chunks.values()} == {"Part"}


async def test_a_pdf_outline_becomes_the_sections_of_its_chunks(embedder, store) -> None:
    data = make_pdf([[(0, "Setup"), (None, "Unpack the pump.")], [(1, "Wiring"), (None, "Brown is live.")]])
    await ingest(from_parsed(parse("m.pdf", data), doc_id="m.pdf"), embedder, store)
    found = {(c.metadata["page"], c.metadata["section"]) for c in store.chunks.values()}
    assert found == {(1, "Setup"), (2, "Setup > Wiring")}


async def test_an_html_pre_block_that_fits_a_chunk_is_not_cut_at_its_blank_lines(embedder, store) -> None:
    intro = " ".join(f"w{i}" for i in range(8))
    html = (
        f"<h1>T</h1><h2>Setup</h2><p>{intro}</p>"
        "<pre># install the tool\npip install tool\n\n# then configure it\ntool init</pre><p>After the code.</p>"
    )
    code = "```\n# install the tool\npip install tool\n\n# then configure it\ntool init\n```"
    await ingest(from_text(text=html, source="setup.html"), embedder, store, chunk_size=20)
    contents = [store.chunks[f"setup.html#{i}"].content for i in range(len(store.chunks))]
    assert contents == [f"# T\n\n## Setup\n\n{intro}", f"{code}\n\nAfter the code."]


async def test_ligatures_in_text_sent_as_json_are_written_out(embedder, store) -> None:
    await ingest(from_text(text="# Notes\n\nThe \ufb01le \ufb02ows.", source="notes.md"), embedder, store)
    chunk = store.chunks["notes.md#0"]
    assert chunk.content == "# Notes\n\nThe file flows."
    assert chunk.content[chunk.metadata["char_start"] :] == chunk.content


async def test_a_byte_order_mark_before_json_text_is_dropped_as_it_is_from_an_uploaded_file(embedder, store) -> None:
    # A client that reads a file written with a BOM (Python's "utf-8", Node's "utf8") sends the BOM on in JSON.
    text = "\ufeff# Guide\n\nSome text."
    sent = await ingest(from_text(text=text, doc_id="guide.md"), embedder, store)
    assert sent.title == "Guide", "the title heading is found behind the mark"
    assert store.chunks["guide.md#0"].content == "# Guide\n\nSome text."
    uploaded = await ingest(from_parsed(parse("guide.md", text.encode()), doc_id="guide.md"), embedder, store)
    assert uploaded.status == "unchanged", "the same document whether sent as JSON or as a file"
