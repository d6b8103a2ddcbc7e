"""An upgrade loses no request: a fleet machine kept its proposals in its own SQLite file
before the fleet's database held them; its daemon's start copies them in once
(supervisor/engine/pausestore.py `import_once`). A real SQLite file, a real PostgreSQL
cluster."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from routines import proposals
from routines.ledger import Ledger
from routines.ledger.postgres import PgLedger
from routines.proposals import Decider, ProposalState
from supervisor.engine.pausestore import import_proposals

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)


def propose(led: Ledger, run_id: str, text: str) -> int:
    return proposals.add(
        led, routine="drafter", run_id=run_id, action="send-reply", command="cat", input=text,
        summary="Reply", fingerprint="f1", now=T0, expires_after=86400,
    )  # fmt: skip


def test_a_machines_own_proposals_are_copied_into_the_fleet_once(
    tmp_path: Path, pg_dsn: str
) -> None:
    with Ledger(tmp_path / "ledger.db") as local, PgLedger(pg_dsn, "a") as fleet:
        waiting = propose(local, "r1", "Hi Bob\n\0")
        ran = propose(local, "r2", "Hi Ann\n")
        proposals.claim(local, ran, by=Decider.CLI, now=T0, current="f1")
        proposals.finish(local, ran, exit_status=0, output="sent", now=T0)
        before = [proposals.get(local, i) for i in (waiting, ran)]
        assert import_proposals(fleet, local) == 2
        assert proposals.waiting(local) == [] and local.every_proposal() == []
        [w] = proposals.of_run(fleet, "r1")
        [d] = proposals.of_run(fleet, "r2")
        # Every field but the number (the fleet numbers its own) comes over as it was.
        for old, new in zip(before, (w, d), strict=True):
            assert old is not None
            assert old.as_json() | {"id": 0} == new.as_json() | {"id": 0}
        assert (w.state, d.state, d.output) == (ProposalState.WAITING, ProposalState.DONE, "sent")
        # A start killed after the copy, before the file's rows were deleted: nothing twice.
        propose(local, "r1", "Hi Bob\n\0")
        assert import_proposals(fleet, local) == 0
        assert local.every_proposal() == []
        assert len(proposals.of_run(fleet, "r1")) == 1
