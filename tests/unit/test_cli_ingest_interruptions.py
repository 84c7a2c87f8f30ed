"""`cairn ingest` over real HTTP to a stand-in for retrieval: a dropped connection is sent again once, a proxy
with no retrieval behind it ends the run with a summary, and Ctrl-C at any point keeps the summary."""
from __future__ import annotations

import email.utils
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi import FastAPI, Form, UploadFile
from fastapi.responses import HTMLResponse, JSONResponse

from cairn import cli, ingest
from cairn.ingest import ingest_paths
from tests.support import serve_in_thread

pytestmark = pytest.mark.unit

TOKEN = "stand-in-token"
REPO = Path(__file__).resolve().parents[2]


def stand_in(received: list[str], *, proxy_gone_after: int | None = None) -> FastAPI:
    """Takes every upload as added and closes each connection, so that each upload opens its own; after
    `proxy_gone_after` uploads it answers as nginx does with no retrieval behind it."""
    app = FastAPI()

    @app.post("/documents")
    async def upload(file: UploadFile, doc_id: str = Form(...)):
        received.append(doc_id)
        if proxy_gone_after is not None and len(received) > proxy_gone_after:
            return HTMLResponse("<html><h1>502 Bad Gateway</h1></html>", status_code=502)
        return JSONResponse({"doc_id": doc_id, "status": "added"}, headers={"Connection": "close"})

    return app


def briefly_unavailable(received: list[tuple[str, float]], *, retry_after: str) -> FastAPI:
    """Answers the first upload as retrieval without its store does (503 with a Retry-After), the others as
    added; `received` holds each upload's doc_id and when it came."""
    app = FastAPI()

    @app.post("/documents")
    async def upload(file: UploadFile, doc_id: str = Form(...)):
        received.append((doc_id, time.monotonic()))
        if len(received) == 1:
            return JSONResponse({"error": "vector_store_unavailable", "message": "Chroma is unavailable"},
                                status_code=503, headers={"Retry-After": retry_after})
        return JSONResponse({"doc_id": doc_id, "status": "added"})

    return app


@contextmanager
def dropping_proxy(upstream: str, *, drop: int) -> Iterator[str]:
    """A TCP proxy to `upstream` that closes its `drop`-th connection (counted from 1) unanswered, as a
    load balancer does when the replica behind it goes away."""
    host, port = upstream.removeprefix("http://").split(":")
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = 0

    def pipe(source: socket.socket, target: socket.socket) -> None:
        with source, target:
            while chunk := source.recv(65536):
                target.sendall(chunk)
            target.shutdown(socket.SHUT_WR)

    def serve() -> None:
        nonlocal accepted
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            accepted += 1
            if accepted == drop:
                client.recv(65536)  # the request arrives, then the connection drops
                client.close()
                continue
            server = socket.create_connection((host, int(port)))
            threading.Thread(target=pipe, args=(client, server), daemon=True).start()
            threading.Thread(target=pipe, args=(server.dup(), client.dup()), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


@pytest.fixture
def notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "notes").mkdir()
    for n in range(5):
        (tmp_path / "notes" / f"note{n}.md").write_text(f"# Note {n}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "notes"


def on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard error as a terminal, where the progress bar is drawn: under pytest it is a capture."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)


@pytest.fixture(autouse=True)
def short_retry_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "RETRY_AFTER_S", 0.1, raising=False)


def test_a_dropped_connection_is_sent_again_once(notes: Path) -> None:
    received: list[str] = []
    with serve_in_thread(stand_in(received)) as url, dropping_proxy(url, drop=3) as proxy:
        summary = ingest_paths([Path("notes")], retrieval_url=proxy, service_token=TOKEN, progress=False)
    assert (summary.added, summary.failures) == (5, []), summary.describe()
    assert received == [f"notes/note{n}.md" for n in range(5)], "the dropped upload went in on its second try"


