"""The memory store's requests for a person (proposals) and paused runs' conversations: the
reference the SQL of routines/ledger/sqlrequests.py is tested against
(tests/fleet/test_ledger_contract.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from routines.ledger.sqlrequests import PROPOSAL_COLUMNS

__all__ = ["MemoryRequests", "RequestData"]

_DECIDED = frozenset({"done", "denied", "expired", "invalidated"})


class RequestData:
    """The rows: proposals by id, conversations by run id."""

    def __init__(self) -> None:
        self.proposals: dict[int, dict[str, Any]] = {}
        self.next_proposal = 1
        self.conversations: dict[str, dict[str, str]] = {}


def _newest_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["created_at"], r["id"]), reverse=True)


class MemoryRequests:
    """Mixed into `MemoryLedger`, which supplies `requests` and `_wrote`."""

    requests: RequestData

    def _wrote(self) -> None:
        raise NotImplementedError

    def _where(self, keep: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        return [dict(r) for r in self.requests.proposals.values() if keep(r)]

    def _move(self, keep: Callable[[dict[str, Any]], bool], values: dict[str, Any]) -> int:
        moved = [r for r in self.requests.proposals.values() if keep(r)]
        for r in moved:
            r.update(values)
        if moved:
            self._wrote()
        return len(moved)

    def add_proposal(self, values: dict[str, object]) -> int:
        pid = self.requests.next_proposal
        self.requests.next_proposal += 1
        row: dict[str, Any] = dict.fromkeys(PROPOSAL_COLUMNS)
        row |= {"state": "waiting", **values, "id": pid}
        self.requests.proposals[pid] = row
        self._wrote()
        return pid

    def proposal(self, proposal_id: int) -> dict[str, Any] | None:
        row = self.requests.proposals.get(proposal_id)
        return dict(row) if row is not None else None

    def proposals_of_run(self, run_id: str) -> list[dict[str, Any]]:
        return sorted(self._where(lambda r: r["run_id"] == run_id), key=lambda r: r["id"])

    def waiting_proposals(self, routine: str | None = None) -> list[dict[str, Any]]:
        return _newest_first(
            self._where(lambda r: r["state"] == "waiting" and routine in (None, r["routine"]))
        )

    def proposals_for_routine(self, routine: str, limit: int) -> list[dict[str, Any]]:
        return _newest_first(self._where(lambda r: r["routine"] == routine))[:limit]

    def proposals_decided_since(self, routine: str, since: str | None) -> list[dict[str, Any]]:
        rows = self._where(
            lambda r: (
                r["routine"] == routine
                and r["state"] not in ("waiting", "running")
                and r["decided_at"] is not None
                and (since is None or r["decided_at"] > since)
            )
        )
        return sorted(rows, key=lambda r: (r["decided_at"], r["id"]))[:50]

    def waiting_proposal_count(self, now: str) -> int:
        return len(self._where(lambda r: r["state"] == "waiting" and r["expires_at"] > now))

    def expire_proposals(self, now: str) -> int:
        return self._move(
            lambda r: r["state"] == "waiting" and r["expires_at"] <= now,
            {"state": "expired", "decided_by": "runtime", "decided_at": now},
        )

    def invalidate_proposals(
        self, routine: str, current: str | None, now: str, why: str, only: int | None = None
    ) -> int:
        return self._move(
            lambda r: (
                r["state"] == "waiting"
                and r["routine"] == routine
                and (current is None or r["fingerprint"] != current)
                and (only is None or r["id"] == only)
            ),
            {"state": "invalidated", "decided_by": "runtime", "decided_at": now, "why": why},
        )

    def note_proposal(self, proposal_id: int, why: str) -> None:
        self._move(lambda r: r["id"] == proposal_id and r["state"] == "waiting", {"why": why})

    def claim_proposal(self, proposal_id: int, *, by: str, now: str, current: str) -> bool:
        return (
            self._move(
                lambda r: (
                    r["id"] == proposal_id
                    and r["state"] == "waiting"
                    and r["expires_at"] > now
                    and r["fingerprint"] == current
                ),
                {"state": "running", "decided_by": by, "decided_at": now},
            )
            == 1
        )

    def finish_proposal(
        self, proposal_id: int, *, exit_status: int | None, output: str, now: str
    ) -> None:
        self._move(
            lambda r: r["id"] == proposal_id and r["state"] == "running",
            {"state": "done", "exit_status": exit_status, "output": output, "finished_at": now},
        )

    def deny_proposal(self, proposal_id: int, *, by: str, why: str | None, now: str) -> bool:
        return (
            self._move(
                lambda r: r["id"] == proposal_id and r["state"] == "waiting",
                {"state": "denied", "decided_by": by, "decided_at": now, "why": why},
            )
            == 1
        )

    def prune_proposals(self, before: str, limit: int) -> int:
        old = sorted(
            pid
            for pid, r in self.requests.proposals.items()
            if r["state"] in _DECIDED
            and (r["finished_at"] or r["decided_at"] or r["created_at"]) < before
        )[:limit]
        for pid in old:
            del self.requests.proposals[pid]
        if old:
            self._wrote()
        return len(old)

    def save_conversation(self, run_id: str, routine: str, body: str, now: str) -> None:
        self.requests.conversations[run_id] = {"routine": routine, "saved_at": now, "body": body}
        self._wrote()

    def conversation(self, run_id: str) -> str | None:
        row = self.requests.conversations.get(run_id)
        return row["body"] if row is not None else None

    def prune_conversations(self, before: str, keep: Sequence[str], limit: int) -> int:
        old = sorted(
            (row["saved_at"], run_id)
            for run_id, row in self.requests.conversations.items()
            if row["saved_at"] < before and run_id not in keep
        )[:limit]
        for _, run_id in old:
            del self.requests.conversations[run_id]
        if old:
            self._wrote()
        return len(old)
