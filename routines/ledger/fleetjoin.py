"""`vinos-routine fleet join`: copy this machine's SQLite history into the fleet's database.

Everything goes in one transaction, and a second join copies nothing twice:
- runs by run id (ON CONFLICT DO NOTHING; a legacy row without one gets a stable id made of
  the machine and its row number). A run left queued or running (its daemon is stopped for
  the join) arrives `interrupted`, never replayed.
- claims, from the runs' slots: every slot this machine claimed, skipped or recorded missed
  stays claimed fleet-wide. Older, pruned claims are kept away by the cursor.
- routine state: the cursor becomes the later of the fleet's and this machine's (never
  backwards); the rest (streak, enabled override) is taken only where the fleet has none.
- compacted days, added once per machine (ledger_meta remembers the join).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from routines.ledger import iso, rundays
from routines.ledger.api import LedgerAPI
from routines.ledger.migrate_postgres import note_last
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
            cur.execute(
                "INSERT INTO runs (run_id, routine, machine, slot, trigger, status, outcome, "
                "detail, started_at, finished_at, duration_sec, route, model, escalated, "
                "escalated_reason, input_tokens, output_tokens, local_input_tokens, "
                "local_output_tokens, tool_calls, tools_used, dollars, output_file, tried_model) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                "%s, %s, %s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING",
                (
                    run_id, r.routine, machine, r.slot, r.trigger, status, r.outcome, detail,
                    r.started_at, finished, r.duration_sec, r.route, r.model, r.escalated,
                    r.escalated_reason, r.input_tokens, r.output_tokens, r.local_input_tokens,
                    r.local_output_tokens, r.tool_calls,
                    None if r.tools_used is None else json.dumps(r.tools_used),
                    r.dollars, r.output_file, r.tried_model,
                ),
            )  # fmt: skip
            if cur.rowcount:
                copied += 1
                interrupted += status != r.status
            if r.slot:
                cur.execute(
                    "INSERT INTO claims (routine, slot, claimed_at, run_id, machine) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (r.routine, r.slot, r.started_at or iso(now), run_id, machine),
                )
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
                note_last(
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
