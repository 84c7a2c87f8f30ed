"""`cairn ingest` against a live retrieval service on a real port."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cairn.ingest import MAX_SOURCE_CHARS, SUFFIXES, IngestError, collect_files, ingest_paths, source_name
from services.retrieval import ingestion
from shared.doc_ids import MAX_DOC_ID_CHARS
from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.main import create_app
from services.retrieval.models import UploadFields
from services.retrieval.settings import Settings
from services.retrieval.parsing import SUPPORTED_SUFFIXES
from tests.support import free_port, serve_in_thread
from tests.unit.retrieval.files import GUIDE_HTML, make_pdf

pytestmark = pytest.mark.integration

TOKEN = "ingest-token"


@pytest.fixture
def retrieval_url(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[str]:
    settings = Settings(service_token=TOKEN, data_dir=tmp_path / "data")
    with serve_in_thread(create_app(settings, embedder=embedder)) as url:
        yield url


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "notes"
    (root / "deep" / "deeper").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "intro.md").write_text("# Intro\n\nCairn answers questions with citations.\n")
    (root / "deep" / "deeper" / "faq.txt").write_text("Ask with cairn ask QUESTION.\n")
    (root / "deep" / "latin1.md").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (root / "empty.md").write_text("  \n")
    (root / "picture.png").write_bytes(b"\x89PNG")
    (root / ".hidden" / "secret.md").write_text("# Hidden\n\nnot for the index")
    monkeypatch.chdir(tmp_path)
    return root


def test_folders_are_walked_and_bad_files_do_not_stop_the_rest(retrieval_url: str, tree: Path) -> None:
    summary = ingest_paths([Path("notes")], retrieval_url=retrieval_url, service_token=TOKEN, progress=False)
    assert (summary.added, summary.unchanged, summary.replaced) == (2, 0, 0)
    assert sorted(summary.failed_names) == ["notes/deep/latin1.md", "notes/empty.md"]
    assert dict(summary.failures)["notes/deep/latin1.md"] == "not UTF-8 text"
    assert "2 added" in summary.describe() and "notes/empty.md" in summary.describe()

    (tree / "intro.md").write_text("# Intro\n\nCairn answers questions, now with confidence levels.\n")
    again = ingest_paths(
        [tree, tree / "picture.png", Path("missing.md")], retrieval_url=retrieval_url, service_token=TOKEN, progress=False
    )
    assert (again.added, again.unchanged, again.replaced) == (0, 1, 1), "doc ids are the same relative paths"
    assert sorted(again.failed_names) == ["missing.md", "notes/deep/latin1.md", "notes/empty.md", "notes/picture.png"]
    with httpx.Client(base_url=retrieval_url, headers={"X-Service-Token": TOKEN}) as client:
        for query, expected in (("citations", []), ("confidence levels", ["notes/intro.md"])):
            hits = client.post("/search", json={"query": query, "mode": "keyword"}).json()["results"]
            assert [hit["doc_id"] for hit in hits] == expected, "the replaced version is gone from the keyword index too"


def test_a_file_named_twice_in_different_spellings_is_uploaded_once(tree: Path) -> None:
    (tree / "intro-link.md").symlink_to(tree / "intro.md")  # the same document as intro.md
    spellings = [tree, tree / "intro.md", Path("notes/../notes/intro.md"), tree / "intro-link.md"]
    files, _, _ = collect_files(spellings, None)
    names = [f.resolve().relative_to(tree).as_posix() for f in files]
    assert sorted(names) == ["deep/deeper/faq.txt", "deep/latin1.md", "empty.md", "intro.md"]


def test_links_to_files_and_folders_elsewhere_keep_their_own_relative_names(
    retrieval_url: str, tree: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # outside the current directory
    (elsewhere / "policy.md").write_text("# Policy\n\nLeave is booked with a form.\n")
    (tree / "policy-link.md").symlink_to(elsewhere / "policy.md")
    Path("handbook").symlink_to(elsewhere, target_is_directory=True)
    summary = ingest_paths(
        [tree / "policy-link.md", Path("handbook")], retrieval_url=retrieval_url, service_token=TOKEN, progress=False
    )
    assert summary.added == 2, summary.describe()
    with httpx.Client(base_url=retrieval_url, headers={"X-Service-Token": TOKEN}) as client:
        documents = {d["doc_id"]: d["source"] for d in client.get("/documents").json()["documents"]}
    assert documents == {"notes/policy-link.md": "notes/policy-link.md", "handbook/policy.md": "handbook/policy.md"}


def test_a_wrong_token_or_a_dead_service_stops_at_once(retrieval_url: str, tree: Path) -> None:
    with pytest.raises(IngestError, match="service token"):
        ingest_paths([tree], retrieval_url=retrieval_url, service_token="wrong", progress=False)
    with pytest.raises(IngestError, match="not reachable"):
        ingest_paths([tree], retrieval_url=f"http://127.0.0.1:{free_port()}", service_token=TOKEN, progress=False)


def test_names_can_be_relative_to_a_given_base(retrieval_url: str, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = ingest_paths([Path("notes/intro.md")], retrieval_url=retrieval_url, service_token=TOKEN, progress=False)
    assert first.added == 1
    monkeypatch.chdir(tree / "deep")  # elsewhere, yet the same doc_id "notes/intro.md" thanks to base
    again = ingest_paths([tree / "intro.md"], retrieval_url=retrieval_url, service_token=TOKEN, progress=False, base=tree.parent)
    assert (again.added, again.unchanged) == (0, 1)


def test_every_format_goes_in_and_bad_files_are_named_without_stopping_the_rest(
    retrieval_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = tmp_path / "library"
    (library / "manuals").mkdir(parents=True)
    (library / "manuals" / "pump.pdf").write_bytes(
        make_pdf(["The pump must be mounted on a dry wall.", "Replace the intake filter every month."], title="Pump manual")
    )
    (library / "manuals" / "broken.pdf").write_bytes(b"%PDF-1.7\n% a download that stopped here")
    (library / "site.html").write_bytes(GUIDE_HTML)
    (library / "notes.txt").write_text("Lighthouse lamps are cleaned every morning.\n")
    (library / "readme.md").write_text("# Readme\n\nThe library holds manuals.\n")
    (library / "report.docx").write_bytes(b"PK\x03\x04 not for us")
    monkeypatch.chdir(tmp_path)

    summary = ingest_paths([Path("library")], retrieval_url=retrieval_url, service_token=TOKEN, progress=False)
    assert (summary.added, summary.unchanged, summary.replaced) == (4, 0, 0)
    assert summary.failed_names == ["library/manuals/broken.pdf"]
    assert summary.failures[0][1].startswith("not a readable PDF")
    assert summary.skipped == ["library/report.docx"]
    assert "files of other types skipped" in summary.describe()

    with httpx.Client(base_url=retrieval_url, headers={"X-Service-Token": TOKEN}) as client:
        pump = client.get("/documents/library/manuals/pump.pdf").json()
        assert (pump["title"], pump["pages"], pump["chunks"]) == ("Pump manual", 2, 2)
        body = {"query": "how often is the intake filter replaced", "top_k": 1, "mode": "dense"}
        hit = client.post("/search", json=body).json()["results"][0]
        assert (hit["doc_id"], hit["metadata"]["page"]) == ("library/manuals/pump.pdf", 2)
        body = {"query": "which wire goes to the live terminal", "top_k": 1, "mode": "dense"}
        hit = client.post("/search", json=body).json()["results"][0]
        assert (hit["doc_id"], hit["metadata"]["section"], hit["metadata"]["title"]) == (
            "library/site.html", "Installation > Wiring", "Pump guide"
        )

    named = ingest_paths([Path("library/report.docx")], retrieval_url=retrieval_url, service_token=TOKEN, progress=False)
    assert named.failed_names == ["library/report.docx"] and "unsupported file type .docx" in named.failures[0][1]


def test_the_command_offers_exactly_the_types_the_service_reads() -> None:
    assert SUFFIXES == SUPPORTED_SUFFIXES


def test_the_command_sends_ids_and_sources_within_the_service_limits() -> None:
    [doc_id_limit] = [rule.max_length for rule in UploadFields.model_fields["doc_id"].metadata if hasattr(rule, "max_length")]
    assert MAX_DOC_ID_CHARS == doc_id_limit
    [source_limit] = [rule.max_length for rule in UploadFields.model_fields["source"].metadata if hasattr(rule, "max_length")]
    assert MAX_SOURCE_CHARS == source_limit


def test_broken_links_are_failures_named_as_such_and_stop_nothing(retrieval_url: str, tree: Path) -> None:
    (tree / "loop1.md").symlink_to("loop2.md")
    (tree / "loop2.md").symlink_to("loop1.md")
    (tree / "gone.md").symlink_to("nowhere.md")
    named = ingest_paths([tree / "loop1.md", tree / "intro.md"], retrieval_url=retrieval_url, service_token=TOKEN, progress=False)
    assert (named.added, dict(named.failures)) == (1, {"notes/loop1.md": "broken symbolic link"})
    walked = ingest_paths([Path("notes")], retrieval_url=retrieval_url, service_token=TOKEN, progress=False)
    broken = {name: reason for name, reason in walked.failures if reason == "broken symbolic link"}
    assert sorted(broken) == ["notes/gone.md", "notes/loop1.md", "notes/loop2.md"] and walked.added == 1


def test_a_file_name_that_is_not_utf8_is_ingested_under_a_readable_name(retrieval_url: str, tree: Path) -> None:
    (tree / "deep").joinpath(os.fsdecode(b"caf\xe9.md")).write_text("# Cafe\n\nCoffee is served all day.\n")
    summary = ingest_paths([tree / "deep"], retrieval_url=retrieval_url, service_token=TOKEN, progress=False)
    assert summary.added == 2 and summary.failed_names == ["notes/deep/latin1.md"], summary.describe()  # + deeper/faq.txt
    with httpx.Client(base_url=retrieval_url, headers={"X-Service-Token": TOKEN}) as client:
        documents = [d["doc_id"] for d in client.get("/documents").json()["documents"]]
    assert "notes/deep/caf\ufffd.md" in documents


def test_a_path_too_long_for_a_doc_id_goes_in_under_the_id_an_upload_of_that_name_gets(
    retrieval_url: str, tree: Path
) -> None:
    # A path of over 1,000 characters: the file system takes it; a doc_id is 512 at most, a source field 1,000.
    deep = tree.joinpath(*["d" * 250] * 5)
    deep.mkdir(parents=True)
    (deep / "notes.md").write_text("# Deep notes\n\nThe archive sits three folders down.\n")
    name = source_name(deep / "notes.md")
    summary = ingest_paths([deep], retrieval_url=retrieval_url, service_token=TOKEN, progress=False)
    assert (summary.added, summary.failures) == (1, []), summary.describe()
    again = ingest_paths([deep], retrieval_url=retrieval_url, service_token=TOKEN, progress=False)
    assert again.unchanged == 1, "the same id on every run"
    with httpx.Client(base_url=retrieval_url, headers={"X-Service-Token": TOKEN}) as client:
        [document] = [d for d in client.get("/documents").json()["documents"] if d["title"] == "Deep notes"]
        uploaded = client.post("/documents", files={"file": (name, b"# Other\n\ntext")}).json()
    assert document["doc_id"] == ingestion.within_doc_id_limit(name) == uploaded["doc_id"] and document["source"] == name


def test_ctrl_c_stops_the_run_with_what_went_in_so_far(
    retrieval_url: str, tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cairn import cli, ingest

    read = ingest._read

    def interrupted_at_intro(path: Path) -> bytes:  # the last file, in name order
        if path.name == "intro.md":
            raise KeyboardInterrupt
        return read(path)

    monkeypatch.setattr(ingest, "_read", interrupted_at_intro)
    monkeypatch.setenv("RETRIEVAL_URL", retrieval_url)
    monkeypatch.setenv("CAIRN_SERVICE_TOKEN", TOKEN)
    assert cli.main(["ingest", "notes"]) == 130
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "1 added, 0 replaced, 0 unchanged, 2 failed (1 files of other types skipped)"
    assert lines[-1].startswith("interrupted while sending notes/intro.md") and "run the same command again" in lines[-1]
    assert "Traceback" not in err
    assert "failed: notes/empty.md" in err and out.count("failed: notes/empty.md") == 1, "live on stderr, once on stdout"
