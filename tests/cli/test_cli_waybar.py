"""`status --waybar` end to end: the JSON parsed, its class checked for each state, the state
made by writing ledger rows and routine state as the supervisor would. No daemon runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from routines.runs import Outcome, RunEnd, RunStatus, Trigger
from tests.cli.cli_helpers import Cli
from tests.helpers import identity

ICON = "󰚩"


def waybar(cli: Cli) -> dict[str, Any]:
    res = cli("status", "--waybar")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("\n") == 1, "one line: waybar reads a line per update"
    data: dict[str, Any] = json.loads(res.stdout)
    assert set(data) >= {"text", "tooltip", "class"}
    return data


def run_row(
    cli: Cli,
    routine: str,
    status: RunStatus,
    *,
    dollars: float = 0.0,
    outcome: Outcome | None = None,
    ago: timedelta = timedelta(minutes=30),
) -> None:
    now = datetime.now(UTC) - ago
    run_id = f"{routine}-{status}-{now.timestamp()}"
    with cli.ledger() as ledger:
        ledger.record_run(
            routine, run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=now
        )
        ledger.finish_run(
            run_id, now=now, end=RunEnd(status=status, outcome=outcome, dollars=dollars)
        )


def enable(cli: Cli, *names: str) -> None:
    for name in names:
        res = cli("enable", name)
        assert res.returncode == 0, res.stderr


@pytest.fixture
def two_on(cli: Cli) -> Cli:
    cli.agent("day-brief", cron="0 6 * * *", cap=0.5)
    cli.agent("github-review", cron="0 17 * * *", cap=0.2)
    cli.agent("research-recap", cron="0 22 * * *")  # stays off
    enable(cli, "day-brief", "github-review")
    return cli


def test_ok_text_names_the_count_the_next_run_and_todays_cost(two_on: Cli) -> None:
    cli = two_on
    run_row(cli, "day-brief", RunStatus.OK, dollars=0.03, outcome=Outcome.DONE)
    run_row(cli, "github-review", RunStatus.OK, dollars=0.01, outcome=Outcome.NOTHING_TO_DO)
    data = waybar(cli)
    assert data["class"] == "ok"
    # It is about 12:xx in the test's zone: 17:00 is next today.
    assert data["text"] == f"{ICON} 2 routines · next 17:00 · today $0.04"
    lines = data["tooltip"].splitlines()
    assert lines[0].startswith("day-brief: on · next ")
    assert "last ok (done)" in lines[0] and "$0.03 of $0.50 today" in lines[0]
    assert lines[1].startswith("github-review: on · next 17:00")
    assert lines[2] == "research-recap: off"


def test_warning_at_80_percent_of_a_daily_budget(two_on: Cli) -> None:
    # 80% of $0.20
    run_row(two_on, "github-review", RunStatus.OK, dollars=0.16, outcome=Outcome.DONE)
    data = waybar(two_on)
    assert data["class"] == "warning"
    assert "github-review: 80% of its daily budget spent" in data["tooltip"]
    assert data["percentage"] == 80


def test_below_80_percent_is_ok(two_on: Cli) -> None:
    run_row(two_on, "github-review", RunStatus.OK, dollars=0.15, outcome=Outcome.DONE)  # 75%
    assert waybar(two_on)["class"] == "ok"


def test_warning_when_the_last_outcome_needs_attention(two_on: Cli) -> None:
    run_row(two_on, "day-brief", RunStatus.OK, outcome=Outcome.NEEDS_ATTENTION)
    data = waybar(two_on)
    assert data["class"] == "warning"
    assert "day-brief: needs your attention" in data["tooltip"]


def test_warning_for_an_invalid_routine_file(two_on: Cli) -> None:
    two_on.write("broken", "[schedule]\ncron = 'nope'\n")
    data = waybar(two_on)
    assert data["class"] == "warning"
    assert "broken: file invalid" in data["tooltip"]


@pytest.mark.parametrize("status", [RunStatus.FAILED, RunStatus.TIMEOUT])
def test_critical_when_a_last_run_failed(two_on: Cli, status: RunStatus) -> None:
    # A warning as well (95% of $0.20).
    run_row(two_on, "github-review", RunStatus.OK, dollars=0.19, outcome=Outcome.DONE)
    run_row(two_on, "day-brief", status)
    data = waybar(two_on)
    assert data["class"] == "critical"
    first = data["tooltip"].splitlines()[0]
    assert first == f"day-brief: last run {status}", "the worst reason first"


def test_a_later_success_clears_it(two_on: Cli) -> None:
    run_row(two_on, "day-brief", RunStatus.FAILED, ago=timedelta(hours=2))
    run_row(two_on, "day-brief", RunStatus.OK, outcome=Outcome.DONE, ago=timedelta(hours=1))
    assert waybar(two_on)["class"] == "ok"


def test_critical_when_a_routine_was_auto_disabled(two_on: Cli) -> None:
    with two_on.ledger() as ledger:
        ledger.disable(
            "day-brief",
            file_enabled=False,
            file_identity=identity(two_on.routines / "day-brief.toml"),
            reason="3 failed runs in a row; last: exit 1",
        )
    data = waybar(two_on)
    assert data["class"] == "critical"
    assert data["text"].startswith(f"{ICON} 1 routine ·")
    assert "day-brief was turned off: 3 failed runs in a row" in data["tooltip"]


def test_a_routine_turned_off_by_hand_after_a_failure_is_not_critical(two_on: Cli) -> None:
    run_row(two_on, "day-brief", RunStatus.FAILED)
    assert waybar(two_on)["class"] == "critical"
    assert two_on("disable", "day-brief").returncode == 0
    assert waybar(two_on)["class"] == "ok"


def test_a_running_routine_shows_in_the_text(two_on: Cli) -> None:
    with two_on.ledger() as ledger:
        ledger.record_run(
            "day-brief",
            run_id="r1",
            trigger=Trigger.MANUAL,
            status=RunStatus.RUNNING,
            now=datetime.now(UTC),
        )
    data = waybar(two_on)
    assert "running day-brief" in data["text"]
    assert "day-brief: running" in data["tooltip"]


def test_no_routines(cli: Cli) -> None:
    data = waybar(cli)
    assert data == {**data, "class": "ok", "text": f"{ICON} 0 routines · today $0.00"}
    assert data["tooltip"] == "no routines yet"


def test_markup_is_escaped(cli: Cli) -> None:
    cli.agent("notes")
    enable(cli, "notes")
    with cli.ledger() as ledger:
        ledger.disable(
            "notes",
            file_enabled=False,
            file_identity=identity(cli.routines / "notes.toml"),
            reason="exit 1: <stdin> & co",
        )
    data = waybar(cli)
    assert "&lt;stdin&gt; &amp; co" in data["tooltip"] and "<stdin>" not in data["tooltip"]


def test_an_unreadable_ledger_still_gives_the_bar_json(cli: Cli) -> None:
    cli.agent("notes")
    cli.state.mkdir(parents=True, exist_ok=True)
    (cli.state / "ledger.db").write_bytes(b"this is not a database" * 100)
    data = waybar(cli)  # exit 0: waybar hides a module whose command fails
    assert data["class"] == "critical"
    assert data["text"] == f"{ICON} error"
    assert "ledger" in data["tooltip"]


def test_outputs_waiting_to_be_read_show_until_the_brief_shows_them(cli: Cli) -> None:
    cli.agent("day-brief", on_login=True)
    cli.agent("inbox-triage")  # its outputs never wait
    enable(cli, "day-brief")
    today = datetime.now(cli.tz).strftime("%Y-%m-%d")
    for name in ("day-brief", "inbox-triage"):
        (cli.state / name).mkdir(parents=True)
        (cli.state / name / f"{today}-0600.md").write_text(f"# {name}\n")
    data = waybar(cli)
    assert data["text"].startswith(f"{ICON} 1 routine · 1 new · next ")
    assert data["tooltip"].startswith("1 new output to read: click")
    assert cli("brief").returncode == 0
    assert " new" not in waybar(cli)["text"]


def add_proposal(cli: Cli, *, expires_after: int = 3600) -> int:
    from routines import proposals

    with cli.ledger() as ledger:
        return proposals.add(
            ledger,
            routine="day-brief",
            run_id="r1",
            action="send-reply",
            command="msmtp -t",
            input="hello",
            summary="Reply to Bob",
            fingerprint="f",
            now=datetime.now(UTC),
            expires_after=expires_after,
        )


def test_waiting_proposals_are_counted_with_class_attention(two_on: Cli) -> None:
    cli = two_on
    run_row(cli, "day-brief", RunStatus.OK, outcome=Outcome.DONE)
    add_proposal(cli)
    add_proposal(cli)
    add_proposal(cli, expires_after=-1)  # expired: not counted, even before `pending` marks it
    data = waybar(cli)
    assert data["class"] == "attention"
    assert " · 2 pending · " in data["text"]
    assert data["tooltip"].splitlines()[0] == (
        "2 actions wait for your decision: vinos-routine pending"
    )


def test_a_failure_is_still_critical_with_proposals_waiting(two_on: Cli) -> None:
    cli = two_on
    run_row(cli, "day-brief", RunStatus.FAILED)
    add_proposal(cli)
    data = waybar(cli)
    assert data["class"] == "critical" and "1 pending" in data["text"]
