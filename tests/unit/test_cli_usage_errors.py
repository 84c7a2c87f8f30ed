"""`cairn ingest` and `cairn ask` given a mistake on the command line, run as the operator runs them:
one line on stderr, exit status 2 as argparse gives, no traceback, and nothing sent."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import free_port

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def cairn(*args: str, cwd: Path, local: bool = False, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`local`: the services at their ports on this machine (as `cairn up` runs them), not at <SERVICE>_URL.
    `stdin`: piped in (else nothing). Run without a controlling terminal, as from cron or a pipeline."""
    nowhere = f"http://127.0.0.1:{free_port()}"  # were anything sent, the error would be "not reachable"
    env = {k: v for k, v in os.environ.items() if k not in ("CAIRN_PASSWORD", "RETRIEVAL_URL", "GATEWAY_URL")} | {
        "PYTHONPATH": str(REPO),
        "CAIRN_DATA_DIR": str(cwd / "data"),
    }
    if local:
        env |= {"RETRIEVAL_PORT": str(free_port()), "GATEWAY_PORT": str(free_port())}
    else:
        env |= {"RETRIEVAL_URL": nowhere, "GATEWAY_URL": nowhere}
    return subprocess.run(
        [sys.executable, "-m", "cairn.cli", *args],
        cwd=cwd, env=env, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True, text=True, timeout=60, start_new_session=True,
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "intro.md").write_text("# Intro\n")
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "cat.png").write_bytes(b"\x89PNG")
    (tmp_path / "pictures" / ".draft.md").write_text("hidden: not ingested")
    (tmp_path / "empty").mkdir()
    (tmp_path / "report.docx").write_bytes(b"PK\x03\x04")
    (tmp_path / "gone.md").symlink_to("nowhere.md")
    return tmp_path


SUPPORTED = ".htm/.html/.markdown/.md/.pdf/.txt"


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        (["missing.md"], "error: missing.md: no such file or folder"),
        (["report.docx"], "error: report.docx: unsupported file type .docx; use " + SUPPORTED.replace("/", ", ")),
        (["empty"], f"error: empty: no {SUPPORTED} files in this folder"),
        (["pictures"], f"error: pictures: no {SUPPORTED} files in this folder"),
        (["gone.md"], "error: gone.md: broken symbolic link"),
        (["a" * 300 + ".md"], "error: " + "a" * 300 + ".md: File name too long"),
    ],
    ids=["missing", "unsupported-type", "empty-folder", "no-supported-files", "broken-link", "name-too-long"],
)
def test_a_bad_path_is_one_line_and_exit_status_2(workdir: Path, paths: list[str], expected: str) -> None:
    result = cairn("ingest", *paths, cwd=workdir)
    assert (result.returncode, result.stderr, result.stdout) == (2, expected + "\n", "")


def test_every_bad_path_is_named_and_the_good_ones_are_not_sent(workdir: Path) -> None:
    result = cairn("ingest", "notes", "missing.md", "empty", cwd=workdir)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: missing.md: no such file or folder", f"error: empty: no {SUPPORTED} files in this folder"
    ], "notes/ is fine, and nothing tried to reach retrieval"


def test_good_paths_with_retrieval_down_fail_with_status_1_in_one_line(workdir: Path) -> None:
    result = cairn("ingest", "notes", cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith("error: retrieval service not reachable at http://127.0.0.1:")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("question", ["", "   ", "\u200b\u2060"], ids=["empty", "blank", "invisible"])
def test_an_empty_question_is_refused_before_the_password_is_asked_for(workdir: Path, question: str) -> None:
    result = cairn("ask", question, "--user", "dave", cwd=workdir)
    assert (result.returncode, result.stderr, result.stdout) == (2, "error: the question is empty\n", "")


@pytest.mark.parametrize("top_k", ["0", "51", "-3", "eight"])
def test_a_top_k_out_of_range_is_refused_before_the_password_is_asked_for(workdir: Path, top_k: str) -> None:
    result = cairn("ask", "What roles are there?", "--user", "dave", "--top-k", top_k, cwd=workdir)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("cairn ask: error: argument --top-k: ")
    assert "password:" not in result.stderr  # the prompt


@pytest.mark.parametrize(
    ("command", "local", "hint"),
    [(["ingest", "notes"], True, "is Cairn running? start it with `cairn up`, or see `cairn status`"),
     (["ingest", "notes"], False, "is RETRIEVAL_URL right, and the service running there?"),
     (["ask", "What roles are there?", "--password-stdin"], True,
      "is Cairn running? start it with `cairn up`, or see `cairn status`"),
     (["ask", "What roles are there?", "--password-stdin"], False,
      "is GATEWAY_URL right, and the service running there?")],
    ids=["ingest-local", "ingest-url", "ask-local", "ask-url"],
)
def test_a_service_not_answering_says_what_to_do(workdir: Path, command: list[str], local: bool, hint: str) -> None:
    result = cairn(*command, cwd=workdir, local=local)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith(f": {hint}")


def test_a_password_prompt_without_a_terminal_points_at_password_stdin(workdir: Path) -> None:
    """With no terminal to type at, getpass would read standard input in plain sight behind a Python
    warning naming its own source line; the command says what to do instead, and sends nothing.
    (`cairn user add` and `reset-password` prompt through the same function.)"""
    result = cairn("ask", "What roles are there?", "--user", "dave", cwd=workdir, stdin="piped, no --password-stdin\n")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "error: no terminal to type the password at: pipe it in with --password-stdin\n"
