"""The fleet's own tables on PostgreSQL: machines (heartbeats), leases (one per queued or
running run, renewed by its machine; a lapsed one ends its run `interrupted`, never replayed)
and definitions (each routine's file fingerprint per machine, for divergence). A mixin of
`PgLedger`, which supplies the connection, the machine's name and the lease length.

Leases and heartbeats are timed by the server's clock (`now()`), never a machine's: a machine
whose clock runs ahead cannot end another's runs early.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from routines.ledger import iso
from routines.pgschema import note_last
from routines.runs import ACTIVE, RunStatus, sql_in

__all__ = ["LEASE_SEC", "FleetTables", "MachineRow"]

LEASE_SEC = 60.0  # a running run's lease lasts this long past its last renewal

Cursor = psycopg.Cursor[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class MachineRow:
    machine: str
    version: str | None
    pid: int | None
    joined_at: datetime
    heartbeat: datetime | None
    left_at: datetime | None
    heartbeat_age_sec: float | None  # by the server's clock


class FleetTables:
    machine: str
    lease_sec: float

    def transaction(self) -> AbstractContextManager[Cursor]:
        raise NotImplementedError

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        raise NotImplementedError

    def busy_elsewhere(self) -> dict[str, str]:
        """Routines with a live lease on another machine, and that machine (fleet overlap)."""
        rows = self._read(
            "SELECT routine, machine FROM leases WHERE machine <> %s AND expires_at > now()",
            (self.machine,),
        )
        return {r["routine"]: r["machine"] for r in rows}

    def register(self, version: str, pid: int) -> None:
        """Join (or rejoin) the fleet as this machine and beat once."""
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO machines (machine, version, pid, heartbeat) "
                "VALUES (%s, %s, %s, now()) ON CONFLICT (machine) DO UPDATE SET "
                "version = excluded.version, pid = excluded.pid, heartbeat = now(), "
                "left_at = NULL",
                (self.machine, version, pid),
            )

    def leave(self, machine: str | None = None) -> bool:
        """Mark a machine as gone from the fleet (its definitions no longer count)."""
        with self.transaction() as cur:
            cur.execute(
                "UPDATE machines SET left_at = now() WHERE machine = %s AND left_at IS NULL",
                (machine or self.machine,),
            )
            gone = cur.rowcount > 0
            cur.execute("DELETE FROM definitions WHERE machine = %s", (machine or self.machine,))
        return gone

    def renew(self) -> int:
        """Heartbeat, and extend every lease this machine holds; how many leases."""
        with self.transaction() as cur:
            cur.execute("UPDATE machines SET heartbeat = now() WHERE machine = %s", (self.machine,))
            cur.execute(
                "UPDATE leases SET expires_at = now() + make_interval(secs => %s) "
                "WHERE machine = %s",
                (self.lease_sec, self.machine),
            )
            return cur.rowcount

    def expire_leases(self, now: datetime) -> list[tuple[str, str, str]]:
        """Runs whose lease lapsed become `interrupted`, never replayed: (routine, run id,
        machine) of each. SKIP LOCKED: two machines expiring at once end each run once."""
        out: list[tuple[str, str, str]] = []
        with self.transaction() as cur:
            cur.execute(
                "DELETE FROM leases WHERE run_id IN (SELECT run_id FROM leases "
                "WHERE expires_at < now() FOR UPDATE SKIP LOCKED) "
                "RETURNING run_id, routine, machine"
            )
            lapsed = cur.fetchall()
            for lease in lapsed:
                cur.execute(
                    "UPDATE runs SET status = %s, finished_at = %s, detail = %s "
                    f"WHERE run_id = %s AND status IN {sql_in(ACTIVE)} "
                    "RETURNING started_at",
                    (
                        RunStatus.INTERRUPTED.value,
                        iso(now),
                        f"its machine {lease['machine']} stopped renewing the run's lease; "
                        "not replayed",
                        lease["run_id"],
                    ),
                )
                row = cur.fetchone()
                if row is None:
                    continue
                if row["started_at"]:
                    note_last(
                        cur,
                        lease["routine"],
                        lease["run_id"],
                        RunStatus.INTERRUPTED,
                        None,
                        row["started_at"],
                        iso(now),
                    )
                out.append((lease["routine"], lease["run_id"], lease["machine"]))
        return out

    def machines(self) -> list[MachineRow]:
        rows = self._read(
            "SELECT machine, version, pid, joined_at, heartbeat, left_at, "
            "EXTRACT(EPOCH FROM now() - heartbeat) AS age FROM machines ORDER BY machine"
        )
        return [
            MachineRow(
                r["machine"],
                r["version"],
                r["pid"],
                r["joined_at"],
                r["heartbeat"],
                r["left_at"],
                float(r["age"]) if r["age"] is not None else None,
            )
            for r in rows
        ]

    def publish_definitions(self, fingerprints: Mapping[str, str]) -> None:
        """This machine's routines and their definition fingerprints, replacing the last."""
        with self.transaction() as cur:
            cur.execute(
                "SELECT routine, fingerprint FROM definitions WHERE machine = %s",
                (self.machine,),
            )
            known = {r["routine"]: r["fingerprint"] for r in cur.fetchall()}
            gone = [n for n in known if n not in fingerprints]
            if gone:
                cur.execute(
                    "DELETE FROM definitions WHERE machine = %s AND routine = ANY(%s)",
                    (self.machine, gone),
                )
            changed = [(n, fp) for n, fp in fingerprints.items() if known.get(n) != fp]
            if changed:
                cur.executemany(
                    "INSERT INTO definitions (routine, machine, fingerprint) "
                    "VALUES (%s, %s, %s) ON CONFLICT (routine, machine) DO UPDATE SET "
                    "fingerprint = excluded.fingerprint, seen_at = now()",
                    [(n, self.machine, fp) for n, fp in changed],
                )

    def definitions_token(self) -> str:
        """A digest of what `definitions()` returns, computed by the server: one short row
        whatever the fleet's size, so an idle tick need not read every fingerprint."""
        rows = self._read(
            "SELECT md5(COALESCE(string_agg(d.routine || '/' || d.machine || '/' || "
            "d.fingerprint, ',' ORDER BY d.routine, d.machine), '')) AS digest "
            "FROM definitions d JOIN machines m ON m.machine = d.machine "
            "WHERE m.left_at IS NULL AND m.heartbeat > now() - make_interval(secs => %s)",
            (self.lease_sec,),
        )
        return str(rows[0]["digest"])

    def definitions(self) -> dict[str, dict[str, str]]:
        """routine → {machine: fingerprint}, for the machines up now (a heartbeat within one
        lease): a machine that is down cannot run a slot, so its file cannot make one run
        from two definitions; it publishes its own again before it schedules anything."""
        rows = self._read(
            "SELECT d.routine, d.machine, d.fingerprint FROM definitions d "
            "JOIN machines m ON m.machine = d.machine WHERE m.left_at IS NULL "
            "AND m.heartbeat > now() - make_interval(secs => %s)",
            (self.lease_sec,),
        )
        out: dict[str, dict[str, str]] = {}
        for r in rows:
            out.setdefault(r["routine"], {})[r["machine"]] = r["fingerprint"]
        return out

    def where_running(self) -> dict[str, str]:
        """routine → machine, for every run with a live lease."""
        rows = self._read("SELECT routine, machine FROM leases WHERE expires_at > now()")
        return {r["routine"]: r["machine"] for r in rows}
