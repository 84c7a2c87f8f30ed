"""Freed heap memory goes back to the system after a rebuild (glibc, as on every machine Cairn ships to)."""
from __future__ import annotations

import platform

import psutil
import pytest

from services.retrieval.adapters.heap import release_free_memory

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's; elsewhere a no-op"),
]


def resident_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def test_free_pages_pinned_between_live_objects_are_handed_back() -> None:
    # 1 KiB strings come from malloc's heap; keeping every twentieth pins it, so nothing returns on its own.
    strings = [str(i).rjust(1024, "x") for i in range(200_000)]
    kept = strings[::20]
    del strings
    pinned = resident_mib()
    assert release_free_memory() is True
    assert pinned - resident_mib() > 100, "about 190 of the 200 MiB were free between the kept strings"
    assert len(kept) == 10_000
