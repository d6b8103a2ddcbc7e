"""The daemon's clock, behind a narrow seam so tests can step the wall clock.

`SystemClock` is the real one. `OffsetClock` adds an offset read from a file to the real time;
the daemon uses it only when its timings name an offset file (supervisor/timings.py, the
VINOS_DEBUG_TIMINGS setting), which lets end-to-end tests step a real daemon's wall clock
forward and back (an NTP step, a laptop waking up) without root.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

__all__ = ["Clock", "FakeClock", "OffsetClock", "SystemClock", "clock_from"]


class Clock(Protocol):
    def now(self) -> datetime:
        """The wall clock, as an aware UTC datetime."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps (for timeouts)."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class OffsetClock:
    """Real time plus the number of seconds written in `path` (0 when missing or unreadable)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def offset(self) -> timedelta:
        try:
            return timedelta(seconds=float(self.path.read_text().strip() or 0))
        except (OSError, ValueError):
            return timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset()

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told: for unit tests of scheduling code."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, delta: timedelta) -> None:
        self._now += delta
        self._mono += max(delta.total_seconds(), 0.0)

    def set(self, instant: datetime) -> None:
        """Step the wall clock (forward or back); the monotonic clock does not move back."""
        self._now = instant


def clock_from(offset_file: Path | None) -> Clock:
    """The real clock, or one offset by the seconds in `offset_file` (tests)."""
    return OffsetClock(offset_file) if offset_file is not None else SystemClock()
