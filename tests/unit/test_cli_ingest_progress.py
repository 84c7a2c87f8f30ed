"""`cairn ingest`'s progress bar on a terminal: while a file is sent, which can take minutes, the bar names it."""
from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest
from tqdm import tqdm

from cairn import ingest
from cairn.ingest import ingest_paths

pytestmark = pytest.mark.unit


def test_the_bar_names_each_file_while_it_is_being_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a.md", "b.md", "c.md"):
        (tmp_path / name).write_text(f"# {name}\n\ntext\n")
    monkeypatch.chdir(tmp_path)
    terminal = io.StringIO()

    class OnATerminal(tqdm):  # what a terminal shows: the bar drawn on every refresh
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **{**kwargs, "file": terminal, "disable": False, "mininterval": 0})

    shown_while_sending: dict[str, str] = {}

    def send(client: httpx.Client, *, name: str, data: bytes) -> str:
        shown_while_sending[name] = terminal.getvalue().rsplit("\r", 1)[-1]  # the bar as last drawn
        return "added"

    monkeypatch.setattr(ingest, "tqdm", OnATerminal)
    monkeypatch.setattr(ingest, "_send_retrying", send)
    summary = ingest_paths([Path(".")], retrieval_url="http://127.0.0.1:9", service_token="t")
    assert summary.added == 3
    for name, bar in shown_while_sending.items():
        assert bar.rstrip().endswith(f"{name}]"), f"while sending {name} the bar showed {bar!r}"
