"""`vinos-routine schedule explain|translate`: output, --json, exit codes 0 / 1 / 2, --help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from supervisor.cli.main import main
from tests.cli.cli_helpers import Cli

BASE = "2026-03-27T12:00Z"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse: --help and usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_cron(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "schedule", "explain", "0 9 * * 1-5", "--tz", "Europe/Berlin", "--from", BASE,
        "--count", "3",
    )  # fmt: skip
    assert code == 0
    assert out.splitlines() == [
        "Every weekday at 9:00 AM",
        "  time zone   Europe/Berlin",
        "  OnCalendar  Mon..Fri *-*-* 09:00:00 Europe/Berlin",
        "  next 3 fires:",
        "    Mon 2026-03-30 09:00:00 CEST   2026-03-30T09:00:00+02:00",  # after the change
        "    Tue 2026-03-31 09:00:00 CEST   2026-03-31T09:00:00+02:00",
        "    Wed 2026-04-01 09:00:00 CEST   2026-04-01T09:00:00+02:00",
    ]


def test_explain_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "schedule", "explain", "0 0 1 * MON", "--tz", "UTC", "--from", BASE,
        "--count", "3", "--json",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["description"] == "At 12:00 AM on the 1st of every month and on Mondays"
    assert doc["oncalendar"] == ["Mon *-*-* 00:00:00 UTC", "*-*-01 00:00:00 UTC"]
    assert doc["next"] == [
        "2026-03-30T00:00:00+00:00",
        "2026-04-01T00:00:00+00:00",
        "2026-04-06T00:00:00+00:00",
    ]
    assert doc["timezone"] == "UTC" and doc["cron"] == "0 0 1 * MON"


def test_explain_every_and_oncalendar(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "schedule", "explain", "--every", "every monday and thursday at 8am",
        "--tz", "America/New_York", "--from", "2026-03-07T12:00", "--count", "2", "--json",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["description"] == "Every Monday and Thursday at 8:00 AM"
    assert doc["cron"] == "0 8 * * 1,4"
    # --from without an offset is in --tz; the first Monday is after the spring change
    assert doc["next"] == ["2026-03-09T08:00:00-04:00", "2026-03-12T08:00:00-04:00"]

    code, out, _ = run(
        capsys, "schedule", "explain", "--oncalendar", "*-*~01 18:00 Asia/Tokyo",
        "--from", BASE, "--count", "1", "--json",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["description"].startswith("At 6:00 PM on the last day of every month")
    assert doc["oncalendar"] == ["*-*~01 18:00:00 Asia/Tokyo"]
    assert doc["next"] == ["2026-03-31T18:00:00+09:00"]


def test_explain_notes_what_an_agent_routine_could_not_do(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "schedule", "explain", "*/5 * * * *", "--tz", "UTC", "--from", BASE)
    assert code == 0
    assert out.splitlines()[0] == "Every 5 minutes"
    assert "note: as an agent routine:" in out and "allow_frequent = true" in out


def test_explain_refusal_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "schedule", "explain", "0 0 L * *")
    assert code == 1 and out == ""
    assert err.startswith('vinos-routine: refused: "L" in the day-of-month field is Quartz')
    code, out, _ = run(capsys, "schedule", "explain", "--every", "whenever", "--json")
    assert code == 1
    assert json.loads(out)["error"].startswith('"whenever": ')


@pytest.mark.parametrize(
    "argv",
    [
        ["schedule", "explain"],
        ["schedule", "explain", "0 9 * * *", "--every", "every day at 9:00"],
        ["schedule", "explain", "0 9 * * *", "--from", "yesterday"],
        ["schedule", "explain", "0 9 * * *", "--count", "0"],
        ["schedule", "explain", "0 9 * * *", "--count", "x"],
        ["schedule"],
        ["schedule", "translate"],
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err


def test_translate(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schedule", "translate", "0 9,17 * * 1-5")
    assert (code, out) == (0, "Mon..Fri *-*-* 09,17:00:00\n")
    code, out, _ = run(capsys, "schedule", "translate", "0 0 1 * MON", "--tz", "Europe/Berlin")
    assert (code, out) == (
        0,
        "Mon *-*-* 00:00:00 Europe/Berlin\n*-*-01 00:00:00 Europe/Berlin\n",
    )
    code, out, _ = run(capsys, "schedule", "translate", "*/30 * * * *", "--json")
    assert code == 0
    assert json.loads(out) == {"cron": "*/30 * * * *", "oncalendar": ["*-*-* *:00/30:00"]}


def test_translate_refusal_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "schedule", "translate", "0 0 * * MON#2")
    assert code == 1 and out == ""
    assert "Quartz syntax" in err and "oncalendar" in err
    code, out, _ = run(capsys, "schedule", "translate", "@reboot", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["oncalendar"] == [] and doc["error"].startswith('"@reboot" is not supported')
    code, _, err = run(capsys, "schedule", "translate", "0 9 * * *", "--tz", "Mars/Olympus")
    assert code == 2 and 'time zone "Mars/Olympus"' in err


@pytest.mark.parametrize("command", [["explain", "0 7 * * *"], ["translate", "0 7 * * *"]])
def test_an_unknown_zone_is_one_usage_line_naming_it_and_the_fix(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # It was a ZoneInfoNotFoundError traceback, and exit status 0, for `explain`.
    code, out, err = run(capsys, "schedule", *command, "--tz", "Mars/Olympus")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        f"vinos-routine schedule {command[0]}: error: argument --tz: time zone "
        '"Mars/Olympus" is not in this machine\'s tz database: use an IANA name such as '
        "Europe/Berlin or UTC (`timedatectl list-timezones` lists them)"
    )


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 4,6,9,11 *"])
def test_translate_refuses_a_cron_that_never_fires_as_explain_does(
    capsys: pytest.CaptureFixture[str], cron: str
) -> None:
    code, out, err_explain = run(capsys, "schedule", "explain", cron)
    assert code == 1 and out == ""
    code, out, err = run(capsys, "schedule", "translate", cron)
    assert code == 1 and out == ""
    assert err == err_explain and f'"{cron}" never fires' in err
    code, out, _ = run(capsys, "schedule", "translate", cron, "--json")
    assert code == 1 and json.loads(out)["oncalendar"] == []
    assert run(capsys, "schedule", "translate", "0 0 29 2 *")[0] == 0  # leap years: it fires


@pytest.mark.parametrize("sub", ["explain", "translate"])
def test_help_has_examples(capsys: pytest.CaptureFixture[str], sub: str) -> None:
    code, out, _ = run(capsys, "schedule", sub, "--help")
    assert code == 0
    assert "examples:" in out and f"vinos-routine schedule {sub} " in out


def test_the_real_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor", "schedule", "translate", "0 */6 * * *"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (0, "*-*-* 00/6:00:00\n"), proc.stderr


def test_explain_takes_a_routines_name(cli: Cli) -> None:
    cli.command("disk-report", "df -h", cron="30 18 * * 1-5")
    res = cli("schedule", "explain", "disk-report", "--from", "2026-12-01T12:00Z", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["description"] == "Every weekday at 6:30 PM"
    assert out["timezone"] == cli.zone  # the routine's own zone
    assert out["cron"] == "30 18 * * 1-5"
    res = cli("schedule", "explain", "no-such-routine")
    assert res.returncode == 1
    assert "no routine named 'no-such-routine'" in res.stderr
    assert "found 1" not in res.stderr  # not read as a cron expression


ONCE = """\
[routine]
kind = "command"
[schedule]
once = "{at}"
timezone = "UTC"
[command]
run = "echo once"
"""


def test_once_is_explained_and_a_past_one_is_refused_where_it_is_written(cli: Cli) -> None:
    path = cli.write("xmas", ONCE.format(at="2099-12-24 09:00"))
    res = cli("schedule", "explain", "xmas", "--json", "--from", "2099-01-01T00:00Z")
    out = json.loads(res.stdout)
    assert out["description"] == "Once, at 9:00 AM on December 24th, 2099"
    assert out["oncalendar"] == ["2099-12-24 09:00:00 UTC"]
    assert out["next"] == ["2099-12-24T09:00:00+00:00"]
    assert cli("validate", str(path)).returncode == 0
    past = cli.write("gone", ONCE.format(at="2020-12-24 09:00"))
    res = cli("validate", str(past))
    assert res.returncode == 1
    assert '[schedule].once: "2020-12-24 09:00" is in the past (UTC)' in res.stdout
    res = cli("enable", "gone")
    assert res.returncode == 1 and "is in the past" in res.stderr and "set a new time" in res.stderr
    # The file itself stays valid (time passing never invalidates it): list shows it, off.
    listed = {r["name"]: r for r in json.loads(cli("list", "--json").stdout)}
    assert listed["gone"]["valid"] is True and listed["gone"]["enabled"] is False
    bad = cli.write("bad", ONCE.format(at="2099-02-30 09:00"))
    res = cli("validate", str(bad))
    assert res.returncode == 1 and "is not a date and time" in res.stdout
