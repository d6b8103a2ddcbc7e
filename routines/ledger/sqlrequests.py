"""A run's requests for a person (proposals) and a paused run's conversation, in the ledger: the
SQL of both databases, part of `SqlLedger` (routines/ledger/sqlstore.py), so a fleet keeps them
in its one PostgreSQL database and any machine answers and resumes a paused run
(tests/fleet/test_fleet_needs_you.py). The memory store's are routines/ledger/memory.py's;
tests/fleet/test_ledger_contract.py runs one suite on the three.

The rules of a proposal's `state` (each move one conditional UPDATE, so of racing processes
exactly one wins) are routines/proposals.py's, which calls these; rows are plain dicts, so the
ledger knows nothing of a proposal's type.

Queries are written with "?" and bound with the backend's placeholder (`_q`); a parameter
that may be NULL is CAST, as PostgreSQL cannot tell the type of a bare one. A proposal's free
texts (the model's input, an action's output) may hold any character, NUL too, which
PostgreSQL's TEXT refuses: there they are BYTEA (`BLOBS`), UTF-8 both ways, so a request reads
back as it was proposed on either database
(tests/fleet/test_ledger_contract.py::test_a_proposal_round_trips_and_is_decided_once).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

from routines.ledger.sql import Dialect

__all__ = ["BLOBS", "PROPOSAL_COLUMNS", "SqlRequests"]

# A proposal row's columns, in order (routines/proposals.py `Proposal`'s fields).
PROPOSAL_COLUMNS = (
    "id",
    "routine",
    "run_id",
    "action",
    "command",
    "input",
    "summary",
    "fingerprint",
    "created_at",
    "expires_at",
    "state",
    "decided_by",
    "decided_at",
    "why",
    "exit_status",
    "output",
    "finished_at",
)
# The free-text columns, BYTEA on PostgreSQL (routines/ledger/migrate_postgres.py).
BLOBS = frozenset({"command", "input", "summary", "why", "output"})
_SELECT = f"SELECT {', '.join(PROPOSAL_COLUMNS)} FROM proposals"
_DECIDED = ("done", "denied", "expired", "invalidated")


class SqlRequests:
    """The proposals' and conversations' queries; `SqlLedger` supplies the connection."""

    Q: ClassVar[Dialect]
    # Whether this database keeps `BLOBS` as bytes (PostgreSQL) or as text (SQLite).
    TEXT_AS_BYTES: ClassVar[bool] = False
    # Whether an INSERT answers the new id by RETURNING (PostgreSQL; SQLite before 3.35 has
    # none, so there it is the cursor's lastrowid).
    INSERT_RETURNS: ClassVar[bool] = False

    def transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def _q(self, sql: str) -> str:
        return sql.replace("?", self.Q.mark)

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return [
            {c: self._out(r[c]) for c in PROPOSAL_COLUMNS} for r in self._read(self._q(sql), args)
        ]

    def _in(self, value: str | None) -> str | bytes | None:
        """A free text as this database keeps it."""
        if value is None or not self.TEXT_AS_BYTES:
            return value
        return value.encode("utf-8", "surrogatepass")

    @staticmethod
    def _out(value: object) -> object:
        if isinstance(value, bytes | memoryview):
            return bytes(value).decode("utf-8", "surrogatepass")
        return value

    def _change(self, sql: str, args: Sequence[Any]) -> int:
        with self.transaction() as tx:
            n: int = tx.execute(self._q(sql), args).rowcount
        return n

    # -- proposals ------------------------------------------------------------------------

    def add_proposal(self, values: dict[str, object]) -> int:
        """Insert one waiting proposal (its columns but `id` and the decision's); its id."""
        cols = tuple(values)
        args = tuple(
            self._in(v) if isinstance(v, str) and c in BLOBS else v for c, v in values.items()
        )
        sql = f"INSERT INTO proposals ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        with self.transaction() as tx:
            if not self.INSERT_RETURNS:  # SQLite's cursor knows the row it added
                return int(tx.execute(self._q(sql), args).lastrowid)
            row = tx.execute(self._q(sql + " RETURNING id"), args).fetchone()
        return int(row["id"])

    def proposal(self, proposal_id: int) -> dict[str, Any] | None:
        rows = self._rows(f"{_SELECT} WHERE id = ?", (proposal_id,))
        return rows[0] if rows else None

    def every_proposal(self) -> list[dict[str, Any]]:
        """Every proposal, oldest first (a machine's own file's, imported into a fleet's)."""
        return self._rows(f"{_SELECT} ORDER BY id")

    def proposals_of_run(self, run_id: str) -> list[dict[str, Any]]:
        """`run_id`'s proposals, oldest first."""
        return self._rows(f"{_SELECT} WHERE run_id = ? ORDER BY id", (run_id,))

    def waiting_proposals(self, routine: str | None = None) -> list[dict[str, Any]]:
        """Waiting proposals (of `routine`), newest first."""
        return self._rows(
            f"{_SELECT} WHERE state = 'waiting' AND (CAST(? AS TEXT) IS NULL OR routine = ?) "
            "ORDER BY created_at DESC, id DESC",
            (routine, routine),
        )

    def proposals_for_routine(self, routine: str, limit: int) -> list[dict[str, Any]]:
        """`routine`'s proposals in any state, newest first."""
        return self._rows(
            f"{_SELECT} WHERE routine = ? ORDER BY created_at DESC, id DESC LIMIT ?",
            (routine, limit),
        )

    def proposals_decided_since(self, routine: str, since: str | None) -> list[dict[str, Any]]:
        """`routine`'s decided proposals (not waiting, not running) decided after `since`
        (None: all), oldest first, at most 50."""
        return self._rows(
            f"{_SELECT} WHERE routine = ? AND state != 'waiting' AND state != 'running' "
            "AND decided_at IS NOT NULL AND (CAST(? AS TEXT) IS NULL OR decided_at > ?) "
            "ORDER BY decided_at, id LIMIT 50",
            (routine, since, since),
        )

    def waiting_proposal_count(self, now: str) -> int:
        """Waiting and not expired at `now` (ISO)."""
        rows = self._read(
            self._q(
                "SELECT COUNT(*) AS n FROM proposals WHERE state = 'waiting' AND expires_at > ?"
            ),
            (now,),
        )
        return int(rows[0]["n"])

    def expire_proposals(self, now: str) -> int:
        """waiting → expired for those past their expiry; how many."""
        return self._change(
            "UPDATE proposals SET state = 'expired', decided_by = 'runtime', decided_at = ? "
            "WHERE state = 'waiting' AND expires_at <= ?",
            (now, now),
        )

    def invalidate_proposals(
        self, routine: str, current: str | None, now: str, why: str, only: int | None = None
    ) -> int:
        """waiting → invalidated for `routine`'s (or just `only`) whose fingerprint is not
        `current` (None: every one); how many."""
        return self._change(
            "UPDATE proposals SET state = 'invalidated', decided_by = 'runtime', "
            "decided_at = ?, why = ? WHERE state = 'waiting' AND routine = ? "
            "AND (CAST(? AS TEXT) IS NULL OR fingerprint != ?) "
            "AND (CAST(? AS BIGINT) IS NULL OR id = ?)",
            (now, self._in(why), routine, current, current, only, only),
        )

    def note_proposal(self, proposal_id: int, why: str) -> None:
        """Set a waiting proposal's `why`."""
        self._change(
            "UPDATE proposals SET why = ? WHERE id = ? AND state = 'waiting'",
            (self._in(why), proposal_id),
        )

    def claim_proposal(self, proposal_id: int, *, by: str, now: str, current: str) -> bool:
        """waiting → running, if unexpired at `now` and of fingerprint `current`: whether this
        call moved it."""
        return (
            self._change(
                "UPDATE proposals SET state = 'running', decided_by = ?, decided_at = ? "
                "WHERE id = ? AND state = 'waiting' AND expires_at > ? AND fingerprint = ?",
                (by, now, proposal_id, now, current),
            )
            == 1
        )

    def finish_proposal(
        self, proposal_id: int, *, exit_status: int | None, output: str, now: str
    ) -> None:
        """running → done, with how its command went."""
        self._change(
            "UPDATE proposals SET state = 'done', exit_status = ?, output = ?, finished_at = ? "
            "WHERE id = ? AND state = 'running'",
            (exit_status, self._in(output), now, proposal_id),
        )

    def deny_proposal(self, proposal_id: int, *, by: str, why: str | None, now: str) -> bool:
        """waiting → denied: whether this call moved it."""
        return (
            self._change(
                "UPDATE proposals SET state = 'denied', decided_by = ?, decided_at = ?, why = ? "
                "WHERE id = ? AND state = 'waiting'",
                (by, now, self._in(why), proposal_id),
            )
            == 1
        )

    def prune_proposals(self, before: str, limit: int) -> int:
        """Delete up to `limit` decided proposals last changed before `before`; how many."""
        return self._change(
            "DELETE FROM proposals WHERE id IN (SELECT id FROM proposals "
            f"WHERE state IN {_DECIDED} "
            "AND COALESCE(finished_at, decided_at, created_at) < ? ORDER BY id LIMIT ?)",
            (before, limit),
        )

    # -- a paused run's conversation ------------------------------------------------------

    def save_conversation(self, run_id: str, routine: str, body: str, now: str) -> None:
        """Keep (or replace) run `run_id`'s conversation record (routines/conversation.py's
        JSON, already fitted under its cap)."""
        with self.transaction() as tx:
            tx.execute(
                self._q(
                    "INSERT INTO conversations (run_id, routine, saved_at, body) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
                    "routine = excluded.routine, saved_at = excluded.saved_at, "
                    "body = excluded.body"
                ),
                (run_id, routine, now, body),
            )

    def conversation(self, run_id: str) -> str | None:
        rows = self._read(self._q("SELECT body FROM conversations WHERE run_id = ?"), (run_id,))
        return str(rows[0]["body"]) if rows else None

    def prune_conversations(self, before: str, keep: Sequence[str], limit: int) -> int:
        """Delete up to `limit` conversations saved before `before`, but those of `keep` (the
        runs still paused); how many."""
        keep_sql = f" AND run_id NOT IN ({', '.join('?' * len(keep))})" if keep else ""
        return self._change(
            "DELETE FROM conversations WHERE run_id IN (SELECT run_id FROM conversations "
            f"WHERE saved_at < ?{keep_sql} ORDER BY saved_at LIMIT ?)",
            (before, *keep, limit),
        )
