"""routines.runs: its sets are the rules, slot ids round-trip (that it is a leaf: pyproject.toml's
import contracts)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from routines.runs import (
    ACTIVE,
    NO_LAST_RUN,
    NOT_A_RUN,
    STRIKES,
    RunEnd,
    RunStatus,
    counts_as_strike,
    fingerprint,
    parse_slot_id,
    slot_id,
    sql_in,
    status_of,
)


def test_the_sets() -> None:
    assert {s for s in RunStatus if counts_as_strike(s)} == STRIKES == {"failed", "timeout"}
    assert {"queued", "running"} == ACTIVE
    assert {"skipped", "missed"} == NOT_A_RUN
    assert {"queued", "running", "skipped"} == NO_LAST_RUN
    assert not counts_as_strike(None) and not counts_as_strike("error")
    assert sql_in(ACTIVE) == "('queued', 'running')"


def test_status_of_keeps_a_v2_0_status_it_does_not_know() -> None:
    assert status_of("ok") is RunStatus.OK
    assert status_of("error") == "error" and not isinstance(status_of("error"), RunStatus)


def test_slot_ids_are_utc_to_the_second_and_round_trip() -> None:
    paris = timezone(timedelta(hours=2))
    t = datetime(2026, 7, 1, 8, 30, 15, 123456, tzinfo=paris)
    assert slot_id(t) == "2026-07-01T06:30:15Z"
    assert parse_slot_id(slot_id(t)) == t.replace(microsecond=0).astimezone(UTC)
    # Text order is time order (the ledger compares cursors as text).
    assert slot_id(t) < slot_id(t + timedelta(seconds=1)) < slot_id(t + timedelta(days=400))


@dataclass
class _Spec:
    form: str
    expression: str
    timezone: str


def test_fingerprint_changes_with_the_schedule_meaning_only() -> None:
    a = fingerprint(_Spec("cron", "0 6 * * *", "UTC"))
    assert a == fingerprint(_Spec("cron", "0 6 * * *", "UTC")) and len(a) == 16
    assert a != fingerprint(_Spec("cron", "0 7 * * *", "UTC"))
    assert a != fingerprint(_Spec("cron", "0 6 * * *", "Europe/Paris"))
    assert a != fingerprint(_Spec("oncalendar", "0 6 * * *", "UTC"))


def test_run_end_as_last_run_json() -> None:
    end = RunEnd(RunStatus.OK, "done", tools_used=("run_shell",), dollars=0.5, duration_sec=3.0)
    data = end.as_json()
    assert "duration_sec" not in data
    assert data["tools_used"] == ["run_shell"] and data["status"] == "ok"
    assert RunEnd(RunStatus.FAILED).as_json()["tools_used"] is None
