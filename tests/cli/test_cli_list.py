"""`vinos-routine list` through its entry point (in-process, inprocess.py) with no daemon: the
starters from VINOS_SYSTEM_DIR, invalid files with their error, and what the ledger knows
(enable/disable, last run, spend)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from routines.ledger import Ledger
from routines.runs import Outcome, RunEnd, RunStatus, Trigger, slot_id
from routines.spec.paths import Paths, paths
from tests.cli.inprocess import run_in_process
from tests.helpers import AGENT, COMMAND, identity, write

REPO = Path(__file__).resolve().parents[2]
STARTERS = REPO / "routines" / "starters"
SCHEDULES = {
    "day-brief": "0 6 * * *",
    "evening-shutdown": "0 18 * * *",
    "github-review": "0 9,13,17 * * *",
    "inbox-triage": "0 * * * *",
    "repo-digest": "30 17 * * 1-5",
    "research-recap": "0 22 * * *",
}
KEYS = {
    "name", "kind", "origin", "enabled", "valid", "schedule", "expression", "next_run",
    "last_status", "last_outcome", "last_finished", "today_dollars", "disabled_reason",
    "errors", "warnings", "running", "queued",
}  # fmt: skip


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    # The CLI's entry point in this process (inprocess.py), as `python -m supervisor` runs it.
    return run_in_process(
        args, env=os.environ.copy(), cwd=str(REPO)
    )  # conftest's VINOS_HOME / VINOS_SYSTEM_DIR / XDG_RUNTIME_DIR


def listing() -> dict[str, dict[str, object]]:
    done = cli("list", "--json")
    assert (done.returncode, done.stderr) == (0, "")
    lines = json.loads(done.stdout)
    assert all(set(line) >= KEYS for line in lines)
    return {line["name"]: line for line in lines}


@pytest.fixture
def p(vinos_env: Path) -> Paths:
    return paths()


@pytest.fixture
def starters(p: Paths) -> None:
    for f in STARTERS.glob("*.toml"):
        shutil.copy(f, p.system_dir / f.name)


def far_from_midnight_zone() -> str:
    """A zone where it is not near midnight now, so "today" is the same day for the test and
    the CLI it starts a moment later."""
    now = datetime.now(UTC)
    for zone in ("UTC", "Asia/Tokyo", "America/New_York"):
        if 1 <= now.astimezone(ZoneInfo(zone)).hour <= 22:
            return zone
    raise AssertionError("unreachable: three zones 4+ hours apart")


def test_starters_listed_without_a_daemon(p: Paths, starters: None) -> None:
    assert not any(p.runtime_dir.parent.glob("**/control.sock"))
    done = cli("list")
    assert (done.returncode, done.stderr) == (0, "")
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["NAME", "KIND", "STATE", "SCHEDULE", "NEXT", "LAST", "TODAY"]
    assert [r.split()[0] for r in rows] == sorted(SCHEDULES)
    for row in rows:
        cells = row.split()
        assert cells[1:3] == ["agent", "off"] and cells[-1] == "$0.00", row


def test_starters_as_json(starters: None) -> None:
    lines = listing()
    assert sorted(lines) == sorted(SCHEDULES)
    for name, line in lines.items():
        assert line["expression"] == SCHEDULES[name]
        assert line["schedule"]  # a description (or the raw expression for now)
        assert (line["kind"], line["origin"], line["enabled"], line["valid"]) == (
            "agent",
            "system",
            False,
            True,
        )
        assert (line["next_run"], line["last_status"], line["today_dollars"]) == (None, None, 0)
        assert (line["errors"], line["warnings"], line["running"], line["queued"]) == (
            [],
            [],
            False,
            False,
        )


def test_invalid_file_is_listed_with_its_error(p: Paths, starters: None) -> None:
    broken = write(p.routines_dir, "broken", AGENT.replace("0.5", "-1"))
    done = cli("list")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    (row,) = [line for line in lines if line.startswith("broken ")]
    assert row.split() == ["broken", "invalid"]
    error = (
        f"{broken}: [budget].max_dollars_per_day: expected a positive number, found -1 (an integer)"
    )
    assert lines[-1] == error
    line = listing()["broken"]
    assert (line["valid"], line["kind"], line["enabled"], line["errors"]) == (
        False,
        "?",
        False,
        [error],
    )
    assert listing()["day-brief"]["valid"] is True  # the others are unaffected


def test_what_the_ledger_knows_is_shown(p: Paths) -> None:
    zone = far_from_midnight_zone()
    routine = AGENT.replace('timezone = "UTC"', f'timezone = "{zone}"')
    spender_file = write(p.routines_dir, "spender", routine)  # the file says disabled
    striker_file = write(p.routines_dir, "striker", "[routine]\nenabled = true\n" + routine)
    write(p.routines_dir, "busy", routine)
    now = datetime.now(UTC)
    with Ledger(p.ledger) as led:
        led.enable(
            "spender",
            file_enabled=False,
            file_identity=identity(spender_file),
            cursor=slot_id(now),
            fingerprint="f",
        )
        led.record_run(
            "spender", run_id="r1", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=now
        )
        led.finish_run(
            "r1", now=now, end=RunEnd(status=RunStatus.OK, outcome=Outcome.DONE, dollars=0.25)
        )
        led.disable(
            "striker",
            file_enabled=True,
            file_identity=identity(striker_file),
            reason="failed 3 times in a row",
        )
        assert led.claim(
            "busy", "s1", run_id="r2", trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=now
        )
    lines = listing()
    spender = lines["spender"]
    assert spender["enabled"] is True
    assert isinstance(spender["next_run"], str)
    assert datetime.fromisoformat(spender["next_run"]) > now
    assert (spender["last_status"], spender["last_outcome"]) == ("ok", "done")
    assert spender["today_dollars"] == 0.25
    striker = lines["striker"]
    assert (striker["enabled"], striker["disabled_reason"], striker["next_run"]) == (
        False,
        "failed 3 times in a row",
        None,
    )
    assert (lines["busy"]["running"], lines["busy"]["last_status"]) == (True, None)
    text = cli("list").stdout.splitlines()
    (row,) = [line for line in text if line.startswith("spender ")]
    assert row.split()[1:3] == ["agent", "on"] and row.endswith("ok · done  $0.25")
    (row,) = [line for line in text if line.startswith("busy ")]
    assert row.split()[1:4] == ["agent", "off", "running"]
    assert "striker: disabled: failed 3 times in a row" in text


def test_no_routines_at_all() -> None:
    done = cli("list")
    assert (done.returncode, done.stdout) == (
        0,
        "no routines yet: create one with 'vinos-routine create NAME'\n",
    )
    assert json.loads(cli("list", "--json").stdout) == []


# What a plain `list` (one machine, cron routines, no signature, nothing declared under home) has no
# use for; each costs every start-up a millisecond or more (a plain `list` starts about as fast as
# Python): OpenSSL, the signature checks, the fleet's plan and ledger Protocol, OnCalendar, the
# never-list, sockets.
UNUSED_BY_PLAIN_LIST = {
    "hashlib",
    "calendar",
    "socket",
    "routines.signing",
    "routines.schedule.oncalendar",
    "routines.spec.never",
    "routines.ledger.api",
    "supervisor.fleet.plan",
}


def test_a_plain_list_loads_only_what_it_uses(p: Paths) -> None:
    Ledger(p.ledger).close()  # as after the first run (a missing one has `list` ask for a daemon)
    for i in range(3):
        write(p.routines_dir, f"c{i}", COMMAND)
    code = (
        "import sys\nfrom supervisor.cli.main import main\nassert main(['list']) == 0\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert [ln.split()[0] for ln in done.stdout.splitlines()[1:]] == ["c0", "c1", "c2"]
    loaded = set(done.stderr.split())
    assert "routines.spec.registry" in loaded and "routines.ledger" in loaded
    assert loaded & UNUSED_BY_PLAIN_LIST == set()


def test_list_says_when_enable_overrides_the_files_enabled(p: Paths, starters: None) -> None:
    # day-brief ships with enabled = false; `enable` wins, and list says the file disagrees.
    done = cli("enable", "day-brief")
    assert done.returncode == 0, done.stderr
    assert "still says enabled = false; `enable` wins until that line is edited" in done.stdout
    row = listing()["day-brief"]
    assert row["enabled"] is True and row["file_enabled"] is False
    text = cli("list").stdout
    assert (
        "day-brief: on by `vinos-routine enable`; its file says enabled = false, which counts "
        "again once that line is edited"
    ) in text
    assert listing()["inbox-triage"]["file_enabled"] is None  # file and state agree
    cli("disable", "day-brief")
    assert listing()["day-brief"]["file_enabled"] is None


def test_list_warns_when_auto_can_escalate_without_a_premium_key(p: Paths) -> None:
    """Enabled routines only: the starters, off until enabled, say nothing yet."""
    on = "[routine]\nenabled = true\n\n" + AGENT  # route "auto", escalation on
    write(p.routines_dir, "day-brief", on)
    off = on.replace("[budget]", "[agent.escalation]\nmax_escalations_per_run = 0\n\n[budget]")
    write(p.routines_dir, "stays-local", off)
    write(p.routines_dir, "disabled", AGENT)
    done = cli("list")
    assert done.returncode == 0
    warned = [line for line in done.stdout.splitlines() if "no premium key" in line]
    assert warned == [
        'day-brief: route = "auto" may escalate to claude-sonnet-4-6, but there is no premium '
        f"key (set ANTHROPIC_API_KEY, or write the key to {p.api_key_file} (chmod 600)); until "
        "then a run that wants to escalate keeps the local answer and needs attention"
    ]
    p.api_key_file.parent.mkdir(parents=True, exist_ok=True)
    p.api_key_file.write_text("sk-ant-test\n")
    p.api_key_file.chmod(0o600)
    assert "no premium key" not in cli("list").stdout
