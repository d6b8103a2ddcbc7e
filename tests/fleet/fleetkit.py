"""Several machines of one fleet on this host: each a real daemon with its own VINOS_HOME,
runtime dir and machine name, all on one test database. Their runs use the stand-in worker
(tests/supervisor/fakeworker.py `ok`): the fleet is about who runs a slot, not the sandbox."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from routines import proposals
from routines.ledger import LedgerUnavailable, RunRow
from routines.ledger.postgres import Gate, PgLedger
from routines.proposals import Proposal
from routines.spec.paths import Paths, paths
from tests.supervisor.daemonkit import REPO, DaemonProcess, command_routine, wait_for, write_routine

__all__ = ["Machine", "fleet_rows", "fleet_waiting", "minute_boundary"]

FAKEWORKER = [sys.executable, str(REPO / "tests/supervisor/fakeworker.py")]


RUNTIMES: list[Path] = []  # removed after each test (tests/fleet/conftest.py)


class Machine:
    """One machine: its home under tmp/NAME, its config.toml naming it, its daemon."""

    def __init__(
        self,
        tmp: Path,
        monkeypatch: pytest.MonkeyPatch,
        name: str,
        dsn: str,
        *,
        clock_file: Path | None = None,
        worker: tuple[str, ...] = ("ok",),
        extra_env: dict[str, str] | None = None,
        config: str = "",
        real_worker: bool = False,
        machine: str | None = None,
    ) -> None:
        self.name = machine or name  # [fleet] machine; `name` is its home's directory
        root = tmp / name
        # The runtime dir (the control socket's) is short, under /tmp: a Unix socket's path
        # must fit in 107 bytes, which a test's tmp_path under xdist may not leave room for.
        home, runtime = root / "home", Path(tempfile.mkdtemp(prefix=f"vf-{name}-"))
        (home / "routines").mkdir(parents=True, exist_ok=True)
        runtime.chmod(0o700)
        RUNTIMES.append(runtime)
        (home / "routines" / "config.toml").write_text(
            f'[fleet]\nmachine = "{self.name}"\n{config}'
        )
        with monkeypatch.context() as m:
            m.setenv("VINOS_HOME", str(home))
            m.setenv("XDG_RUNTIME_DIR", str(runtime))
            m.setenv("VINOS_FLEET_DATABASE", dsn)
            self.paths: Paths = paths()
            timings = {
                "fleet_renew_sec": 0.5,
                "fleet_lease_sec": 3,
                "housekeeping_delay_sec": 3600,
            }
            argv = None if real_worker else [*FAKEWORKER, *worker]  # None: python -m worker
            self.daemon = DaemonProcess(
                root, tick=0.2, extra_env=extra_env, timings=timings, worker_argv=argv
            )
        if clock_file is not None:
            self.daemon.clock_file = clock_file  # VINOS_DEBUG_TIMINGS names it at start

    def write(self, name: str, text: str) -> None:
        write_routine(name, text, self.paths)

    def start(self) -> Machine:
        self.daemon.start()
        return self


_observer: dict[str, PgLedger] = {}


def fleet_rows(dsn: str, routine: str | None = None) -> list[tuple[RunRow, str]]:
    """Every run row in the fleet database with its machine, oldest first. Tests poll it:
    one connection per database (the last test's is closed), not one per poll."""
    ledger = _observer.get(dsn)
    if ledger is None:
        for old in _observer.values():
            old.close()
        _observer.clear()
        ledger = _observer[dsn] = PgLedger(dsn, "observer", gate=Gate(cap=0.2))
    try:
        found = ledger.fleet_history(routine, limit=100_000)
    except LedgerUnavailable:  # the server was restarted under it: the next poll reconnects
        return []
    return sorted(((f.row, f.machine) for f in found), key=lambda x: x[0].id)


def fleet_waiting(dsn: str) -> list[Proposal]:
    """The fleet's waiting proposals, newest first (read as any machine reads them)."""
    fleet_rows(dsn)  # opens the observer's connection
    return proposals.waiting(_observer[dsn])


def minute_boundary(ahead: timedelta = timedelta(minutes=10)) -> datetime:
    t = datetime.now(UTC) + ahead
    return datetime.fromtimestamp(int(t.timestamp()) // 60 * 60, UTC)


def minutely(run: str = "echo hi", extra: str = "") -> str:
    return command_routine(run, extra=extra)


def wait_logged(
    predicate: Callable[[], Any], what: str, machines: Iterable[Machine], timeout: float = 90
) -> Any:
    """wait_for with a deadline generous enough for a cluster stopped and started on a loaded
    machine; a timeout shows the tail of each machine's daemon log."""
    try:
        return wait_for(predicate, timeout=timeout, what=what)
    except AssertionError as exc:
        logs = "\n".join(f"--- {m.name}:\n{m.daemon.log()[-6000:]}" for m in machines)
        raise AssertionError(f"{exc}\n{logs}") from None
