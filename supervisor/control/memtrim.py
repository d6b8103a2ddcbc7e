"""Giving the memory a large answer freed back to the system.

A thin client's `list --json` at 10,000 routines is 6 MB of text, built, encoded and queued
in the daemon (supervisor/control/answers.py), and rows of every routine besides. Python frees all
of
it, but glibc keeps the freed heap pages for later: its mmap threshold rises to the largest
block freed, so the next answer's buffers come from the heap too, and the daemon's idle RSS
stayed ~29 MB higher after a few answers. `malloc_trim(0)` hands the free pages back
(tests/supervisor/test_answer_memory.py holds the daemon's idle RSS within a few MB across
answers; bench/bench_thin.py measures it at 10,000 routines).

glibc only: musl and others have no malloc_trim (their allocators return memory on their
own), and there `release` does nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["release"]

_trim: list[Callable[[int], int] | None] = []  # looked up once: [malloc_trim] or [None]


def _lookup() -> Callable[[int], int] | None:
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (ValueError, OSError):  # not glibc: the name is unknown there
        return None
    import ctypes

    fn: Callable[[int], int] | None = getattr(ctypes.CDLL(None), "malloc_trim", None)
    return fn


def release() -> bool:
    """Return the C heap's free pages to the system; False where that cannot be done."""
    if not _trim:
        _trim.append(_lookup())
    fn = _trim[0]
    if fn is None:
        return False
    fn(0)
    return True
