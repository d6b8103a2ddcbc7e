"""`vinos-routine fleet join`: copy this machine's SQLite history into the fleet's database.

Everything goes in one transaction, and a second join copies nothing twice:
- runs by run id, through the ledger's own insert of a run row (every column `RunRow`
  has; ON CONFLICT DO NOTHING; a legacy row without one gets a stable id made of
  the machine and its row number). A run left queued or running (its daemon is stopped for
  the join) arrives `interrupted`, never replayed.
- claims, from the runs' slots: every slot this machine claimed, skipped or recorded missed
  stays claimed fleet-wide. Older, pruned claims are kept away by the cursor.
- routine state: the cursor becomes the later of the fleet's and this machine's (never
  backwards); the rest (streak, enabled override) is taken only where the fleet has none.
- compacted days, added once per machine (ledger_meta remembers the join).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from routines.ledger import iso, rundays
from routines.ledger.api import LedgerAPI
from routines.ledger.model import stored_run
from routines.ledger.postgres import PgLedger
from routines.runs import ACTIVE, RunStatus, status_of

__all__ = ["JoinReport", "join"]

_ALL = 10**9


@dataclass(frozen=True, slots=True)
class JoinReport:
    runs: int  # run rows copied (not there before)
    claims: int
    states: int
    days: int  # compacted day rows added (0 on a second join)
    interrupted: int  # runs left queued/running locally, copied as interrupted


def join(fleet: PgLedger, local: LedgerAPI, now: datetime) -> JoinReport:
    machine = fleet.machine
    runs = local.history(None, _ALL)
    states = local.states()
    last = local.last_runs()
    days = local.days(None, _ALL)
    copied = claims = interrupted = added_days = 0
    with fleet.transaction() as cur:
        for r in runs:
            run_id = r.run_id or f"{machine}-row-{r.id}"
            status, detail, finished = r.status, r.detail, r.finished_at
            if status in ACTIVE:
                status, finished = RunStatus.INTERRUPTED, iso(now)
                detail = "left running on this machine when it joined the fleet; not replayed"
            values = stored_run(r) | {
                "run_id": run_id,
                "machine": machine,
                "status": status,
                "detail": detail,
                "finished_at": finished,
            }
            if fleet.insert_run_row(cur, values, once=True):
                copied += 1
                interrupted += status != r.status
            if r.slot:
                claim = {
                    "routine": r.routine,
                    "slot": r.slot,
                    "claimed_at": r.started_at or iso(now),
                    "run_id": run_id,
                    "machine": machine,
                }
                cur.execute(fleet.Q.insert_claim(tuple(claim)), tuple(claim.values()))
                claims += cur.rowcount
        for name, st in states.items():
            cur.execute(
                "INSERT INTO routine_state (routine, enabled_override, file_enabled_seen, "
                "file_identity, failure_streak, disabled_reason, cursor, schedule_fingerprint) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (routine) DO UPDATE SET "
                "cursor = GREATEST(routine_state.cursor, excluded.cursor)",
                (
                    name,
                    None if st.enabled_override is None else int(st.enabled_override),
                    None if st.file_enabled_seen is None else int(st.file_enabled_seen),
                    st.file_identity,
                    st.failure_streak,
                    st.disabled_reason,
                    st.cursor,
                    st.schedule_fingerprint,
                ),
            )
        for name, lr in last.items():
            # A v2.0.x status the enum lacks ("error") was a last run all the same.
            if lr.run_id and lr.status and lr.started_at and lr.finished_at:
                fleet.note_last(
                    cur, name, lr.run_id, status_of(lr.status), lr.outcome, lr.started_at,
                    lr.finished_at,
                )  # fmt: skip
        cur.execute(
            "INSERT INTO ledger_meta (key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (f"joined:{machine}", iso(now)),
        )
        if cur.rowcount:  # the first join of this machine: its compacted days, once
            cols = ", ".join(rundays.DAY_COLUMNS)
            marks = ", ".join("%s" for _ in rundays.DAY_COLUMNS)
            adds = ", ".join(f"{c} = run_days.{c} + excluded.{c}" for c in rundays.COUNTERS)
            for d in days:
                cur.execute(
                    f"INSERT INTO run_days ({cols}) VALUES ({marks}) "
                    f"ON CONFLICT (routine, day) DO UPDATE SET {adds}",
                    (
                        d.routine, d.day, d.zone, d.start_at, d.end_at,
                        *(d.counts[c] for c in rundays.COUNTERS),
                        d.first_run_id, None, d.last_run_id, None,
                    ),
                )  # fmt: skip
                added_days += 1
    return JoinReport(copied, claims, len(states), added_days, interrupted)
