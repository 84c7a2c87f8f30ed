"""Hand freed heap memory back to the operating system after the keyword index is rebuilt (glibc only).

A rebuild allocates and frees millions of small objects: the chunks read back from Chroma on a full reload,
the token lists bm25s indexes, the old index it replaces. glibc keeps the freed memory inside its heaps,
where the long-lived objects allocated in between pin it, so the resident size rose with each full reload:
on the SciFact bench index (18,156 chunks, vectors kept) 388 MiB after the first load and 748 MiB after
eight, where `malloc_trim` after each one held it at 322-411 MiB, for about 20 ms a call.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim") if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None


def release_free_memory() -> bool:
    """Return the heaps' free pages to the system; False where the C library cannot (not glibc).

    ctypes lets go of the GIL during the call, so other threads go on meanwhile."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
