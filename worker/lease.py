"""The worker's dead-man switch for a fleet's leased run: "yours until T".

The daemon puts T in the Job (`Job.lease_until`) and moves it on with each lease renewal
(`Lease` messages on stdin). A worker still running at T kills its process tree (sandboxed
commands included), reports `interrupted (lease lost)` and exits, whether or not its daemon's
loop is alive: a stopped or frozen daemon renews nothing, and the fleet hands the routine to
another machine only after the lease's expiry plus a kill time, which T + kill stays below
(supervisor/fleet/plan.py `Fence`; tests/worker/test_worker_lease.py, and end to end
tests/fleet/test_fleet_fence.py).

T is on `ipc.lease_clock()` (CLOCK_BOOTTIME): it counts a suspend, so a laptop that wakes past
T stops the run at once. The watcher sleeps at most POLL_SEC at a time because a sleep's own
timer does not count the suspend.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

from ipc.framing import LineReader, ProtocolError
from ipc.messages import Lease, lease_clock

__all__ = ["POLL_SEC", "LeaseWatch", "kill_tree", "lapsed", "next_look"]

POLL_SEC = 1.0


def lapsed(now: float, until: float) -> bool:
    """Whether a run told "yours until `until`" must stop at `now` (the same clock)."""
    return now >= until


def next_look(now: float, until: float, poll: float = POLL_SEC) -> float:
    """How long the watcher sleeps before it looks again: to the deadline, at most `poll`."""
    return max(0.0, min(until - now, poll))


class LeaseWatch:
    """Two daemon threads: one reads renewals from `renewals` (the daemon's pipe), one calls
    `on_lapse` once the clock passes the deadline. `on_lapse` does not return (it exits)."""

    def __init__(
        self,
        until: float,
        renewals: LineReader | None,
        on_lapse: Callable[[], None],
        *,
        clock: Callable[[], float] = lease_clock,
    ) -> None:
        self.until = until
        self._renewals = renewals
        self._on_lapse = on_lapse
        self._clock = clock
        self._moved = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._renewals is not None:
            threading.Thread(target=self._read, name="lease-renewals", daemon=True).start()
        threading.Thread(target=self._watch, name="lease-deadline", daemon=True).start()

    def renew(self, until: float) -> None:
        """A later deadline (an earlier one is ignored: renewals can arrive out of date)."""
        with self._lock:
            self.until = max(self.until, until)
        self._moved.set()

    def _read(self) -> None:
        assert self._renewals is not None
        while True:
            try:
                msg = self._renewals.read()
            except (ProtocolError, OSError, ValueError):
                return  # no more renewals: the deadline stands
            if msg is None:
                return
            if isinstance(msg, Lease):
                self.renew(msg.until)

    def _watch(self) -> None:
        while True:
            now = self._clock()
            with self._lock:
                until = self.until
            if lapsed(now, until):
                self._on_lapse()
                return
            self._moved.wait(next_look(now, until))
            self._moved.clear()


def kill_tree() -> int:
    """SIGKILL every process this one started, however deep (a sandbox's bwrap is in a
    session of its own, so a process group is not enough); how many were signalled."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return 0
    for child in children:
        if _leads_group(child.pid):
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            child.send_signal(signal.SIGKILL)
    return len(children)


def _leads_group(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return os.getpgid(pid) == pid
    return False
