"""`collector_paused`: the cyclic garbage collector off while many objects that all stay are
made (the registry's scan, `list`'s rows and their text). Imports only what Python has loaded
at start, for the quick client (supervisor/cli/reads.py).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off, for making many objects that all stay: while 10,000
    routines are decoded and their entries made, it would walk them again and again (a fifth
    of a scan from the snapshot, and a third of its decoding); once on, it walks them once."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
