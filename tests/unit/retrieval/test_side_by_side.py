"""SideBySide: the texts of a call shared between two threads, each taking the next one free."""
from __future__ import annotations

import threading

import pytest

from services.retrieval.adapters.single_text import SideBySide

pytestmark = pytest.mark.unit


class _HeldUpHelper:
    """Encodes a text as [its length]. The helper thread, once it has taken a text, holds it until the caller's
    thread has done every other one, as when the CPU's other work keeps the helper off its core; the caller's
    thread starts once the helper has taken its text, so that the helper's thread is not merely late to start."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.by_thread: dict[str, list[str]] = {}
        self._helper_took_one = threading.Event()
        self._caller_done = threading.Event()
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> list[list[float]]:
        (text,) = texts
        name = threading.current_thread().name
        if name.startswith("embed-side"):
            self._helper_took_one.set()
            self._caller_done.wait(timeout=5)
        elif self.total > 1:
            self._helper_took_one.wait(timeout=5)
        with self._lock:
            self.by_thread.setdefault(name, []).append(text)
            if sum(len(done) for done in self.by_thread.values()) == self.total - 1:
                self._caller_done.set()
        return [[float(len(text))]]


def test_a_held_up_thread_leaves_the_other_texts_to_the_other_thread() -> None:
    texts = [f"query {'x' * n}" for n in range(10)]
    encoder = _HeldUpHelper(total=len(texts))
    vectors = SideBySide(encoder).encode(texts)  # type: ignore[arg-type]
    assert vectors == [[float(len(t))] for t in texts]
    helper = [name for name in encoder.by_thread if name.startswith("embed-side")]
    assert [len(encoder.by_thread[name]) for name in helper] == [1], encoder.by_thread
    assert sorted(t for done in encoder.by_thread.values() for t in done) == sorted(texts)  # each text once


def test_one_text_is_encoded_on_the_callers_thread() -> None:
    encoder = _HeldUpHelper(total=1)
    assert SideBySide(encoder).encode(["alone"]) == [[5.0]]  # type: ignore[arg-type]
    assert list(encoder.by_thread) == [threading.current_thread().name]
