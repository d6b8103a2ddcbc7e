"""The five bundled starter routines and repo-digest (an MCP server's): present, packaged,
valid, disabled, on their documented schedules, with guarded tools; inbox-triage can never
send mail."""

from __future__ import annotations

import re
import shutil
from importlib import resources
from pathlib import Path

import pytest

from routines.spec import Kind, Origin, ToolKind
from routines.spec.loader import load_file
from routines.spec.paths import paths
from routines.spec.registry import scan

STARTERS = Path(__file__).resolve().parents[3] / "routines" / "starters"
SCHEDULES = {
    "day-brief": "0 6 * * *",  # 6:00 daily
    "inbox-triage": "0 * * * *",  # hourly
    "github-review": "0 9,13,17 * * *",  # 09:00 / 13:00 / 17:00
    "research-recap": "0 22 * * *",  # 22:00 nightly
    "evening-shutdown": "0 18 * * *",  # 18:00 daily
    "repo-digest": "30 17 * * 1-5",  # 17:30 on weekdays, through an MCP server
}


def test_all_starters_exist_and_are_packaged() -> None:
    assert sorted(p.stem for p in STARTERS.glob("*.toml")) == sorted(SCHEDULES)
    packaged = {f.name for f in resources.files("routines.starters").iterdir()}
    assert {f"{n}.toml" for n in SCHEDULES} <= packaged


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_starter_is_valid_disabled_and_on_the_seeds_schedule(name: str) -> None:
    r = load_file(STARTERS / f"{name}.toml", Origin.SYSTEM)
    assert r.name == name and r.kind is Kind.AGENT
    assert r.enabled is False
    assert r.warnings == ()
    assert (r.schedule.form, r.schedule.expression) == ("cron", SCHEDULES[name])
    assert r.description
    assert r.budget.max_dollars_per_day is not None and r.budget.max_dollars_per_day <= 1.0
    assert r.budget.max_tokens_per_run is not None


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_starter_tools_are_guarded_and_capped(name: str) -> None:
    r = load_file(STARTERS / f"{name}.toml")
    assert r.agent is not None and r.agent.tools
    for command in r.agent.shell_commands:
        # Output is capped before it reaches the model.
        assert re.search(r"\| head( -c \d+| -\d+)?\s*(\|\||$)", command), command
        for tool in ("gh", "gcalcli", "notmuch"):
            if re.search(rf"(^|[;&|]\s*){tool} ", command):
                # A missing program says so instead of failing the run (a `command -v`
                # guard, then an echo).
                assert f"command -v {tool}" in command or f"/usr/bin/{tool}" in command, command
                assert "|| echo '" in command, command


def test_inbox_triage_can_never_send_mail_without_approval() -> None:
    r = load_file(STARTERS / "inbox-triage.toml")
    assert r.agent is not None
    assert r.network is False
    assert r.output.type.value == "brief"
    senders = re.compile(
        r"\b(sendmail|msmtp|mutt|neomutt|mailx?|s-nail|swaks|curl|wget|nc|ncat|ssh|smtp|"
        r"send-email|python3?|perl)\b|notmuch\s+(tag|insert|new)"
    )
    for tool in r.agent.tools:
        if tool.kind is ToolKind.SHELL:
            assert not senders.search(tool.value), tool.value
            # Only reading commands: notmuch search / show.
            assert re.search(r"notmuch (search|show) ", tool.value), tool.value
    assert "never" in r.description.lower() and "approve" in r.description.lower()
    # Sending is only a proposed action, which a person approves; never automatic.
    [send] = r.actions
    assert (send.name, send.run) == ("send-reply", "msmtp -t")
    assert r.auto_approve is False


def test_starters_load_from_the_system_dir(vinos_env: Path) -> None:
    p = paths()
    for f in STARTERS.glob("*.toml"):
        shutil.copy(f, p.system_dir / f.name)
    reg = scan(p)
    assert reg.names() == sorted(SCHEDULES)
    for entry in reg.entries.values():
        assert entry.valid and entry.origin is Origin.SYSTEM and entry.errors == ()


def test_inbox_triage_skips_the_model_on_an_empty_inbox() -> None:
    r = load_file(STARTERS / "inbox-triage.toml")
    assert r.gate is not None
    assert "exit 1" in r.gate.run and "no unread mail" in r.gate.run
