"""`vinos-routine validate --connect`: each MCP server is started in its sandbox (the real
mcp-server-time), and the tools it offers are listed with the entries that match none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import AGENT, write
from inprocess import run_in_process

from routines.spec.paths import paths

REPO = Path(__file__).resolve().parents[2]
TIME = str(Path(sys.executable).parent / "mcp-server-time")

pytestmark = pytest.mark.usefixtures("not_root")


def _routine(tools: str) -> str:
    text = AGENT.replace(
        'system = "Write the brief."\n', f'system = "Write the brief."\ntools = {tools}\n'
    )
    return text + f'\n[[agent.mcp]]\nname = "time"\ncommand = ["{TIME}"]\n'


def _validate(*args: str) -> subprocess.CompletedProcess[str]:
    # The CLI's entry point in this process (inprocess.py); the MCP servers are real processes.
    return run_in_process(["validate", "--connect", *args], env=os.environ.copy(), cwd=str(REPO))


def test_connect_lists_the_tools_and_the_entries_matching_none(vinos_env: Path) -> None:
    path = write(
        paths().routines_dir,
        "day-brief",
        _routine('["mcp:time/get_current_time", "mcp:time/get_time"]'),
    )
    done = _validate(str(path))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[-1] == (
        f"{path}: MCP server time: offers convert_time, get_current_time; whitelist entries "
        "matching none: mcp:time/get_time"
    )


def test_connect_json_and_a_matching_whitelist(vinos_env: Path) -> None:
    path = write(paths().routines_dir, "day-brief", _routine('["mcp:time/get_current_time"]'))
    done = _validate("--json", str(path))
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["mcp"]
    assert row["ok"] is True and row["unmatched"] == []
    assert row["tools"] == ["convert_time", "get_current_time"]


def test_the_capability_card_names_each_server_what_it_sees_and_its_tools(
    vinos_env: Path,
) -> None:
    from routines.spec.loader import load_file
    from supervisor.cli.commands.capabilities import card, needs_consent

    text = _routine('["mcp:time/get_current_time"]').replace(
        f'command = ["{TIME}"]\n',
        f'command = ["{TIME}"]\nhome = ["~/notes"]\nnetwork = ["example.org"]\n',
    )
    routine = load_file(write(paths().routines_dir, "day-brief", text))
    (line,) = [x for x in card(routine) if x.label == "mcp"]
    assert line.text == (
        f"time: `{TIME}` (sees ~/notes; network: example.org; tools: get_current_time)"
    )
    assert line.caution and needs_consent(routine)  # it reads, and can reach the network
