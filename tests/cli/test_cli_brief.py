"""`brief` end to end: outputs in the state store and their runs in the ledger (written by the
test, and once by real command-routine runs), the seen state, and --open handing the brief to
a pager on a terminal and to xdg-open elsewhere (both fakes that record what they got)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from routines.runs import Outcome, RunEnd, RunStatus, Trigger
from tests.cli.cli_helpers import Cli, OnPty


def output(
    cli: Cli,
    routine: str,
    when: datetime,
    text: str,
    *,
    status: RunStatus = RunStatus.OK,
    outcome: Outcome | None = Outcome.DONE,
    summary: str = "",
) -> Path:
    """An output file as the supervisor leaves it, and its ledger row."""
    local = when.astimezone(cli.tz)
    directory = cli.state / routine
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / local.strftime("%Y-%m-%d-%H%M.md")
    path.write_text(text)
    stamp = when.timestamp()
    os.utime(path, (stamp, stamp))
    run_id = f"{routine}-{int(stamp)}"
    with cli.ledger() as ledger:
        ledger.record_run(
            routine, run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=when
        )
        ledger.finish_run(
            run_id,
            now=when + timedelta(seconds=5),
            end=RunEnd(
                status=status,
                outcome=outcome,
                detail=summary or f"{routine} summary",
                output_file=str(path),
            ),
        )
    return path


def failed_run(cli: Cli, routine: str, when: datetime, detail: str) -> None:
    with cli.ledger() as ledger:
        ledger.record_run(
            routine,
            run_id=f"f-{routine}",
            trigger=Trigger.SCHEDULE,
            status=RunStatus.RUNNING,
            now=when,
        )
        ledger.finish_run(
            f"f-{routine}", now=when, end=RunEnd(status=RunStatus.FAILED, detail=detail)
        )


@pytest.fixture
def day(cli: Cli) -> datetime:
    """Today at about noon in the CLI's zone (see noon_zone), as a UTC instant."""
    local = datetime.now(cli.tz).replace(hour=12, minute=0, second=0, microsecond=0)
    return local.astimezone(UTC)


def brief_json(cli: Cli, *args: str) -> dict[str, list[dict[str, Any]]]:
    res = cli("brief", "--json", *args)
    assert res.returncode == 0, res.stderr
    data: dict[str, list[dict[str, Any]]] = json.loads(res.stdout)
    return data


def test_brief_shows_todays_outputs_newest_first_with_their_outcome(
    cli: Cli, day: datetime
) -> None:
    cli.agent("day-brief", on_login=True)
    cli.agent("github-review")
    output(cli, "day-brief", day - timedelta(hours=6), "# Today\n\nThree meetings.\n")
    output(
        cli,
        "github-review",
        day - timedelta(hours=3),
        "# PRs\n\nTwo to review.\n",
        outcome=Outcome.NEEDS_ATTENTION,
    )
    output(cli, "day-brief", day - timedelta(days=1), "# Yesterday\n\nOld news.\n")
    failed_run(cli, "inbox-triage", day - timedelta(hours=1), "imap: login refused")
    res = cli("brief")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "2 outputs (2 new)" in out
    assert out.index("Two to review.") < out.index("Three meetings."), "newest first"
    assert "github-review · " in out and "needs attention" in out
    assert "Old news." not in out
    assert "inbox-triage failed" in out and "imap: login refused" in out
    data = brief_json(cli)
    assert [o["routine"] for o in data["outputs"]] == ["github-review", "day-brief"]
    assert data["outputs"][0]["outcome"] == "needs-attention"
    assert data["outputs"][0]["title"] == "PRs"
    assert data["outputs"][1]["text"] == "# Today\n\nThree meetings.\n"
    assert [f["routine"] for f in data["failed"]] == ["inbox-triage"]


def test_a_nothing_to_do_run_is_a_line_and_its_output_is_not_shown(cli: Cli, day: datetime) -> None:
    output(cli, "inbox", day - timedelta(hours=2), "# Inbox\n\nQuiet.\n",
           outcome=Outcome.NOTHING_TO_DO, summary="no unread mail")  # fmt: skip
    output(cli, "news", day - timedelta(hours=1), "# News\n\nBusy.\n")
    res = cli("brief")
    assert res.returncode == 0, res.stderr
    assert "Busy." in res.stdout and "Quiet." not in res.stdout
    assert "· inbox: nothing to do (1 run; last " in res.stdout
    data = brief_json(cli)
    assert [o["routine"] for o in data["outputs"]] == ["news"]
    assert [q["routine"] for q in data["quiet"]] == ["inbox"]


def test_brief_of_another_day(cli: Cli, day: datetime) -> None:
    output(cli, "day-brief", day - timedelta(days=1), "# Yesterday\n\nOld news.\n")
    yesterday = (day - timedelta(days=1)).astimezone(cli.tz).date()
    for arg in ("yesterday", yesterday.isoformat()):
        data = brief_json(cli, "--date", arg)
        assert [o["date"] for o in data["outputs"]] == [yesterday.isoformat()]
    assert brief_json(cli)["outputs"] == []
    res = cli("brief", "--date", "last tuesday")
    assert res.returncode == 2 and "YYYY-MM-DD" in res.stderr


