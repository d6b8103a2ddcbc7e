"""Notifications: what a finished run shows on the desktop, through notify-send.

notify-send here is a fake (a real program first on PATH that records its argv): a real
notification server cannot run in the test machine's headless session.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routines.runs import Outcome, RunStatus
from routines.spec.loader import load_text
from supervisor.engine import notify
from supervisor.engine.finish import notifications_for
from tests.cli.cli_helpers import Cli


def calls(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def shown(argv: list[str]) -> tuple[str, str, str]:
    """(urgency, title, body) from a notify-send command line."""
    urgency = next(a.split("=", 1)[1] for a in argv if a.startswith("--urgency="))
    rest = argv[argv.index("--") + 1 :]
    return urgency, rest[0], rest[1]


def test_a_finished_run_notifies_with_its_first_lines(cli: Cli, not_root: None) -> None:
    recorded = cli.recorder("notify-send")
    cli.command("disk", "echo 'root 91% full'; echo; echo '**home** 40%'", notify=True)
    res = cli("run", "disk", "--no-daemon")
    assert res.returncode == 0, res.stdout + res.stderr
    [argv] = calls(recorded)
    assert "--app-name=vinos-routine" in argv
    urgency, title, body = shown(argv)
    assert (urgency, title) == ("low", "disk: done")
    # The output's own "# disk · DATE" heading, blank lines and bold marks are left out.
    assert body == "root 91% full\nhome 40%"


def test_three_failures_notify_critically_and_turn_the_routine_off(
    cli: Cli, not_root: None
) -> None:
    recorded = cli.recorder("notify-send")
    cli.command("backup", "echo 'disk <sdb> & co' >&2; exit 3", notify=True)
    assert cli("enable", "backup").returncode == 0
    for _ in range(3):
        res = cli("run", "backup", "--no-daemon")
        assert res.returncode == 1
    seen = [shown(argv) for argv in calls(recorded)]
    assert [s[:2] for s in seen[:3]] == [("normal", "backup failed")] * 3
    assert "exited with code 3" in seen[0][2]
    assert "&lt;sdb&gt; &amp; co" in seen[0][2], "markup escaped for the notification server"
    urgency, title, body = seen[3]
    assert (urgency, title) == ("critical", "backup disabled")
    assert "3 failed runs in a row" in body and "vinos-routine enable backup" in body
    listed = {r["name"]: r for r in json.loads(cli("list", "--json").stdout)}
    assert listed["backup"]["enabled"] is False
    assert json.loads(cli("status", "--waybar").stdout)["class"] == "critical"


def test_without_notify_send_a_run_still_succeeds(cli: Cli, not_root: None) -> None:
    cli.command("quiet", "echo fine", notify=True)
    # Only the fakes directory and the system's: no notify-send anywhere on this machine.
    res = cli("run", "quiet", "--no-daemon")
    assert res.returncode == 0, res.stdout + res.stderr


def test_send_runs_notify_send_with_title_body_and_urgency(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = cli.recorder("notify-send")
    monkeypatch.setenv("PATH", str(cli.bin))
    assert notify.send("day-brief disabled", "3 failed <runs>", "critical") is True
    assert notify.send("t", "b", "bogus") is True
    [first, second] = calls(recorded)
    assert shown(first) == ("critical", "day-brief disabled", "3 failed &lt;runs&gt;")
    assert shown(second)[0] == "normal", "an unknown urgency becomes normal"


def test_send_without_notify_send_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert notify.send("title", "body") is False


def test_send_when_notify_send_fails_is_not_an_error(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.fake("notify-send", "#!/bin/sh\nexit 1\n")
    monkeypatch.setenv("PATH", str(cli.bin))
    assert notify.send("title", "body") is False


ROUTINE = """\
[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
system = "x"

[output]
notify = {notify}

[budget]
max_dollars_per_day = 1
"""


def test_what_a_finished_run_says() -> None:
    on = load_text(ROUTINE.format(notify="true"), Path("brief.toml"))
    off = load_text(ROUTINE.format(notify="false"), Path("brief.toml"))
    text = "# Today · 2026-12-02\n\n## Calendar\n- 9:00 standup\n- 14:00 review\n"
    [note] = notifications_for(on, RunStatus.OK, Outcome.NEEDS_ATTENTION, "summary", text)
    assert (note.title, note.urgency) == ("brief: needs attention", "normal")
    assert note.body == "Calendar\n- 9:00 standup\n- 14:00 review"
    [note] = notifications_for(on, RunStatus.OK, Outcome.DONE, "summary", "")
    assert (note.title, note.body, note.urgency) == ("brief: done", "summary", "low")
    [note] = notifications_for(on, RunStatus.TIMEOUT, None, "stopped after 600s", "")
    assert (note.title, note.body) == ("brief timeout", "stopped after 600s")
    assert notifications_for(off, RunStatus.FAILED, None, "boom", "") == []
    assert notifications_for(on, RunStatus.SKIPPED, None, "previous run still going", "") == []


def test_preview_is_short() -> None:
    long = "# Title\n" + "\n".join(f"line {i} " + "x" * 100 for i in range(10))
    body = notify.preview(long)
    assert body.count("\n") <= 3 and len(body) <= 300 and body.endswith("…")


def test_without_notify_send_run_logs_validate_and_status_say_so_once(
    cli: Cli, not_root: None
) -> None:
    import shutil

    assert shutil.which("notify-send", path=cli.environ()["PATH"]) is None
    path = cli.command("quiet", "echo fine", notify=True)
    assert cli("enable", "quiet").returncode == 0
    said = "notify-send is not installed, so no desktop notification shows"
    res = cli("run", "quiet", "--no-daemon")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (res.stdout + res.stderr).count(said) == 1, res.stdout
    for args in (["logs", "quiet"], ["validate", str(path)], ["status"]):
        res = cli(*args)
        out = res.stdout + res.stderr
        assert out.count(said) == 1, (args, out)
        assert "quiet" in out.split(said)[0].splitlines()[-1], (args, out)
    # A routine that asks for none is not warned about.
    plain = cli.command("plain", "echo fine")
    assert said not in cli("validate", str(plain)).stdout


def test_with_notify_send_nothing_is_said(cli: Cli, not_root: None) -> None:
    cli.recorder("notify-send")
    path = cli.command("loud", "echo fine", notify=True)
    res = cli("validate", str(path))
    assert res.returncode == 0 and "notify-send is not installed" not in res.stdout
