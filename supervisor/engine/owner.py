"""Who owns what: the daemon's identity (pid + start time), whether an owner is still alive,
the lock files that keep one daemon per VINOS_HOME, and whether the files it holds are still
the ones at their paths.

Invariant: a run row's owner is (pid, create time), never a pid alone: a pid may be reused by
an unrelated process, which must not keep a dead daemon's runs "busy" forever.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

import psutil

from routines.ledger import ActiveRun
from routines.ledger.api import LedgerAPI
from routines.product import ROOT_REFUSAL, version  # re-exported for the daemon: one copy
from routines.runs import RunEnd, RunStatus
from routines.spec.paths import Paths

__all__ = [
    "ROOT_REFUSAL",
    "FileId",
    "Locks",
    "acquire_locks",
    "file_id",
    "held_files",
    "interrupt_orphans",
    "lost_file",
    "others_running",
    "owner_alive",
    "process_identity",
    "version",
]


def process_identity(pid: int | None = None) -> tuple[int, float]:
    """(pid, create time): a pid alone may be reused by an unrelated process later."""
    proc = psutil.Process(pid)
    return proc.pid, proc.create_time()


def owner_alive(pid: int | None, started: float | None) -> bool:
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if started is not None and abs(proc.create_time() - started) > 0.01:
            return False
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def others_running(ledger: LedgerAPI) -> frozenset[str]:
    """Routines with an active run in `ledger` owned by another live process (the CLI's run
    without a daemon, a second daemon on one state dir): overlap holds across processes."""
    me = os.getpid()
    return frozenset(
        a.routine
        for a in ledger.active_runs()
        if a.owner_pid != me and owner_alive(a.owner_pid, a.owner_started)
    )


def interrupt_orphans(ledger: LedgerAPI, now: datetime) -> list[ActiveRun]:
    """End as `interrupted` the active runs whose owner is gone (a crashed daemon, a killed `run`);
    never replayed (test_daemon_crash.py::test_kill9_of_the_daemon_mid_run_then_restart). The runs
    it ended: one that ended meanwhile keeps its own ending (`Ledger.finish_run` changes only an
    active row)."""
    ended = []
    for run in ledger.active_runs():
        if owner_alive(run.owner_pid, run.owner_started):
            continue
        detail = f"its supervisor (pid {run.owner_pid}) went away; not replayed"
        if ledger.finish_run(run.run_id, RunEnd(RunStatus.INTERRUPTED, detail), now=now):
            ended.append(run)
    return ended


@dataclass(frozen=True, slots=True)
class Locks:
    files: tuple[IO[str], ...]


def acquire_locks(p: Paths) -> Locks:
    """One daemon per VINOS_HOME (and per runtime dir, where its socket lives)."""
    files: list[IO[str]] = []
    for path in (p.daemon_lock, p.state_dir / ".daemon.lock"):
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            f = open(path, "a+")  # noqa: SIM115 - held open for the daemon's lifetime
        except OSError as exc:
            for other in files:
                other.close()
            raise SystemExit(
                f"vinos-routine: cannot create the lock {path} ({exc.strerror or exc}); "
                "without it a second daemon could start beside this one"
            ) from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            for other in files:
                other.close()
            raise SystemExit(
                f"vinos-routine: another daemon is already running for {p.home} "
                f"(pid {holder}, lock {path}); stop it first "
                "(systemctl --user stop vinos-routined)"
            ) from None
        files.append(f)
        try:  # unbuffered: nothing is left to flush (and fail) when the file is closed
            os.ftruncate(f.fileno(), 0)
            os.write(f.fileno(), f"{os.getpid()}\n".encode())
        except OSError as exc:
            # A full disk: the flock is what keeps one daemon, and it is held; the pid in the
            # file only names the holder in a second daemon's refusal, so start without it
            # (tests/supervisor/test_reliability_storage.py).
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            with contextlib.suppress(OSError):
                os.ftruncate(f.fileno(), 0)
    return Locks(tuple(files))


FileId = tuple[int, int]  # (st_dev, st_ino)


def file_id(path: Path) -> FileId | None:
    """The identity of the file at `path` (not following a symlink), None when it is gone."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def held_files(ledger: Path, locks: Locks | None) -> dict[Path, FileId]:
    """The files whose identity the daemon keeps checking: the ledger and the lock files."""
    held: dict[Path, FileId] = {}
    ledger_id = file_id(ledger)
    if ledger_id is not None:
        held[ledger] = ledger_id
    for f in locks.files if locks else ():
        st = os.fstat(f.fileno())
        held[Path(f.name)] = (st.st_dev, st.st_ino)
    return held


def lost_file(held: dict[Path, FileId]) -> str | None:
    """Why one of the files the daemon holds open is no longer the one at its path, or None.

    A deleted or replaced ledger or lock means another process may start a second ledger and a
    second daemon beside this one: then a slot could run twice
    (test_reliability_lost.py::test_a_replaced_ledger_stops_scheduling_until_it_is_moved_back)."""
    for path, ident in held.items():
        now = file_id(path)
        if now is None:
            return f"{path} was deleted"
        if now != ident:
            return f"{path} was replaced by another file"
    return None
