"""`cairn ingest` as a process against a retrieval service process: retrieval killed in the middle of a
folder, and Ctrl-C. What the operator reads, the exit status, and that running it again finishes the job."""
from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import free_port, wait_until

pytestmark = pytest.mark.integration

TOKEN = "ingest-command-token"
REPO = Path(__file__).resolve().parents[3]
FILES = 20
SUMMARY = re.compile(r"^(\d+) added, (\d+) replaced, (\d+) unchanged, (\d+) failed$", re.MULTILINE)


class RetrievalProcess:
    """`python -m services.retrieval` on one port and data folder, which it keeps across restarts."""

    def __init__(self, data_dir: Path, collection: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        self.collection = collection
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        env = os.environ | {
            "RETRIEVAL_HOST": "127.0.0.1",
            "RETRIEVAL_PORT": str(self.port),
            "CHROMA_COLLECTION": self.collection,
            "CAIRN_SERVICE_TOKEN": TOKEN,
            "CAIRN_DATA_DIR": str(self.data_dir),
            "TORCH_THREADS": "1",  # the command and the test share the other core
            "HF_HUB_OFFLINE": "1",
            "LOG_LEVEL": "WARNING",
        }
        with (self.data_dir.parent / "retrieval.log").open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "services.retrieval"], cwd=REPO, env=env, stdout=log, stderr=log
            )
        wait_until(self.ready, timeout=180, interval=0.5, what=f"retrieval on {self.url}")

    def ready(self) -> bool:
        assert self.process is not None and self.process.poll() is None, "retrieval exited while starting"
        try:
            return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def holds(self, doc_id: str) -> bool:
        try:  # polled while the command keeps retrieval busy: a slow answer is a "not yet"
            response = httpx.get(f"{self.url}/documents/{doc_id}", headers={"X-Service-Token": TOKEN}, timeout=5)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=15)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="module")
def retrieval_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RetrievalProcess]:
    """One retrieval process for the module (its start loads the model: many seconds); each test sends its own folder."""
    service = RetrievalProcess(tmp_path_factory.mktemp("retrieval") / "data", f"test-{uuid.uuid4().hex[:10]}")
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def retrieval(retrieval_service: RetrievalProcess) -> RetrievalProcess:
    """The module's retrieval, running again if an earlier test killed it and failed before starting it."""
    retrieval_service.start()
    return retrieval_service


@pytest.fixture
def folder(tmp_path: Path, unique: str) -> Path:
    """FILES Markdown files of a few chunks each, so that the run lasts some seconds; the folder's name is the
    test's own, so that its documents are new to the module's retrieval."""
    notes = tmp_path / "work" / unique
    notes.mkdir(parents=True)
    for n in range(FILES):
        paragraphs = [f"Note {n}, paragraph {p}: " + " ".join(f"word{(n * 7 + p * 13 + w) % 997}" for w in range(90))
                      for p in range(6)]
        (notes / f"note{n:03d}.md").write_text(f"# Note {n}\n\n" + "\n\n".join(paragraphs) + "\n")
    return notes


