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


def cairn(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    nowhere = f"http://127.0.0.1:{free_port()}"  # were anything sent, the error would be "not reachable"
    env = {k: v for k, v in os.environ.items() if k != "CAIRN_PASSWORD"} | {
        "PYTHONPATH": str(REPO),
        "RETRIEVAL_URL": nowhere,
        "GATEWAY_URL": nowhere,
        "CAIRN_DATA_DIR": str(cwd / "data"),
    }
    return subprocess.run(
        [sys.executable, "-m", "cairn.cli", *args],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
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


@pytest.mark.parametrize("question", ["", "   "], ids=["empty", "blank"])
def test_an_empty_question_is_refused_before_the_password_is_asked_for(workdir: Path, question: str) -> None:
    result = cairn("ask", question, "--user", "dave", cwd=workdir)
    assert (result.returncode, result.stderr, result.stdout) == (2, "error: the question is empty\n", "")
