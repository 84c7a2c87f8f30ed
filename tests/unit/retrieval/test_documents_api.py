"""POST /documents as JSON or file upload, GET /documents/{id}, and their error answers, with fakes behind."""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from services.retrieval.chunking import CHUNKER_VERSION
from services.retrieval.document_metadata import RESERVED_KEYS
from services.retrieval.main import create_app
from services.retrieval.settings import Settings
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore
from tests.unit.retrieval.files import GUIDE_HTML, make_pdf, pdf_encrypted_with_aes

pytestmark = pytest.mark.unit

TOKEN = "unit-test-token"
AUTH = {"X-Service-Token": TOKEN}
DOT_SEGMENT = "must not hold a '.' or '..' segment"
ENDS_IN_SIMILAR = "must not end in '/similar'"
LIMIT = 64 * 1024


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def client(tmp_path: Path, store: FakeStore) -> Iterator[TestClient]:
    settings = Settings(service_token=TOKEN, data_dir=tmp_path, max_upload_bytes=LIMIT)
    with TestClient(create_app(settings, embedder=FakeEmbedder(), store=store)) as client:
        yield client


def upload(client: TestClient, filename: str, data: bytes, media_type: str = "application/octet-stream", **fields: str):
    return client.post("/documents", files={"file": (filename, data, media_type)}, data=fields, headers=AUTH)


def test_a_pdf_upload_is_stored_with_pages_under_its_file_name(client: TestClient, store: FakeStore) -> None:
    data = make_pdf(["The pump needs a dry wall.", "Replace the filter monthly."], title="Pump manual")
    added = upload(client, "manual.pdf", data, "application/pdf", category="manuals")
    assert added.status_code == 200, added.text
    assert added.json() == {"doc_id": "manual.pdf", "title": "Pump manual", "status": "added", "chunks": 2}
    found = client.post("/search", json={"query": "filter monthly", "top_k": 1}, headers=AUTH).json()["results"][0]
    assert (found["doc_id"], found["metadata"]["page"], found["metadata"]["category"]) == ("manual.pdf", 2, "manuals")
    document = client.get("/documents/manual.pdf", headers=AUTH)
    assert document.status_code == 200
    assert document.json() == {
        "doc_id": "manual.pdf",
        "title": "Pump manual",
        "source": "manual.pdf",
        "url": None,
        "category": "manuals",
        "chunks": 2,
        "content_hash": store.chunks["manual.pdf#0"].metadata["content_hash"],
        "pages": 2,
        "context_model": None,
        "chunking": f"256 tokens, 32 overlap, chunker {CHUNKER_VERSION}",
        "metadata": {},
    }
    again = upload(client, "manual.pdf", data, "application/pdf", category="manuals")
    assert again.json()["status"] == "unchanged"


def test_form_fields_set_the_id_title_and_url_of_an_upload(client: TestClient) -> None:
    added = upload(client, "page.html", GUIDE_HTML, "text/html", doc_id="web/pump", title="Pumps", url="http://x/pump")
    assert added.json() == {"doc_id": "web/pump", "title": "Pumps", "status": "added", "chunks": added.json()["chunks"]}
    document = client.get("/documents/web/pump", headers=AUTH).json()
    assert (document["title"], document["source"], document["url"]) == ("Pumps", "page.html", "http://x/pump")
    hit = client.post("/search", json={"query": "brown wire live terminal", "top_k": 1}, headers=AUTH).json()["results"][0]
    assert hit["metadata"]["section"] == "Installation > Wiring"


def test_a_changed_upload_replaces_the_old_version(client: TestClient) -> None:
    assert upload(client, "notes.md", b"# Notes\n\nfirst").json()["status"] == "added"
    assert upload(client, "notes.md", b"# Notes\n\nsecond").json()["status"] == "replaced"
    assert upload(client, "notes.md", b"# Notes\n\nsecond").json()["status"] == "unchanged"


