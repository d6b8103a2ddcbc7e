"""The worker's dead-man switch for a fleet's leased run (worker/lease.py): "yours until T".

The timing decisions on a fake clock; then real workers running real sandboxed commands: one
never renewed kills its command and reports `interrupted (lease lost)` on its own, one renewed
over its pipe runs to its end."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import psutil
import pytest
from msgspec.structs import replace

from ipc import Hello, Lease, LineReader, Message, Result, RunStatus, encode, lease_clock
from tests.worker.worker_harness import command_toml, make_job, spawn
from worker.lease import POLL_SEC, LeaseWatch, lapsed, next_look


def test_a_lease_lapses_at_its_deadline_and_not_before() -> None:
    assert not lapsed(99.9, 100.0)
    assert lapsed(100.0, 100.0)
    assert lapsed(5000.0, 100.0)  # a laptop that woke long past it


def test_the_watcher_sleeps_to_the_deadline_but_never_longer_than_a_poll() -> None:
    assert next_look(99.5, 100.0) == 0.5
    assert next_look(0.0, 100.0) == POLL_SEC  # a suspend is seen within a poll of waking
    assert next_look(101.0, 100.0) == 0.0


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def wait_until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("not in time")


def test_the_switch_fires_once_the_clock_passes_the_deadline_and_a_renewal_moves_it() -> None:
    clock = FakeClock(1000.0)
    fired = threading.Event()
    watch = LeaseWatch(1010.0, None, fired.set, clock=clock)
    watch.start()
    clock.now = 1009.0
    watch.renew(1020.0)
    watch.renew(1015.0)  # an older renewal arriving late does not move it back
    assert watch.until == 1020.0
    clock.now = 1015.0
    time.sleep(2 * POLL_SEC)  # looked at least once past the old deadline
    assert not fired.is_set()
    clock.now = 1020.0  # e.g. woken from a suspend: no renewal came
    wait_until(fired.is_set)


def _read_all(out: bytes) -> list[Message]:
    reader = LineReader(io.BytesIO(out))
    found: list[Message] = []
    while (m := reader.read()) is not None:
        found.append(m)
    return found


def _sleepers(tag: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if tag in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


@pytest.mark.slow
def test_a_worker_never_renewed_kills_its_sandboxed_command_and_reports_lease_lost(
    home: Path, not_root: None
) -> None:
    job = make_job(home, command_toml("sleep 97; echo end", timeout_sec=300), name="disk")
    # Seconds, not a fraction: the sandboxed sleep must be seen running before the lease ends,
    # and a loaded machine may take several seconds to start the worker and its sandbox.
    job = replace(job, lease_until=lease_clock() + 15)
    proc = spawn()
    assert proc.stdin is not None
    proc.stdin.write(encode(Hello()) + encode(job))
    proc.stdin.flush()  # stdin stays open: the daemon would renew over it, and does not
    wait_until(lambda: _sleepers("sleep 97"), timeout=30)
    out, err = proc.communicate(timeout=60)  # long before the command's 97 s
    results = [m for m in _read_all(out) if isinstance(m, Result)]
    assert [r.status for r in results] == [RunStatus.INTERRUPTED], err
    assert results[0].summary == "lease lost"
    assert "lease lost" in (results[0].error or "")
    assert proc.returncode == 0
    wait_until(lambda: not _sleepers("sleep 97"))  # the sandboxed command is gone too


@pytest.mark.slow
def test_a_worker_renewed_over_its_pipe_runs_its_command_to_the_end(
    home: Path, not_root: None
) -> None:
    job = make_job(home, command_toml("sleep 8; echo finished", timeout_sec=300), name="disk")
    job = replace(job, lease_until=lease_clock() + 5)  # the sleep outlasts it: renewals count
    proc = spawn()
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(encode(Hello()) + encode(job))
    proc.stdin.flush()
    stop = threading.Event()

    def renew() -> None:  # as the daemon's heartbeat does, each second, 5 s ahead
        assert proc.stdin is not None
        while not stop.wait(1.0):
            try:
                proc.stdin.write(encode(Lease(lease_clock() + 5)))
                proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                return

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    out = proc.stdout.read()
    stop.set()
    renewer.join()
    proc.wait(30)
    results = [m for m in _read_all(out) if isinstance(m, Result)]
    assert [(r.status, r.summary) for r in results] == [(RunStatus.OK, "finished")]