@pytest.mark.slow
def test_open_on_login_outputs_stay_unseen_until_the_brief_shows_them(
    cli: Cli, day: datetime
) -> None:
    cli.agent("day-brief", on_login=True)
    cli.agent("inbox-triage")  # no open_on_login: never waits for you
    output(cli, "day-brief", day - timedelta(days=2), "# Two days ago\n")
    output(cli, "day-brief", day - timedelta(hours=6), "# Today\n")
    output(cli, "inbox-triage", day - timedelta(hours=2), "# Inbox\n")
    unseen = brief_json(cli, "--unseen")["outputs"]
    assert sorted(o["title"] for o in unseen) == ["Today", "Two days ago"]
    # --json and --list show without marking anything seen.
    assert cli("brief", "--list").returncode == 0
    assert len(brief_json(cli, "--unseen")["outputs"]) == 2
    # Showing today's brief marks today's outputs seen; the older one still waits.
    assert "# Today" in cli("brief").stdout
    assert [o["title"] for o in brief_json(cli, "--unseen")["outputs"]] == ["Two days ago"]
    res = cli("brief", "--unseen")
    assert "# Two days ago" in res.stdout
    assert brief_json(cli, "--unseen")["outputs"] == []
    assert "nothing new" in cli("brief", "--unseen").stdout
    seen = json.loads((cli.state / "brief-seen.json").read_text())["seen"]
    assert {k.split("/")[0] for k in seen} == {"day-brief", "inbox-triage"}


def test_open_off_a_terminal_hands_one_file_to_xdg_open(cli: Cli, day: datetime) -> None:
    cli.agent("day-brief", on_login=True)
    output(cli, "day-brief", day - timedelta(hours=6), "# Today\n\nThree meetings.\n")
    output(cli, "evening", day - timedelta(hours=1), "# Evening\n\nShipped it.\n")
    calls = cli.recorder("xdg-open")
    res = cli("brief", "--unseen", "--open")
    assert res.returncode == 0, res.stderr
    [argv] = [json.loads(line) for line in calls.read_text().splitlines()]
    opened = Path(argv[0])
    assert opened.parent == cli.runtime / "vinos-routine"
    assert oct(opened.stat().st_mode & 0o777) == "0o600"
    text = opened.read_text()
    assert "Three meetings." in text and "Shipped it." not in text, "--unseen: on-login only"
    assert brief_json(cli, "--unseen")["outputs"] == [], "opened means seen"
    # Nothing new: no window opens at all.
    assert cli("brief", "--unseen", "--open").returncode == 0
    assert len(calls.read_text().splitlines()) == 1


def test_open_without_xdg_open_says_how_to_get_it(cli: Cli, day: datetime) -> None:
    output(cli, "day-brief", day - timedelta(hours=6), "# Today\n")
    res = cli("brief", "--open", env={"PATH": str(cli.bin)})
    assert res.returncode == 1
    assert "xdg-open not found (install xdg-utils)" in res.stderr
    assert json.loads(cli("brief", "--json").stdout)["outputs"][0]["seen"] is False


def test_open_on_a_terminal_pages_the_brief(cli: Cli, on_pty: OnPty, day: datetime) -> None:
    output(cli, "day-brief", day - timedelta(hours=6), "# Today\n\nThree meetings.\n")
    output(cli, "github-review", day - timedelta(hours=3), "# PRs\n\nTwo to review.\n")
    paged = cli.bin / "paged.txt"
    cli.fake("pager", f"#!/bin/sh\ncat > {paged}\n")
    run = on_pty("brief", "--open", env={"PAGER": str(cli.bin / "pager")})
    assert run.wait() == 0, run.text
    text = paged.read_text()
    assert text.startswith("# Brief · ")
    assert text.index("Two to review.") < text.index("Three meetings.")
    assert "github-review · " in text


def test_brief_colours_only_on_a_terminal_and_never_with_no_color(
    cli: Cli, on_pty: OnPty, day: datetime
) -> None:
    output(cli, "day-brief", day - timedelta(hours=6), "# Today\n")
    run = on_pty("brief", "--list")
    assert run.wait() == 0
    assert "\x1b[" in run.text
    run = on_pty("brief", "--list", env={"NO_COLOR": "1"})
    assert run.wait() == 0
    assert "\x1b[" not in run.text and "day-brief" in run.text
    assert "\x1b[" not in cli("brief", "--list").stdout


def test_brief_of_real_runs(cli: Cli, not_root: None) -> None:
    # Two command routines run for real (worker, bwrap sandbox, supervisor recording).
    cli.command("disk", "echo disk ok", on_login=True)
    cli.command("uptime", "echo up 3 days")
    for name in ("disk", "uptime"):
        res = cli("run", name, "--no-daemon")
        assert res.returncode == 0, res.stdout + res.stderr
    data = brief_json(cli)
    assert {o["routine"] for o in data["outputs"]} == {"disk", "uptime"}
    assert all(o["status"] == "ok" for o in data["outputs"])
    assert [o["routine"] for o in brief_json(cli, "--unseen")["outputs"]] == ["disk"]
    out = cli("brief").stdout
    assert "disk ok" in out and "up 3 days" in out
    assert brief_json(cli, "--unseen")["outputs"] == []


def test_brief_with_nothing_says_so(cli: Cli) -> None:
    res = cli("brief")
    assert res.returncode == 0
    assert "no routine wrote an output on this day" in res.stdout
    assert cli("brief", "--open").returncode == 0


def test_escape_sequences_in_an_output_show_and_do_not_act(cli: Cli, day: datetime) -> None:
    # A model's output that would set the terminal title and write the clipboard (OSC 52).
    output(
        cli,
        "web",
        day - timedelta(hours=1),
        "# Web\n\nhi \x1b]0;pwned\x07 \x1b]52;c;ZXZpbA==\x07\n",
    )
    out = cli("brief").stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "hi \\x1b]0;pwned\\x07 \\x1b]52;c;ZXZpbA==\\x07" in out
