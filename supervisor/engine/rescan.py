"""How often the daemon rescans the routine files: at once when a routine directory changed,
else paced to keep the scan near SCAN_CPU_SHARE of one CPU.

The mtime scan stats every routine file, which with thousands of files is real CPU on every
tick. So a tick rescans at once when a routine directory changed (a file added, removed, or
saved by rename, as editors and `vinos-routine edit` do), and otherwise, for edits in place,
only as often as keeps the scan near SCAN_CPU_SHARE of one CPU: every tick for a few hundred
files, every few minutes for 10,000 (bench/bench_supervisor.py). SIGHUP, `reload` and a
manual `run` always rescan.
"""

from __future__ import annotations

import os
import time

from routines.spec.paths import Paths
from routines.spec.registry import Registry, scan
from supervisor.engine.clock import Clock

__all__ = ["SCAN_CPU_SHARE", "SCAN_MAX_INTERVAL_SEC", "Rescanner"]

SCAN_CPU_SHARE = 0.0005
SCAN_MAX_INTERVAL_SEC = 300.0

_Stamps = tuple[tuple[int, int] | None, ...]


class Rescanner:
    def __init__(self, paths: Paths, clock: Clock) -> None:
        self.paths = paths
        self.clock = clock
        self._dirs_seen: _Stamps | None = None
        self._next_scan = 0.0  # clock.monotonic() of the next scan for edits in place

    def _dir_stamps(self) -> _Stamps:
        out: list[tuple[int, int] | None] = []
        for d in (self.paths.routines_dir, self.paths.system_dir):
            try:
                st = os.stat(d)
            except OSError:
                out.append(None)
                continue
            out.append((st.st_mtime_ns, st.st_ino))
        return tuple(out)

    def scan(self, current: Registry, force: bool) -> Registry:
        """The registry, rescanned when due, else `current` (the one in force)."""
        dirs = self._dir_stamps()  # before the scan: a change during it is seen next time
        if not force and dirs == self._dirs_seen and self.clock.monotonic() < self._next_scan:
            return current
        self._dirs_seen = dirs
        cpu = time.process_time()
        registry = scan(self.paths, current)
        cost = time.process_time() - cpu
        self._next_scan = self.clock.monotonic() + min(SCAN_MAX_INTERVAL_SEC, cost / SCAN_CPU_SHARE)
        return registry
