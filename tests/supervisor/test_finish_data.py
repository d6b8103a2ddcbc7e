"""A finished run's ledger end, notifications and last-run.json as data
(supervisor/engine/finish.py's
pure builders): no ledger, no files. tests/supervisor/test_record.py runs finish_run whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from ipc import Result
from routines.runs import Outcome, RunStatus, Trigger
from routines.spec.loader import load_text
from supervisor.engine.finish import end_notifications, last_run_json, run_end
from supervisor.engine.spawn import UsageTotals, WorkerOutcome

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def worker(status: RunStatus = RunStatus.OK, notify: str | None = None) -> WorkerOutcome:
    result = Result(
        status=status, outcome=Outcome.DONE, summary="did it", route="anthropic", model="m-1",
        tool_calls=2, tools_used=["shell"], notify=notify,
    )  # fmt: skip
    return WorkerOutcome(
        result, 0, UsageTotals(input=10, output=5, local_input=3, dollars=0.1234567)
    )


def test_the_end_of_an_ok_run_keeps_its_outcome_usage_and_stored_output() -> None:
    end = run_end(worker(), RunStatus.OK, "", "", Path("/s/out.md"))
    assert (end.status, end.outcome, end.route, end.model) == (
        RunStatus.OK, Outcome.DONE, "anthropic", "m-1"
    )  # fmt: skip
    assert (end.input_tokens, end.output_tokens, end.local_input_tokens) == (10, 5, 3)
    assert end.dollars == 0.123457 and end.tool_calls == 2 and end.tools_used == ("shell",)
    assert end.output_file == "/s/out.md" and end.detail == ""


def test_a_failed_run_has_no_outcome_and_the_claims_note_leads_its_detail() -> None:
    end = run_end(worker(RunStatus.FAILED), RunStatus.FAILED, "exit 1", "stands in for 3", None)
    assert end.outcome is None and end.output_file is None
    assert end.detail == "stands in for 3; exit 1"
    assert run_end(worker(), RunStatus.OK, "", "stands in for 3", None).detail == "stands in for 3"
    assert len(run_end(worker(), RunStatus.FAILED, "x" * 3000, "", None).detail) == 2000


def test_a_run_without_a_result_takes_its_model_from_the_usage() -> None:
    out = WorkerOutcome(None, 1, UsageTotals(model="m-2"))
    end = run_end(out, RunStatus.FAILED, "crashed", "", None)
    assert (end.model, end.route, end.tool_calls, end.tools_used) == ("m-2", None, 0, ())


ROUTINE = load_text(
    '[routine]\nkind = "command"\n[schedule]\ncron = "0 9 * * *"\ntimezone = "UTC"\n'
    '[command]\nrun = "true"\n',
    Path("rec.toml"),
)


def test_the_notifications_add_an_undelivered_output_and_the_workers_budget_note() -> None:
    notes = end_notifications(
        ROUTINE, worker(notify="80% spent"), Outcome.DONE, RunStatus.OK, "", "", "disk full"
    )
    assert [(n.title, n.body) for n in notes][-2:] == [
        ("rec: output not delivered", "disk full"),
        ("rec: budget", "80% spent"),
    ]
    plain = end_notifications(ROUTINE, worker(), Outcome.DONE, RunStatus.OK, "", "", None)
    assert not any(n.title in ("rec: output not delivered", "rec: budget") for n in plain)


def test_last_run_json_has_the_run_its_duration_and_an_error_only_when_not_ok() -> None:
    end = run_end(worker(), RunStatus.OK, "", "", None)
    later = T0 + timedelta(seconds=1.5)
    last = last_run_json("r1", "rec", Trigger.SCHEDULE, "s", T0, later, end, worker(),
                         RunStatus.OK, "")  # fmt: skip
    assert last["run_id"] == "r1" and last["duration_sec"] == 1.5
    assert last["summary"] == "did it" and last["error"] is None and last["status"] == "ok"
    failed = last_run_json("r1", "rec", Trigger.MANUAL, None, T0, later, end, worker(),
                           RunStatus.FAILED, "exit 1")  # fmt: skip
    assert failed["error"] == "exit 1"