@pytest.mark.parametrize(
    ("retry_after", "least_s", "most_s"),
    [("1", 1.0, 1.8), ("in-two-seconds", 0.9, 2.5), ("3600", 2.0, 2.8), ("0", 0.0, 0.5), ("soon", 0.1, 0.6)],
    ids=["seconds", "http-date", "bounded", "zero", "unreadable-keeps-the-pause"],
)
def test_a_503_with_retry_after_is_sent_again_after_that_wait(
    notes: Path, monkeypatch: pytest.MonkeyPatch, retry_after: str, least_s: float, most_s: float
) -> None:
    monkeypatch.setattr(ingest, "MAX_RETRY_WAIT_S", 2.0, raising=False)
    if retry_after == "in-two-seconds":  # an HTTP date counts whole seconds: 1 to 2 s from now
        retry_after = email.utils.formatdate(time.time() + 2, usegmt=True)
    received: list[tuple[str, float]] = []
    with serve_in_thread(briefly_unavailable(received, retry_after=retry_after)) as url:
        summary = ingest_paths([Path("notes/note0.md")], retrieval_url=url, service_token=TOKEN, progress=False)
    assert (summary.added, summary.failures) == (1, []), summary.describe()
    (first, sent_at), (again, sent_again_at) = received
    assert first == again == "notes/note0.md"
    assert least_s <= sent_again_at - sent_at < most_s, sent_again_at - sent_at


def test_a_proxy_with_no_retrieval_behind_it_ends_the_run_with_a_summary(
    notes: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    received: list[str] = []
    with serve_in_thread(stand_in(received, proxy_gone_after=2)) as url:
        monkeypatch.setenv("RETRIEVAL_URL", url)
        monkeypatch.setenv("CAIRN_SERVICE_TOKEN", TOKEN)
        assert cli.main(["ingest", "notes"]) == 1
    assert received == ["notes/note0.md", "notes/note1.md", "notes/note2.md", "notes/note2.md"], "one retry, then stop"
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "2 added, 0 replaced, 0 unchanged, 3 failed",
        "  failed: notes/note2.md: retrieval unavailable: HTTP 502: <html><h1>502 Bad Gateway</h1></html>",
        "  failed: notes/note3.md: not sent: retrieval unavailable",
        "  failed: notes/note4.md: not sent: retrieval unavailable",
        "retrieval became unavailable while sending notes/note2.md (it may or may not have been added); "
        "the files after it were not sent: run the same command again once it is back",
    ]