def start_ingest(folder: Path, retrieval_url: str) -> subprocess.Popen[str]:
    env = os.environ | {
        "PYTHONPATH": str(REPO),
        "RETRIEVAL_URL": retrieval_url,
        "CAIRN_SERVICE_TOKEN": TOKEN,
        "PYTHONUNBUFFERED": "1",  # each line comes as it is printed, as on a terminal, not at the exit
    }
    return subprocess.Popen(
        [sys.executable, "-m", "cairn.cli", "ingest", folder.name],
        cwd=folder.parent, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def read_until(run: subprocess.Popen[str], pattern: re.Pattern[str], *, timeout: float) -> str:
    """The command's standard output as it comes, up to what `pattern` finds (or the end of the output)."""
    deadline = time.monotonic() + timeout
    out = b""
    # A selector, not select.select: late in a full run this process may hold descriptors numbered past 1024.
    with selectors.DefaultSelector() as waiting:
        waiting.register(run.stdout, selectors.EVENT_READ)
        while not pattern.search(out.decode(errors="replace")):
            if not waiting.select(max(0.0, deadline - time.monotonic())):
                raise AssertionError(f"no {pattern.pattern!r} on the command's output within {timeout}s:\n{out.decode()}")
            if not (chunk := os.read(run.stdout.fileno(), 65536)):  # raw reads: communicate() reads the rest after them
                break
            out += chunk
    return out.decode()


def counts(out: str) -> tuple[int, int, int, int]:
    match = SUMMARY.search(out)
    assert match, f"no summary line in:\n{out}"
    return tuple(int(n) for n in match.groups())  # added, replaced, unchanged, failed


def test_retrieval_killed_mid_folder_keeps_the_summary_and_a_rerun_sends_only_the_rest(
    retrieval: RetrievalProcess, folder: Path
) -> None:
    run = start_ingest(folder, retrieval.url)
    wait_until(lambda: retrieval.holds(f"{folder.name}/note005.md"), timeout=120, interval=0.1, what="six files in")
    retrieval.kill()
    out, err = run.communicate(timeout=60)

    assert run.returncode == 1, (out, err)
    assert "Traceback" not in err
    added, replaced, unchanged, failed = counts(out)
    # note005 is held, but its answer may not have reached the command before the kill.
    assert (replaced, unchanged) == (0, 0) and added >= 5 and added + failed == FILES, out
    failures = re.findall(rf"^  failed: ({folder.name}/note\d+\.md): (.*)$", out, re.MULTILINE)
    assert len(failures) == failed
    first, reason = failures[0]
    assert reason.startswith("retrieval unavailable: "), "the file being sent when it went away"
    assert [r for _, r in failures[1:]] == ["not sent: retrieval unavailable"] * (failed - 1)
    assert [name for name, _ in failures] == [f"{folder.name}/note{n:03d}.md" for n in range(added, FILES)], "in order"
    assert f"retrieval became unavailable while sending {first}" in out

    retrieval.start()
    again = start_ingest(folder, retrieval.url)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, (out, err)
    added_now, replaced_now, unchanged_now, failed_now = counts(out)
    # The file in flight when retrieval died may have gone in: then it is unchanged now.
    assert unchanged_now in (added, added + 1) and added_now == FILES - unchanged_now, out
    assert (replaced_now, failed_now) == (0, 0)


def test_ctrl_c_stops_at_once_with_the_summary_and_status_130(retrieval: RetrievalProcess, folder: Path) -> None:
    started = time.monotonic()
    run = start_ingest(folder, retrieval.url)
    wait_until(lambda: retrieval.holds(f"{folder.name}/note003.md"), timeout=120, interval=0.1, what="four files in")
    four_files_s = time.monotonic() - started
    pressed = time.monotonic()
    run.send_signal(signal.SIGINT)
    out = read_until(run, SUMMARY, timeout=60)
    summary_s = time.monotonic() - pressed
    rest, err = run.communicate(timeout=60)  # the interpreter's own exit is CPU work a busy machine slows: not timed
    out += rest
    # Against this machine's pace at this moment, not a fixed number of seconds: the sixteen other files would
    # have taken about four times as long as the first four (the command's start-up included).
    assert summary_s < four_files_s, f"the summary came {summary_s:.1f} s after Ctrl-C; four files took {four_files_s:.1f} s"
    assert run.returncode == 130, (out, err)
    assert "Traceback" not in err
    added, _, _, failed = counts(out)
    assert added >= 3 and failed == 0, "the fourth may still have been on its way back"
    assert out.rstrip().splitlines()[-1].startswith("interrupted")
    assert "run the same command again to finish" in out
    # The file after the one in flight (whose answer did not come back) was never sent.
    unsent = f"{folder.name}/note{added + 1:03d}.md"
    response = httpx.get(f"{retrieval.url}/documents/{unsent}", headers={"X-Service-Token": TOKEN}, timeout=60)
    assert response.status_code == 404, f"{unsent} went in after Ctrl-C"
