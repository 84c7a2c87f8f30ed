"""Python 3.11's asyncio.wait_for returns the result of an awaitable that completes just as the waiting task
is cancelled, and the cancellation is lost: a background loop cancelled at shutdown then runs on, and the
shutdown waits for it forever. The project bounds its waits with asyncio.timeout, which keeps it."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_project_code_waits_with_wait_for() -> None:
    sources = [p for folder in ("services", "shared", "cairn", "bench") for p in (ROOT / folder).rglob("*.py")]
    assert len(sources) > 50
    using = [str(p.relative_to(ROOT)) for p in sources if "asyncio.wait_for(" in p.read_text(encoding="utf-8")]
    assert using == []