def test_an_unsupported_file_is_415_naming_it(client: TestClient) -> None:
    response = upload(client, "report.docx", b"PK\x03\x04")
    assert response.status_code == 415
    body = response.json()
    assert body["error"] == "unsupported_media_type" and "report.docx" in body["message"] and ".pdf" in body["message"]


@pytest.mark.parametrize(
    ("filename", "data"),
    [
        ("broken.pdf", b"%PDF-1.4 nonsense"),
        ("locked.pdf", pdf_encrypted_with_aes()),
        ("empty.txt", b""),
        ("latin1.md", "caf\xe9".encode("latin-1")),
    ],
)
def test_a_corrupt_or_empty_file_is_422_naming_it(client: TestClient, store: FakeStore, filename: str, data: bytes) -> None:
    response = upload(client, filename, data)
    assert response.status_code == 422
    assert response.json()["error"] == "unprocessable_document" and filename in response.json()["message"]
    assert not store.chunks


def test_a_body_over_the_limit_is_413(client: TestClient) -> None:
    big = upload(client, "big.txt", b"word " * (LIMIT // 5 + 10))
    assert big.status_code == 413 and big.json()["error"] == "payload_too_large"
    big_json = client.post("/documents", json={"text": "x" * (LIMIT + 1)}, headers=AUTH)
    assert big_json.status_code == 413


def test_a_streamed_body_without_length_is_cut_off_at_the_limit(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"text": "'
        for _ in range(LIMIT // 1024 + 2):
            yield b"x" * 1024
        yield b'"}'

    response = client.post("/documents", content=chunks(), headers=AUTH | {"Content-Type": "application/json"})
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("kwargs", "status", "error"),
    [
        ({"data": {"doc_id": "x"}, "files": {"other": ("a.md", b"# A", "text/markdown")}}, 422, "invalid_request"),
        ({"files": {"file": ("a.md", b"# A", "text/markdown")}, "data": {"title": "t" * 501}}, 422, "invalid_request"),
        ({"content": b"--nope\r\nbroken", "headers": {"Content-Type": "multipart/form-data; boundary=other"}}, 400, "bad_request"),
        ({"content": b"# plain", "headers": {"Content-Type": "text/markdown"}}, 415, "unsupported_media_type"),
    ],
)
def test_bad_upload_requests(client: TestClient, kwargs: dict, status: int, error: str) -> None:
    headers = AUTH | kwargs.pop("headers", {})
    response = client.post("/documents", headers=headers, **kwargs)
    assert response.status_code == status, response.text
    assert response.json()["error"] == error


def test_json_bodies_still_validate_as_before(client: TestClient) -> None:
    assert client.post("/documents", json={"text": " "}, headers=AUTH).json()["error"] == "invalid_request"
    malformed = client.post("/documents", content=b'{"text": ', headers=AUTH | {"Content-Type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["error"] == "malformed_json"
    html = client.post("/documents", json={"text": "<h1>Hi</h1><p>there</p>", "source": "hi.html"}, headers=AUTH)
    assert html.json()["title"] == "Hi"


def test_nan_is_refused_as_malformed_json_in_a_body_and_in_an_upload_field(client: TestClient, store: FakeStore) -> None:
    body = b'{"text": "Some text.", "metadata": {"score": NaN}}'
    sent = client.post("/documents", content=body, headers=AUTH | {"Content-Type": "application/json"})
    assert sent.status_code == 400, sent.text
    assert sent.json() == {
        "error": "malformed_json", "message": "request body is not valid JSON: NaN is not JSON (JSON numbers are finite)"
    }
    uploaded = upload(client, "notes.md", b"# Notes\n\ntext", metadata='{"score": -Infinity}')
    assert uploaded.status_code == 422, uploaded.text
    assert uploaded.json()["message"].startswith("metadata: metadata must be a JSON object: -Infinity is not JSON")
    assert not store.chunks


def test_a_key_named_twice_is_refused_not_the_last_one_taken(client: TestClient, store: FakeStore) -> None:
    body = b'{"text": "Some text.", "metadata": {"team": "ops", "team": "dev"}}'
    sent = client.post("/documents", content=body, headers=AUTH | {"Content-Type": "application/json"})
    assert sent.status_code == 400, sent.text
    assert sent.json() == {
        "error": "malformed_json", "message": 'request body is not valid JSON: duplicate key "team" in an object'
    }
    uploaded = upload(client, "notes.md", b"# Notes\n\ntext", metadata='{"team": "ops", "team": "dev"}')
    assert uploaded.status_code == 422, uploaded.text
    assert uploaded.json()["message"].startswith('metadata: metadata must be a JSON object: duplicate key "team"')
    assert not store.chunks


INVISIBLE = "\u200b\ufeff\u2060\u00ad \u200b\n"  # zero-width space, byte-order mark, word joiner, soft hyphen


def test_text_of_only_invisible_characters_is_refused_as_empty_text_is(client: TestClient, store: FakeStore) -> None:
    for text in (" \n", INVISIBLE):
        refused = client.post("/documents", json={"text": text, "source": "blank.md"}, headers=AUTH)
        assert refused.status_code == 422, refused.text
        assert refused.json()["message"].startswith("text: "), refused.text
    for filename, data in (("blank.md", INVISIBLE), ("blank.txt", "\ufeff" + INVISIBLE), ("blank.html", f"<p>{INVISIBLE}</p>")):
        uploaded = upload(client, filename, data.encode())
        assert uploaded.status_code == 422, uploaded.text
        assert uploaded.json()["error"] == "unprocessable_document" and filename in uploaded.json()["message"]
    headed = upload(client, "headed.md", f"---\ntitle: Draft\n---\n{INVISIBLE}".encode())
    assert headed.json()["message"] == "headed.md: no text after its front matter"
    assert not store.chunks
    kept = client.post("/documents", json={"text": f"{INVISIBLE}Some text.", "source": "kept.md"}, headers=AUTH)
    assert kept.status_code == 200, kept.text


NUL_REFUSAL = "must not contain NUL characters (U+0000)"
TEXT_FIELDS = ["doc_id", "title", "source", "url", "category"]


@pytest.mark.parametrize("field", ["text", *TEXT_FIELDS])
def test_a_nul_character_in_a_json_field_is_refused_naming_the_field(
    client: TestClient, store: FakeStore, field: str
) -> None:
    """A stray \\u0000 is refused as a file holding one is: it would not come back as sent (the chat's citations
    take it for their own marker, analytics stores it as U+FFFD)."""
    refused = client.post("/documents", json={"text": "Some text.", field: "notes\x00v2.md"}, headers=AUTH)
    assert refused.status_code == 422, refused.text
    assert (refused.json()["error"], refused.json()["message"]) == ("invalid_request", f"{field}: {NUL_REFUSAL}")
    assert not store.chunks


@pytest.mark.parametrize("field", [*TEXT_FIELDS, "metadata"])
def test_a_nul_character_in_an_upload_field_is_refused_naming_the_field(
    client: TestClient, store: FakeStore, field: str
) -> None:
    value = '{"note": "ops\\u0000"}' if field == "metadata" else "notes\x00v2.md"
    refused = upload(client, "notes.md", b"# Notes\n\ntext", **{field: value})
    assert refused.status_code == 422, refused.text
    message = "metadata field 'note': " + NUL_REFUSAL if field == "metadata" else NUL_REFUSAL
    assert (refused.json()["error"], refused.json()["message"]) == ("invalid_request", f"{field}: {message}")
    assert not store.chunks


@pytest.mark.parametrize(
    ("filename", "data"),
    [
        ("notes.md", b"# Notes\n\nab\x00c"),
        ("notes.txt", "ab\x00c".encode("utf-16")),
        ("page.html", b"<h1>Notes</h1><p>ab\x00c</p>"),
    ],
)
def test_a_text_file_holding_nul_is_refused_as_binary_whatever_its_format(
    client: TestClient, store: FakeStore, filename: str, data: bytes
) -> None:
    refused = upload(client, filename, data)
    assert refused.status_code == 422, refused.text
    assert refused.json() == {
        "error": "unprocessable_document", "message": f"{filename}: binary content, not text: it holds NUL characters (U+0000)"
    }
    assert not store.chunks


def test_no_nul_reaches_the_store_from_a_pdf_or_an_html_reference(client: TestClient, store: FakeStore) -> None:
    """A PDF's NUL is a glyph without a character, shown as nothing; HTML's `&#0;` is read as U+FFFD, as browsers do."""
    pdf = make_pdf(["Pump\x00 manual"], title="Pump\x00 guide")
    assert upload(client, "manual.pdf", pdf, "application/pdf").status_code == 200
    assert upload(client, "page.html", b"<h1>Notes</h1><p>ab&#0;c</p>", "text/html").status_code == 200
    contents = sorted(chunk.content for chunk in store.chunks.values())
    assert contents == ["# Notes\n\nab\ufffdc", "Pump manual"]
    assert client.get("/documents/manual.pdf", headers=AUTH).json()["title"] == "Pump guide"


def test_the_schema_refuses_nul_in_every_text_field(client: TestClient) -> None:
    """Said for clients and schema-driven tests, which otherwise send NUL as valid."""
    content = client.get("/openapi.json").json()["paths"]["/documents"]["post"]["requestBody"]["content"]
    json_fields = content["application/json"]["schema"]["properties"]
    form_fields = content["multipart/form-data"]["schema"]["properties"]
    schemas = [json_fields[name] for name in ["text", *TEXT_FIELDS]] + [form_fields[name] for name in TEXT_FIELDS]
    metadata_values = json_fields["metadata"]["anyOf"][0]["additionalProperties"]["anyOf"]
    metadata_text = next(choice for choice in metadata_values if choice["type"] == "string")
    for schema in [*schemas, metadata_text]:
        refusal = schema.get("not") or next(c["not"] for c in schema["anyOf"] if c["type"] == "string")
        assert re.search(refusal["pattern"], "a\x00b") and not re.search(refusal["pattern"], "a b.md"), schema


def test_getting_an_unknown_document_is_404(client: TestClient) -> None:
    response = client.get("/documents/no/such.md", headers=AUTH)
    assert response.status_code == 404 and response.json()["error"] == "not_found"


def test_openapi_offers_json_and_multipart_bodies(client: TestClient) -> None:
    post = client.get("/openapi.json").json()["paths"]["/documents"]["post"]
    content = post["requestBody"]["content"]
    assert set(content) == {"application/json", "multipart/form-data"}
    form = content["multipart/form-data"]
    assert form["schema"]["required"] == ["file"]
    assert "text/markdown" in form["encoding"]["file"]["contentType"]
    # A form field is a string; an unfilled one ("") is taken as absent.
    assert form["schema"]["properties"]["doc_id"] == {
        "type": "string", "maxLength": 512, "title": "Doc Id", "description": "Default: the file name.",
        # One line, no NUL, no '.' or '..' segment, no /similar at the end: such a doc_id could be neither read nor
        # deleted, and NUL is refused in every text field.
        "not": {"pattern": "\n|\\x00|" + r"(?:^|[/\\])\.{1,2}(?:[/\\]|$)|[/\\]similar$"},
    }
    assert {"400", "413", "415", "422"} <= set(post["responses"])


def test_an_unfilled_form_field_is_taken_as_absent(client: TestClient) -> None:
    files = {"file": ("notes.md", b"# Notes\n\nSome text.", "text/markdown")}
    response = client.post("/documents", files=files, data={"doc_id": "", "title": ""}, headers=AUTH)
    assert response.status_code == 200
    assert (response.json()["doc_id"], response.json()["title"]) == ("notes.md", "Notes")


@pytest.mark.parametrize("title", ["", " ", "\n"])
def test_a_blank_json_title_falls_back_to_the_heading_as_a_missing_one_does(client: TestClient, title: str) -> None:
    response = client.post("/documents", json={"doc_id": "n", "title": title, "text": "# Notes\n\nSome text."}, headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.json()["title"] == "Notes"


def test_a_file_without_a_suffix_is_read_by_its_content_type(client: TestClient) -> None:
    files = {"file": ("notes", b"Plain words.", "text/plain")}
    assert client.post("/documents", files=files, headers=AUTH).json()["doc_id"] == "notes"


def test_a_documents_own_metadata_is_kept_shown_and_compared_on_re_ingest(client: TestClient) -> None:
    body = {"doc_id": "release", "text": "# Release\n\nVersion 2 ships.", "metadata": {"team": "ops", "published": 1714521600, "draft": False}}
    assert client.post("/documents", json=body, headers=AUTH).json()["status"] == "added"
    shown = client.get("/documents/release", headers=AUTH).json()
    assert shown["metadata"] == {"team": "ops", "published": 1714521600, "draft": False}
    assert client.post("/documents", json=body, headers=AUTH).json()["status"] == "unchanged"
    retitled = body | {"metadata": {"team": "platform", "published": 1714521600}}
    assert client.post("/documents", json=retitled, headers=AUTH).json()["status"] == "replaced"
    assert client.get("/documents/release", headers=AUTH).json()["metadata"] == {"team": "platform", "published": 1714521600}
    listed = client.get("/documents", headers=AUTH).json()["documents"]
    assert [d["metadata"] for d in listed] == [{"team": "platform", "published": 1714521600}]


def test_an_upload_takes_its_metadata_as_a_json_form_field(client: TestClient) -> None:
    added = upload(client, "notes.md", b"# Notes\n\nSome notes.", metadata='{"team": "ops", "year": 2024}')
    assert added.status_code == 200, added.text
    assert client.get("/documents/notes.md", headers=AUTH).json()["metadata"] == {"team": "ops", "year": 2024}


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"page": 3}, "metadata field 'page' is set by Cairn"),
        ({"tags": ["a", "b"]}, "metadata field 'tags': a value must be text, a number or a boolean, not a list"),
        ({"owner": None}, "not null"),
        ({"bad key": 1}, "must be a plain field name"),
        ({f"k{i}": i for i in range(33)}, "at most 32 metadata fields"),
        ({"note": "x" * 1001}, "at most 1000 characters"),
        ({"big": 2**63}, "fit in 64 bits"),
        ({"note": "ops\x00"}, "metadata field 'note': must not contain NUL characters (U+0000)"),
    ],
)
def test_metadata_that_cannot_be_stored_is_refused_naming_the_field(client: TestClient, metadata: dict, message: str) -> None:
    refused = client.post("/documents", json={"text": "Some text.", "metadata": metadata}, headers=AUTH)
    assert refused.status_code == 422 and message in refused.json()["message"], refused.text


def test_the_documents_guide_lists_every_metadata_name_cairn_refuses() -> None:
    guide = (Path(__file__).resolve().parents[3] / "docs" / "documents.md").read_text(encoding="utf-8")
    sentence = re.search(r"cannot be one that Cairn sets itself: (.+?)\. ", guide)
    assert sentence is not None, "the guide no longer lists the reserved metadata names"
    assert set(re.findall(r"`(\w+)`", sentence.group(1))) == RESERVED_KEYS


def test_unknown_fields_and_unreadable_form_metadata_are_refused(client: TestClient) -> None:
    unknown = client.post("/documents", json={"text": "Some text.", "published": 1714521600}, headers=AUTH)
    assert unknown.status_code == 422 and unknown.json()["message"] == "published: unknown field", unknown.text
    for form_value, message in (("[1, 2]", "a JSON object of fields"), ("{team: ops}", "must be a JSON object")):
        refused = upload(client, "notes.md", b"# Notes\n\ntext", metadata=form_value)
        assert refused.status_code == 422 and message in refused.json()["message"], refused.text
    assert upload(client, "notes.md", b"# Notes\n\ntext", colour="red").status_code == 422


def test_a_page_of_thousands_of_nested_elements_is_read_not_a_500(client: TestClient, store: FakeStore) -> None:
    # Unclosed <p> tags, as legacy pages write them, nest in html.parser: one per paragraph.
    page = "<html><body><h1>Old list</h1>" + "".join(f"<p>entry {n}" for n in range(5000)) + "</body></html>"
    for response in (
        upload(client, "old.html", page.encode(), "text/html"),
        client.post("/documents", json={"text": page, "source": "old.json.html"}, headers=AUTH),
    ):
        assert response.status_code == 200, response.text
        assert response.json()["title"] == "Old list"
    stored = " ".join(chunk.content for chunk in store.chunks.values() if chunk.doc_id == "old.html")
    assert "entry 0" in stored and "entry 4999" in stored


def test_json_markdown_that_is_only_front_matter_is_refused_naming_the_document(client: TestClient) -> None:
    refused = client.post("/documents", json={"doc_id": "empty.md", "text": "---\ntitle: Draft\n---\n"}, headers=AUTH)
    assert refused.status_code == 422 and refused.json()["message"] == "empty.md: no text to index after its front matter"
    assert client.get("/documents/empty.md", headers=AUTH).status_code == 404


def test_an_id_with_a_line_break_that_no_route_could_reach_is_refused(client: TestClient, store: FakeStore) -> None:
    for body in ({"doc_id": "notes\nv2.md", "text": "Some text."}, {"source": "notes\nv2.md", "text": "Some text."}):
        refused = client.post("/documents", json=body, headers=AUTH)
        assert refused.status_code == 422 and "line break" in refused.json()["message"], refused.text
    refused = upload(client, "notes.md", b"# Notes\n\ntext", doc_id="notes\nv2.md")
    assert refused.status_code == 422 and refused.json()["message"].startswith("doc_id: "), refused.text
    assert not store.chunks

    odd = "team a/notes\t#1?.md"  # other unusual characters are reachable, so they are kept
    assert client.post("/documents", json={"doc_id": odd, "text": "Some text."}, headers=AUTH).status_code == 200
    assert client.get(f"/documents/{quote(odd, safe='')}", headers=AUTH).json()["doc_id"] == odd
    assert client.delete(f"/documents/{quote(odd, safe='')}", headers=AUTH).status_code == 200


@pytest.mark.parametrize("second", ["file", "other"])
def test_an_upload_of_two_files_is_422_asking_for_one_per_request(
    client: TestClient, store: FakeStore, second: str
) -> None:
    files = [("file", ("one.md", b"# One\n\nfirst", "text/markdown")), (second, ("two.md", b"# Two", "text/markdown"))]
    response = client.post("/documents", files=files, headers=AUTH)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "invalid_request"
    assert response.json()["message"] == "file: send one file per request; this body holds 2 (one.md, two.md)"
    assert not store.chunks


def test_a_file_name_longer_than_a_doc_id_gives_a_shortened_stable_id(client: TestClient) -> None:
    name = "team/" * 120 + "notes.md"  # 608 characters
    added = upload(client, name, b"# Notes\n\nSome text.")
    assert added.status_code == 200, added.text
    doc_id = added.json()["doc_id"]
    assert len(doc_id) == 512 and doc_id.startswith("team/team/")
    assert upload(client, name, b"# Notes\n\nSome text.").json() == added.json() | {"status": "unchanged"}
    assert client.get(f"/documents/{quote(doc_id, safe='')}", headers=AUTH).json()["source"] == name


def test_a_file_part_sent_without_a_file_name_is_422_saying_so(client: TestClient) -> None:
    # What curl sends for -F 'file=<notes.md' (the file's text as a plain field) instead of -F 'file=@notes.md'.
    body = b'--XX\r\nContent-Disposition: form-data; name="file"\r\n\r\n# Notes\n\ntext\r\n--XX--\r\n'
    multipart = {"Content-Type": "multipart/form-data; boundary=XX"}
    response = client.post("/documents", content=body, headers=AUTH | multipart)
    assert response.status_code == 422, response.text
    assert response.json()["message"] == (
        "file: the 'file' part has no file name; send it as a file (curl: -F file=@PATH)"
    )


def test_an_uploads_doc_id_drops_the_dot_segments_of_its_file_name_that_no_url_could_address(client: TestClient) -> None:
    # Clients send GET /documents/../manuals/pump.md as GET /manuals/pump.md: such an id could not be deleted.
    added = upload(client, "..\\manuals/./pump.md", b"# Pump\n\nDry wall.", "text/markdown")
    assert added.json()["doc_id"] == "manuals/pump.md"
    assert client.get("/documents/manuals/pump.md", headers=AUTH).json()["source"] == "..\\manuals/./pump.md"
    sent = client.post("/documents", json={"text": "Filters.", "source": "../../filters.md"}, headers=AUTH)
    assert sent.json()["doc_id"] == "filters.md"


@pytest.mark.parametrize(
    ("doc_id", "refusal"),
    [(doc_id, DOT_SEGMENT) for doc_id in ("a/../b.md", "./a", "..", "manuals/.", "a\\..\\b.md")]
    # GET /documents/guides/similar lists the documents like "guides": a document "guides/similar" was stored,
    # but could be neither read nor deleted.
    + [(doc_id, ENDS_IN_SIMILAR) for doc_id in ("guides/similar", "a.md/similar", "guides\\similar")],
)
def test_a_given_doc_id_no_url_could_address_is_refused(
    client: TestClient, store: FakeStore, doc_id: str, refusal: str
) -> None:
    for refused in (
        client.post("/documents", json={"doc_id": doc_id, "text": "Some text."}, headers=AUTH),
        upload(client, "notes.md", b"# Notes\n\ntext", doc_id=doc_id),
    ):
        assert refused.status_code == 422, refused.text
        message = refused.json()["message"]
        assert message.startswith(f"doc_id: {refusal}") and "URL" in message, message
    assert not store.chunks


def test_dots_within_a_doc_ids_names_are_kept(client: TestClient) -> None:
    for doc_id in ("v1.2/..notes", "a.../b.md", ".config/x"):
        assert client.post("/documents", json={"doc_id": doc_id, "text": "Some text."}, headers=AUTH).status_code == 200
        assert client.get(f"/documents/{doc_id}", headers=AUTH).json()["doc_id"] == doc_id


def test_a_source_or_file_name_that_would_give_a_doc_id_ending_in_similar_is_refused_unless_a_doc_id_is_given(
    client: TestClient, store: FakeStore
) -> None:
    sent = client.post("/documents", json={"text": "Some text.", "source": "notes/similar"}, headers=AUTH)
    assert sent.status_code == 422, sent.text
    assert sent.json()["message"].startswith("source: gives the doc_id 'notes/similar', which must not end in '/similar'")
    uploaded = upload(client, "notes/similar", b"# Notes\n\ntext", "text/markdown")
    assert uploaded.status_code == 422, uploaded.text
    assert uploaded.json()["message"].startswith("file: the file name 'notes/similar' gives the doc_id 'notes/similar'")
    assert not store.chunks
    named = upload(client, "notes/similar", b"# Notes\n\ntext", "text/markdown", doc_id="notes/similar-notes")
    assert named.status_code == 200, named.text
    assert client.get("/documents/notes/similar-notes", headers=AUTH).json()["source"] == "notes/similar"


def test_similar_elsewhere_in_a_doc_id_is_kept_and_addressable(client: TestClient) -> None:
    for doc_id in ("similar", "similar/a.md", "guides/similar.md", "guides/dissimilar"):
        assert client.post("/documents", json={"doc_id": doc_id, "text": "Some text."}, headers=AUTH).status_code == 200
        assert client.get(f"/documents/{doc_id}", headers=AUTH).json()["doc_id"] == doc_id
        assert client.delete(f"/documents/{doc_id}", headers=AUTH).json()["doc_id"] == doc_id


def test_a_body_of_another_content_type_is_415_without_naming_an_internal_path(client: TestClient) -> None:
    # Users reach this route as POST /api/documents through the gateway, which passes the message on.
    response = client.post("/documents", content=b"# plain", headers=AUTH | {"Content-Type": "text/markdown"})
    assert response.status_code == 415
    assert response.json()["message"] == (
        "send a document as application/json, or as multipart/form-data with a 'file' part; not text/markdown"
    )
