"""`cost` end to end: every figure checked against ledger rows the test wrote."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from routines.runs import RunEnd, RunStatus, Trigger
from supervisor.cli.views.cost import CHART_WIDTH
from tests.cli.cli_helpers import Cli


def row(
    cli: Cli,
    routine: str,
    when: datetime,
    status: str = "ok",
    *,
    dollars: float = 0.0,
    tokens: tuple[int, int] = (0, 0),
    local: tuple[int, int] = (0, 0),
) -> None:
    run_id = f"{routine}-{when.timestamp()}-{status}"
    with cli.ledger() as ledger:
        ledger.record_run(
            routine, run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=when
        )
        ledger.finish_run(
            run_id,
            now=when,
            end=RunEnd(
                status=RunStatus(status),
                dollars=dollars,
                input_tokens=tokens[0],
                output_tokens=tokens[1],
                local_input_tokens=local[0],
                local_output_tokens=local[1],
            ),
        )


@pytest.fixture
def noon(cli: Cli) -> datetime:
    """Today at 12:00 in the CLI's zone (it is about 12:xx there now)."""
    return datetime.now(cli.tz).replace(hour=12, minute=0, second=0, microsecond=0).astimezone(UTC)


@pytest.fixture
def ledger_rows(cli: Cli, noon: datetime) -> dict[str, Any]:
    today = noon - timedelta(hours=2)
    row(cli, "day-brief", today, dollars=0.30, tokens=(9000, 1000), local=(500, 100))
    row(cli, "day-brief", today - timedelta(hours=1), dollars=0.10, tokens=(3000, 500))
    row(cli, "github-review", today, dollars=0.10, tokens=(2000, 400))
    row(cli, "inbox-triage", today, dollars=0.0, local=(4000, 300))
    row(cli, "inbox-triage", today, "skipped")  # not a run that counts
    row(cli, "inbox-triage", today, "missed")
    row(cli, "github-review", today, "failed", dollars=0.02, tokens=(100, 0))
    # Earlier in the week, and one too old for it.
    row(cli, "day-brief", noon - timedelta(days=2), dollars=0.48, tokens=(15000, 2000))
    row(cli, "research-recap", noon - timedelta(days=6), dollars=0.05, tokens=(1000, 100))
    row(cli, "research-recap", noon - timedelta(days=7), dollars=9.99, tokens=(1, 1))
    return {"today": today}


def cost(cli: Cli, *args: str) -> dict[str, Any]:
    res = cli("cost", "--json", *args)
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def test_today_per_routine_figures_match_the_ledger(cli: Cli, ledger_rows: object) -> None:
    data = cost(cli)  # --today is the default
    assert data == {**data, "period": "today", "zone": cli.zone}
    by = {r["routine"]: r for r in data["routines"]}
    assert [r["routine"] for r in data["routines"]][:2] == ["day-brief", "github-review"]
    assert by["day-brief"]["runs"] == 2
    assert by["day-brief"]["input_tokens"] == 12000 and by["day-brief"]["output_tokens"] == 1500
    assert by["day-brief"]["local_input_tokens"] == 500
    assert by["day-brief"]["dollars"] == pytest.approx(0.40)
    assert by["github-review"]["runs"] == 2 and by["github-review"]["dollars"] == pytest.approx(
        0.12
    )
    assert by["inbox-triage"]["runs"] == 1, "skipped and missed are not runs"
    assert data["total_dollars"] == pytest.approx(0.52)
    assert by["day-brief"]["share"] == pytest.approx(0.40 / 0.52, abs=1e-4)
    assert by["inbox-triage"]["share"] == 0
    assert by["day-brief"]["cap"] is None  # no routine file: no cap known


def test_week_and_the_seven_day_chart(cli: Cli, ledger_rows: object, noon: datetime) -> None:
    data = cost(cli, "--week")
    by = {r["routine"]: r for r in data["routines"]}
    assert by["day-brief"]["runs"] == 3 and by["day-brief"]["dollars"] == pytest.approx(0.88)
    assert by["research-recap"]["dollars"] == pytest.approx(0.05), "6 days ago is in, 7 is out"
    assert data["total_dollars"] == pytest.approx(0.88 + 0.12 + 0.05)
    today = noon.astimezone(cli.tz).date()
    days = {d["date"]: d["dollars"] for d in data["days"]}
    assert list(days) == [(today - timedelta(days=n)).isoformat() for n in range(6, -1, -1)]
    assert days[today.isoformat()] == pytest.approx(0.52)
    assert days[(today - timedelta(days=2)).isoformat()] == pytest.approx(0.48)
    assert days[(today - timedelta(days=6)).isoformat()] == pytest.approx(0.05)
    assert days[(today - timedelta(days=1)).isoformat()] == 0
    # --today's chart is the same seven days.
    assert cost(cli)["days"] == data["days"]


def test_the_terminal_report(cli: Cli, ledger_rows: object, noon: datetime) -> None:
    cli.agent("day-brief", cap=0.5)
    res = cli("cost")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "Spent today: $0.52"
    header = next(line for line in lines if line.startswith("ROUTINE"))
    assert "DAILY CAP" in header
    brief = next(line for line in lines if line.startswith("day-brief"))
    assert "$0.40" in brief and "77%" in brief and "$0.50" in brief and "12k" not in brief
    assert "13.5k" in brief, "premium tokens: 12,000 in + 1,500 out"
    # Right-aligned numbers: the dollars column ends where its header ends.
    assert brief.index("$0.40") + len("$0.40") == header.index("DOLLARS") + len("DOLLARS")
    assert "top spenders: day-brief $0.40 (77%), github-review $0.12 (23%)" in res.stdout
    chart = [line for line in lines if line.startswith("  ") and "$" in line][-7:]
    assert len(chart) == 7 and chart[-1].endswith("today")
    bars = [line.count("█") for line in chart]
    assert bars[-1] == CHART_WIDTH, "the biggest day fills the width"
    assert bars[-3] == int(CHART_WIDTH * 0.48 / 0.52), "others in proportion"
    assert bars[-2] == 0 and "$0.00" in chart[-2]


def test_an_empty_ledger(cli: Cli) -> None:
    res = cli("cost", "--week")
    assert res.returncode == 0
    assert "Spent the last 7 days: $0.00" in res.stdout and "no runs in this period" in res.stdout
    assert cost(cli)["routines"] == []


def test_today_and_week_together_is_a_usage_error(cli: Cli) -> None:
    res = cli("cost", "--today", "--week")
    assert res.returncode == 2 and "not allowed with" in res.stderr
