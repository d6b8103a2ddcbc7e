"""Retention as the CLI shows it: `history` prints compacted days as summary lines, `cost` for a
month (and for N days) straddling the compaction line prints the same figures before and after
the compaction, and `logs`/`brief` say when what was asked for was deleted by retention."""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime, timedelta
from typing import Any

from routines.ledger.rundays import compaction_line
from routines.runs import RunEnd, RunStatus, Trigger
from tests.cli.cli_helpers import Cli


def history_of_150_days(cli: Cli) -> date:
    """Two runs a day for 150 days (odd amounts), in the CLI's zone; returns today there."""
    rng = random.Random(18)
    now = datetime.now(UTC)
    with cli.ledger() as ledger:
        for n in range(150, -1, -1):
            for hour, status in ((1, "ok"), (2, rng.choice(["ok", "failed", "timeout"]))):
                at = now - timedelta(days=n, hours=hour)
                run_id = f"{at:%Y%m%dT%H%M%S}-day-brief-{n:03d}{hour}"
                ledger.record_run(
                    "day-brief",
                    run_id=run_id,
                    trigger=Trigger.SCHEDULE,
                    status=RunStatus.RUNNING,
                    now=at,
                )
                ledger.finish_run(
                    run_id,
                    now=at + timedelta(seconds=30),
                    end=RunEnd(
                        status=RunStatus(status),
                        dollars=round(rng.uniform(0, 0.3), 6),
                        input_tokens=rng.randrange(9000),
                        output_tokens=rng.randrange(900),
                    ),
                )
    return now.astimezone(cli.tz).date()


def compact(cli: Cli) -> int:
    total = 0
    line = compaction_line(datetime.now(UTC), cli.tz, 90)
    with cli.ledger() as ledger:
        while n := ledger.compact(line, cli.tz, 37):
            total += n
    return total


def cost(cli: Cli, *args: str) -> dict[str, Any]:
    res = cli("cost", *args, "--json")
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def test_cost_straddling_the_compaction_line_is_exact(cli: Cli) -> None:
    today = history_of_150_days(cli)
    line_day = today - timedelta(days=90)
    month = f"{line_day:%Y-%m}"
    before = {args: cost(cli, *args) for args in (("--month", month), ("--days", "100"))}
    assert before[("--month", month)]["routines"][0]["runs"] > 40
    assert compact(cli) > 100
    after = {args: cost(cli, *args) for args in before}
    assert after == before  # every figure, to the last nanodollar, and the chart
    assert before[("--days", "100")]["start"] < f"{line_day:%Y-%m-%d}"


def test_history_shows_compacted_days_as_summary_lines(cli: Cli) -> None:
    cli.command("day-brief", "true")
    today = history_of_150_days(cli)
    compact(cli)
    res = cli("history", "day-brief", "-n", "190", "--json")
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    runs = [e for e in lines if "run_id" in e]
    days = [e for e in lines if "day" in e]
    assert lines == runs + days and len(runs) == 182 and len(days) == 8
    assert days[0]["day"] == (today - timedelta(days=91)).isoformat()  # newest compacted first
    assert {k: type(days[0][k]) for k in ("day", "runs", "ok", "dollars")} == {
        "day": str,
        "runs": int,
        "ok": int,
        "dollars": float,
    }
    assert all(d["runs"] == 2 and 1 <= d["ok"] <= 2 for d in days[1:])
    text = cli("history", "day-brief", "-n", "184")
    assert text.returncode == 0, text.stderr
    summary = [line for line in text.stdout.splitlines() if "(day)" in line]
    assert len(summary) == 2 and "compacted" in summary[0] and "2 runs" in summary[1]


def test_logs_and_brief_say_what_retention_deleted(cli: Cli) -> None:
    cli.command("day-brief", "true")
    now = datetime.now(UTC)
    old = f"{now - timedelta(days=120):%Y%m%dT%H%M%S}-day-brief-abcdef"
    res = cli("logs", "day-brief", "--run", old)
    assert res.returncode == 1
    assert f"no log for run {old}: run logs older than 90 days were deleted" in res.stderr
    assert "[ledger].keep_outputs_days in config.toml" in res.stderr
    recent = f"{now:%Y%m%dT%H%M%S}-day-brief-abcdef"
    res = cli("logs", "day-brief", "--run", recent)
    assert res.returncode == 1 and "deleted" not in res.stderr
    (cli.routines / "config.toml").write_text("[ledger]\nkeep_outputs_days = 400\n")
    assert "deleted" not in cli("logs", "day-brief", "--run", old).stderr

    day = (now - timedelta(days=500)).date().isoformat()
    res = cli("brief", "--date", day, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["pruned"] == (
        "outputs older than 400 days were deleted "
        "(keep more with [ledger].keep_outputs_days in config.toml)"
    )
    res = cli("brief", "--date", day, "--list")
    assert "outputs older than 400 days were deleted" in res.stderr
    res = cli("brief", "--date", (now - timedelta(days=300)).date().isoformat(), "--json")
    assert json.loads(res.stdout)["pruned"] is None
