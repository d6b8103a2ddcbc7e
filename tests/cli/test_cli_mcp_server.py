"""`vinos-routine mcp`, driven by the official SDK's stdio client as Claude Code or goose
would: the six tools, a draft always disabled, no run of a disabled routine, and no history
or output of a routine config.toml does not expose."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from routines.spec.loader import load_file
from routines.spec.paths import paths
from tests.helpers import AGENT

REPO = Path(__file__).resolve().parents[2]
DRAFT = AGENT  # no `enabled`: off by default
ENABLED = "[routine]\nenabled = true\n\n" + AGENT


def _session(body: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor", "mcp"],
        env={k: v for k, v in os.environ.items() if k.startswith(("VINOS_", "XDG_", "HOME"))}
        | {"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )

    async def go() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            return await body(s)

    return anyio.run(go)


def _text(result: Any) -> str:
    return "\n".join(getattr(b, "text", "") for b in result.content)


def _call(tool: str, /, **arguments: Any) -> tuple[bool, str]:
    async def body(s: ClientSession) -> tuple[bool, str]:
        result = await s.call_tool(tool, arguments)
        return result.is_error, _text(result)

    got: tuple[bool, str] = _session(body)
    return got


def test_the_six_tools(vinos_env: Path) -> None:
    async def body(s: ClientSession) -> list[str]:
        return sorted(t.name for t in (await s.list_tools()).tools)

    assert _session(body) == [
        "draft_routine",
        "explain_schedule",
        "list_routines",
        "routine_history",
        "run_routine",
        "validate_routine",
    ]


def test_a_draft_comes_out_disabled_and_cannot_be_run(vinos_env: Path) -> None:
    error, text = _call(
        "draft_routine", name="day-brief", title="Day brief", summary="Your brief.", toml=DRAFT
    )
    assert not error, text
    path = paths().routines_dir / "day-brief.toml"
    assert json.loads(text)["written"] == str(path)
    assert load_file(path).enabled is False
    error, text = _call("run_routine", name="day-brief")
    assert error and "not enabled" in text
    error, text = _call("list_routines")
    (row,) = json.loads(text) if text.startswith("[") else [json.loads(text)]
    assert row["name"] == "day-brief" and row["enabled"] is False


def test_a_draft_that_enables_itself_or_is_invalid_is_refused(vinos_env: Path) -> None:
    error, text = _call(
        "draft_routine", name="day-brief", title="Day brief", summary="Your brief.", toml=ENABLED
    )
    assert error and "written disabled" in text
    error, text = _call(
        "draft_routine",
        name="day-brief",
        title="Day brief",
        summary="Your brief.",
        toml=DRAFT + "\n[budget]\nmax = 1\n",
    )
    assert error and "the draft is invalid" in text
    assert not (paths().routines_dir / "day-brief.toml").exists()


def test_an_enabled_routine_is_never_rewritten(vinos_env: Path) -> None:
    path = paths().routines_dir / "day-brief.toml"
    path.write_text(ENABLED)
    error, text = _call(
        "draft_routine", name="day-brief", title="Day brief", summary="Your brief.", toml=DRAFT
    )
    assert error and "is enabled" in text
    assert path.read_text() == ENABLED


def test_history_of_an_unexposed_routine_is_refused(vinos_env: Path) -> None:
    (paths().routines_dir / "day-brief.toml").write_text(DRAFT)
    error, text = _call("routine_history", name="day-brief")
    assert error and "not exposed" in text and "[mcp_server].expose" in text
    paths().config_file.write_text('[mcp_server]\nexpose = ["day-brief"]\n')
    error, text = _call("routine_history", name="day-brief")
    assert not error, text


def test_validate_and_explain(vinos_env: Path) -> None:
    error, text = _call("validate_routine", name="x", toml="[agent]\nsystem = 1\n")
    result = json.loads(text)
    assert not error and result["ok"] is False and result["errors"]
    error, text = _call("explain_schedule", expression="0 6 * * 1-5", timezone="UTC")
    assert not error and json.loads(text)["description"] == "Every weekday at 6:00 AM", text


def test_a_routine_enabled_by_the_enable_command_is_never_rewritten(vinos_env: Path) -> None:
    import subprocess

    path = paths().routines_dir / "day-brief.toml"
    path.write_text(DRAFT)  # the file says off; `enable` turns it on in the ledger
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "enable", "day-brief"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    error, text = _call(
        "draft_routine",
        name="day-brief",
        title="Day brief",
        summary="Your brief.",
        toml=DRAFT + "\n# changed\n",
    )
    assert error and "is enabled" in text
    assert path.read_text() == DRAFT


def _cli(*argv: str) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "supervisor", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def _listed(name: str) -> dict[str, Any]:
    error, text = _call("list_routines")
    assert not error, text
    rows = json.loads(text) if text.startswith("[") else [json.loads(text)]
    (row,) = [r for r in rows if r["name"] == name]
    return dict(row)


def test_a_draft_after_enable_and_remove_is_born_disabled(vinos_env: Path) -> None:
    """The attack: the person enabled day-brief and removed it later; the model drafts a
    routine under the same name, and the leftover override would turn it on."""
    (paths().routines_dir / "day-brief.toml").write_text(DRAFT)
    _cli("enable", "day-brief")
    _cli("remove", "day-brief", "--yes")
    error, text = _call(
        "draft_routine",
        name="day-brief",
        title="Day brief",
        summary="Your brief.",
        toml=DRAFT + "\n# the model's\n",
    )
    assert not error, text
    assert _listed("day-brief")["enabled"] is False
    error, text = _call("run_routine", name="day-brief")
    assert error and "not enabled" in text


def test_a_leftover_override_never_enables_another_file(vinos_env: Path) -> None:
    """The file removed by hand (no `remove`): the override is left, bound to that file. A
    draft of the name is refused; a file the person writes there starts from what it says."""
    path = paths().routines_dir / "day-brief.toml"
    path.write_text(DRAFT)
    _cli("enable", "day-brief")
    assert _listed("day-brief")["enabled"] is True
    path.unlink()
    error, text = _call(
        "draft_routine", name="day-brief", title="Day brief", summary="Your brief.", toml=DRAFT
    )
    assert error and "turned on by the person" in text, text
    assert not path.exists()
    path.write_text(DRAFT + "\n# another file\n")
    assert _listed("day-brief")["enabled"] is False


def test_a_draft_named_like_a_system_routine_the_person_enabled_is_refused(
    vinos_env: Path,
) -> None:
    system = paths().system_dir
    system.mkdir(parents=True, exist_ok=True)
    (system / "day-brief.toml").write_text(DRAFT)  # off in its file, on by `enable`
    _cli("enable", "day-brief")
    error, text = _call(
        "draft_routine",
        name="day-brief",
        title="Day brief",
        summary="Your brief.",
        toml=DRAFT + "\n# the model's\n",
    )
    assert error and "is a system routine" in text, text
    assert not (paths().routines_dir / "day-brief.toml").exists()
    assert _listed("day-brief")["enabled"] is True  # the person's routine, still on


def test_a_draft_never_takes_the_place_of_a_system_routine_its_file_enables(
    vinos_env: Path,
) -> None:
    system = paths().system_dir
    system.mkdir(parents=True, exist_ok=True)
    (system / "day-brief.toml").write_text(ENABLED)
    error, text = _call(
        "draft_routine", name="day-brief", title="Day brief", summary="Your brief.", toml=DRAFT
    )
    assert error and "is a system routine" in text, text
    assert not (paths().routines_dir / "day-brief.toml").exists()
    assert _listed("day-brief")["enabled"] is True


def test_a_routine_the_person_disabled_is_not_redrafted(vinos_env: Path) -> None:
    path = paths().routines_dir / "day-brief.toml"
    path.write_text(DRAFT)
    _cli("disable", "day-brief")
    error, text = _call(
        "draft_routine",
        name="day-brief",
        title="Day brief",
        summary="Your brief.",
        toml=DRAFT + "\n# changed\n",
    )
    assert error and "turned off by the person" in text, text
    assert path.read_text() == DRAFT


def test_the_agent_may_redraft_its_own_draft(vinos_env: Path) -> None:
    error, text = _call(
        "draft_routine", name="day-brief", title="Day brief", summary="Your brief.", toml=DRAFT
    )
    assert not error, text
    error, text = _call(
        "draft_routine",
        name="day-brief",
        title="Day brief",
        summary="Your brief.",
        toml=DRAFT + "\n# better\n",
    )
    assert not error, text
    assert (paths().routines_dir / "day-brief.toml").read_text().endswith("# better\n")
    assert _listed("day-brief")["enabled"] is False


def test_a_draft_needs_a_title_and_a_summary_and_both_are_tidied(vinos_env: Path) -> None:
    async def body(s: ClientSession) -> Any:
        (tool,) = [t for t in (await s.list_tools()).tools if t.name == "draft_routine"]
        return tool.input_schema

    schema = _session(body)
    assert set(schema["required"]) == {"name", "title", "summary", "toml"}
    error, text = _call(
        "draft_routine",
        name="day-brief",
        title="  morning   brief. ",
        summary="you get your inbox and calendar  in one page",
        toml=DRAFT,
    )
    assert not error, text
    routine = load_file(paths().routines_dir / "day-brief.toml")
    assert (routine.title, routine.description) == (
        "Morning brief",
        "You get your inbox and calendar in one page.",
    )
    assert routine.enabled is False
    for title, summary, why in (
        ("x" * 61, "A brief.", "at most 60 characters"),
        ("Brief", "A brief. Then run gcalcli.", "expected one sentence"),
        ("", "A brief.", "expected a short title"),
    ):
        error, text = _call("draft_routine", name="other", title=title, summary=summary, toml=DRAFT)
        assert error and why in text, text
    assert not (paths().routines_dir / "other.toml").exists()


def test_a_title_another_routine_has_is_refused_update_it_instead(vinos_env: Path) -> None:
    (paths().routines_dir / "day-brief.toml").write_text(
        '[routine]\ntitle = "Morning  brief"\n\n' + DRAFT
    )
    error, text = _call(
        "draft_routine", name="dawn", title="MORNING BRIEF", summary="A brief.", toml=DRAFT
    )
    assert error and "update day-brief instead" in text, text
    assert not (paths().routines_dir / "dawn.toml").exists()


@pytest.mark.slow
def test_run_routine_runs_an_enabled_routine_through_the_daemon(
    vinos_env: Path, tmp_path: Path, not_root: None
) -> None:
    from tests.supervisor.daemonkit import DaemonProcess, command_routine, write_routine

    # Not due in this test's lifetime: only run_routine starts it.
    yearly = 'cron = "0 0 1 1 *"'
    write_routine("shown", command_routine("echo shown output", schedule=yearly))
    write_routine("hidden", command_routine("echo hidden output", schedule=yearly))
    paths().config_file.write_text('[mcp_server]\nexpose = ["shown"]\n')
    d = DaemonProcess(tmp_path).start()
    try:
        error, text = _call("run_routine", name="shown")
        assert not error, text
        shown = json.loads(text)
        assert shown["status"] == "ok" and "shown output" in shown["output"], shown
        error, text = _call("run_routine", name="hidden")
        assert not error, text
        hidden = json.loads(text)
        assert hidden["status"] == "ok", hidden
        assert "output" not in hidden and "detail" not in hidden  # its output stays unread
    finally:
        assert d.stop() == 0