def test_ctrl_c_while_the_progress_bar_redraws_keeps_the_summary(
    notes: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The redraw writes to the terminal: a slow one (ssh) makes it a fair share of the time Ctrl-C can land in."""
    received: list[str] = []
    update = ingest.tqdm.update

    def ctrl_c_after_the_second_file(bar, n=1):
        update(bar, n)
        if bar.n == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(ingest.tqdm, "update", ctrl_c_after_the_second_file)
    on_a_terminal(monkeypatch)
    with serve_in_thread(stand_in(received)) as url:
        monkeypatch.setenv("RETRIEVAL_URL", url)
        monkeypatch.setenv("CAIRN_SERVICE_TOKEN", TOKEN)
        assert cli.main(["ingest", "notes"]) == 130
    assert len(received) == 2
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "2 added, 0 replaced, 0 unchanged, 0 failed",
        "interrupted: the files not counted above were not sent: run the same command again to finish",
    ]


def _ctrl_c_after(close):
    """`close`, then Ctrl-C, once: a bar is closed again when it is collected."""
    pressed = []

    def closing(*args, **kwargs):
        close(*args, **kwargs)
        if not pressed:
            pressed.append(True)
            raise KeyboardInterrupt

    return closing


@pytest.mark.parametrize("closing", ["progress bar", "connections"])
def test_ctrl_c_after_the_last_file_went_in_keeps_the_summary(
    notes: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], closing: str
) -> None:
    """Every file is in; Ctrl-C lands while the run closes its progress bar (its last redraw, on a slow terminal) or
    its connections to retrieval, before the summary is printed."""
    received: list[str] = []
    with serve_in_thread(stand_in(received)) as url:  # which waits for the server with a client of its own
        if closing == "progress bar":
            monkeypatch.setattr(ingest.tqdm, "close", _ctrl_c_after(ingest.tqdm.close))
            on_a_terminal(monkeypatch)
        else:
            transport = ingest.httpx.HTTPTransport
            monkeypatch.setattr(transport, "__exit__", _ctrl_c_after(transport.__exit__))
        monkeypatch.setenv("RETRIEVAL_URL", url)
        monkeypatch.setenv("CAIRN_SERVICE_TOKEN", TOKEN)
        assert cli.main(["ingest", "notes"]) == 130
    assert len(received) == 5
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "5 added, 0 replaced, 0 unchanged, 0 failed",
        "interrupted after the last file: every file is counted above",
    ]


def test_ctrl_c_while_the_command_starts_ends_quietly_with_status_130(tmp_path: Path) -> None:
    """Importing what the command needs takes a second or more (several on a busy machine), long enough to press
    Ctrl-C in. `-X importtime` writes a line on standard error as each module is in; Ctrl-C is pressed once
    pydantic is. The command cannot have got much further, however slow the test is to press: its standard
    error is a pipe of one page that is not read meanwhile, and the imports still to come write ten times that."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "note.md").write_text("# Note\n")
    errors_in, errors_out = os.pipe()
    fcntl.fcntl(errors_out, fcntl.F_SETPIPE_SZ, 4096)
    with socket.create_server(("127.0.0.1", 0)) as silent, os.fdopen(errors_in) as errors:  # silent: never answers
        env = os.environ | {
            "PYTHONPATH": str(REPO),
            "RETRIEVAL_URL": f"http://127.0.0.1:{silent.getsockname()[1]}",
            "CAIRN_SERVICE_TOKEN": TOKEN,
        }
        run = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "cairn.cli", "ingest", "notes"],
            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors_out, text=True,
        )
        os.close(errors_out)
        for line in errors:
            if re.search(r"\|\s+pydantic$", line.rstrip()):
                break
        run.send_signal(signal.SIGINT)
        rest: list[str] = []
        reader = threading.Thread(target=lambda: rest.append(errors.read()))
        reader.start()
        out, _ = run.communicate(timeout=60)
        reader.join(timeout=60)
    err = "".join(rest)
    assert "Traceback" not in err, err[-2000:]
    assert run.returncode == 130
    assert err.rstrip().endswith("interrupted")
    assert out == "", "nothing was being sent yet, so there is no summary"


def test_redirected_to_a_file_it_draws_no_progress_bar(
    notes: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cairn ingest docs/ >ingest.log 2>&1`: each redraw would be kept in the file, ten a second."""
    with serve_in_thread(stand_in([])) as url:
        monkeypatch.setenv("RETRIEVAL_URL", url)
        monkeypatch.setenv("CAIRN_SERVICE_TOKEN", TOKEN)
        assert cli.main(["ingest", "notes"]) == 0
    out, err = capsys.readouterr()
    assert out == "5 added, 0 replaced, 0 unchanged, 0 failed\n"
    assert err == ""


def test_on_a_terminal_it_draws_the_progress_bar(
    notes: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    on_a_terminal(monkeypatch)
    with serve_in_thread(stand_in([])) as url:
        monkeypatch.setenv("RETRIEVAL_URL", url)
        monkeypatch.setenv("CAIRN_SERVICE_TOKEN", TOKEN)
        assert cli.main(["ingest", "notes"]) == 0
    err = capsys.readouterr().err
    assert "ingest: 100%" in err and "5/5" in err


def test_an_address_that_is_not_retrieval_s_is_one_line_not_a_failure_per_file(
    notes: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """RETRIEVAL_URL set to the gateway's address, say: no route takes the uploads."""
    with serve_in_thread(FastAPI()) as url:
        monkeypatch.setenv("RETRIEVAL_URL", url)
        monkeypatch.setenv("CAIRN_SERVICE_TOKEN", TOKEN)
        assert cli.main(["ingest", "notes"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"error: no retrieval service at {url}: POST /documents answered 404: is RETRIEVAL_URL right?\n"
