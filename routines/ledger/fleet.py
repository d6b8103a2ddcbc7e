"""The fleet's own tables on PostgreSQL: machines (heartbeats), leases (one per queued or
running run, renewed by its machine; a lapsed one ends its run `interrupted`, never replayed)
and definitions (each routine's file fingerprint per machine, for divergence). A mixin of
`PgLedger`, which supplies the connection, the machine's name and the lease length.

Leases and heartbeats are timed by the server's clock (`now()`), never a machine's: a machine
whose clock runs ahead cannot end another's runs early. A lapsed lease is taken over only
`taken_after` seconds past its expiry: the time its worker has to kill what it runs
(supervisor/fleet/plan.py `Fence`).

One daemon per machine name: a daemon's leases and machine row carry its `instance` (a random
id of each start), renewals touch only its own, and `register` refuses a second live daemon
under a name in use (MachineInUse, naming the other's host and pid).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from routines.ledger import iso
from routines.ledger.migrate_postgres import note_last
from routines.ledger.model import MachineInUse
from routines.ledger.shared import LEASE_LOST
from routines.runs import ACTIVE, RunStatus, sql_in

__all__ = ["LEASE_SEC", "FleetTables", "MachineInUse", "MachineRow"]

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
    host: str | None = None
    instance: str | None = None
    conflict: str | None = None  # a second daemon under this name, refused


class FleetTables:
    machine: str
    lease_sec: float
    instance: str | None
    taken_after: float  # seconds past a lease's expiry before another machine ends it

    def transaction(self) -> AbstractContextManager[Cursor]:
        raise NotImplementedError

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        raise NotImplementedError

    def busy_elsewhere(self) -> dict[str, str]:
        """Routines with a live lease on another machine, and that machine (fleet overlap)."""
        rows = self._read(
            "SELECT routine, machine FROM leases WHERE machine <> %s "
            "AND expires_at + make_interval(secs => %s) > now()",
            (self.machine, self.taken_after),
        )
        return {r["routine"]: r["machine"] for r in rows}

    def register(
        self,
        version: str,
        pid: int,
        *,
        host: str | None = None,
        boot_id: str | None = None,
        alive: Callable[[int], bool] | None = None,
    ) -> None:
        """Join (or rejoin) the fleet as this machine and beat once. With an `instance`,
        MachineInUse while another instance's heartbeat under this name is within a lease
        (and, on this very host and boot, its pid is `alive`); the refusal is noted in the
        row (`conflict`) for `fleet status`."""
        refused: str | None = None
        with self.transaction() as cur:
            cur.execute(
                "SELECT instance, host, boot_id, pid, "
                "heartbeat > now() - make_interval(secs => %s) AS fresh, left_at "
                "FROM machines WHERE machine = %s FOR UPDATE",
                (self.lease_sec, self.machine),
            )
            row = cur.fetchone()
            if (
                self.instance is not None
                and row is not None
                and row["instance"] not in (None, self.instance)
                and row["fresh"]
                and row["left_at"] is None
                and not (
                    boot_id is not None
                    and row["boot_id"] == boot_id
                    and alive is not None
                    and row["pid"] is not None
                    and not alive(int(row["pid"]))
                )
            ):
                other = f"host {row['host'] or '?'}, pid {row['pid'] or '?'}"
                refused = (
                    f"the machine name {self.machine!r} is in use by another running daemon "
                    f"({other}); this one (host {host or '?'}, pid {pid}) was refused. Give "
                    "each machine its own name ([fleet] machine in config.toml), or stop the "
                    "other daemon"
                )
                cur.execute(
                    "UPDATE machines SET conflict = %s || to_char(now() AT TIME ZONE 'UTC', "
                    "'YYYY-MM-DD HH24:MI:SS') || ' UTC' WHERE machine = %s",
                    (
                        f"a second daemon (host {host or '?'}, pid {pid}) was refused at ",
                        self.machine,
                    ),
                )
            else:
                cur.execute(
                    "INSERT INTO machines (machine, version, pid, heartbeat, instance, host, "
                    "boot_id) VALUES (%s, %s, %s, now(), %s, %s, %s) ON CONFLICT (machine) DO "
                    "UPDATE SET version = excluded.version, pid = excluded.pid, "
                    "heartbeat = now(), left_at = NULL, instance = excluded.instance, "
                    "host = excluded.host, boot_id = excluded.boot_id, conflict = NULL",
                    (self.machine, version, pid, self.instance, host, boot_id),
                )
        if refused is not None:
            raise MachineInUse(refused)

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

    def renew(self) -> list[str]:
        """Heartbeat, and extend every lease this daemon holds (this machine's, and with an
        `instance` only this instance's); the run ids of the leases renewed. A lease not among
        them is gone (it lapsed and another machine ended its run). MachineInUse when the
        machine row names another instance: a daemon took the name over while this one was
        stopped past its lease."""
        with self.transaction() as cur:
            cur.execute(
                "UPDATE machines SET heartbeat = now() WHERE machine = %s "
                "AND instance IS NOT DISTINCT FROM %s",
                (self.machine, self.instance),
            )
            if cur.rowcount == 0 and self.instance is not None:
                cur.execute("SELECT host, pid FROM machines WHERE machine = %s", (self.machine,))
                row = cur.fetchone()
                if row is not None:
                    raise MachineInUse(
                        f"the machine name {self.machine!r} was taken over by another daemon "
                        f"(host {row['host'] or '?'}, pid {row['pid'] or '?'}) while this one "
                        "did not renew it; this daemon stops"
                    )
            cur.execute(
                "UPDATE leases SET expires_at = now() + make_interval(secs => %s) "
                "WHERE machine = %s AND instance IS NOT DISTINCT FROM %s RETURNING run_id",
                (self.lease_sec, self.machine, self.instance),
            )
            return [r["run_id"] for r in cur.fetchall()]

    def expire_leases(self, now: datetime) -> list[tuple[str, str, str]]:
        """Runs whose lease lapsed become `interrupted`, never replayed: (routine, run id,
        machine) of each. SKIP LOCKED: two machines expiring at once end each run once."""
        out: list[tuple[str, str, str]] = []
        with self.transaction() as cur:
            cur.execute(
                "DELETE FROM leases WHERE run_id IN (SELECT run_id FROM leases "
                "WHERE expires_at + make_interval(secs => %s) < now() FOR UPDATE SKIP LOCKED) "
                "RETURNING run_id, routine, machine",
                (self.taken_after,),
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
                        f"{LEASE_LOST}its machine {lease['machine']} stopped renewing the "
                        "run's lease, so its worker stopped it; not replayed",
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
            "SELECT machine, version, pid, joined_at, heartbeat, left_at, host, instance, "
            "conflict, EXTRACT(EPOCH FROM now() - heartbeat) AS age FROM machines "
            "ORDER BY machine"
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
                r["host"],
                r["instance"],
                r["conflict"],
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
        rows = self._read(
            "SELECT routine, machine FROM leases "
            "WHERE expires_at + make_interval(secs => %s) > now()",
            (self.taken_after,),
        )
        return {r["routine"]: r["machine"] for r in rows}
