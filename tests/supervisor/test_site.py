"""This machine's Site (supervisor/engine/site.py `LocalSite`) on a real ledger file: who else is
busy is another live process's active run here, read at each refresh; nothing is held back,
and its own or a dead owner's run is not "elsewhere"."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from routines.ledger import Ledger
from routines.runs import RunEnd, RunStatus, Trigger
from routines.spec.paths import paths
from routines.spec.registry import scan
from supervisor.engine.owner import process_identity
from supervisor.engine.site import LocalSite

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def active(ledger: Ledger, name: str, owner: tuple[int, float]) -> None:
    ledger.record_run(
        name, run_id=f"{name}-1", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=T0,
        owner=owner,
    )  # fmt: skip


def test_another_live_process_run_is_busy_from_the_next_refresh_and_nothing_is_held() -> None:
    site = LocalSite(paths())
    try:
        with Ledger(paths().ledger) as other:
            active(other, "theirs", process_identity(os.getppid()))  # a live other process
            active(other, "mine", process_identity())  # this process: the pool's own
            active(other, "gone", (2**22 + 7, 1.0))  # an owner no longer alive
        assert not site.busy("theirs")  # read at a refresh, with the states
        assert site.refresh(scan(paths())) == {}
        assert [n for n in ("theirs", "mine", "gone") if site.busy(n)] == ["theirs"]
        with Ledger(paths().ledger) as other:
            other.finish_run("theirs-1", RunEnd(RunStatus.OK), now=T0)
        site.refresh(scan(paths()))
        assert not site.busy("theirs")
    finally:
        site.close()
