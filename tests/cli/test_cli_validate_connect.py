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


@pytest.mark.parametrize("template_tools", [False, True], ids=["dropped", "shown"])
def test_connect_asks_a_local_server_whether_it_shows_the_tools(
    vinos_env: Path, template_tools: bool
) -> None:
    """The question a run asks before its first call (llama-server's /props), asked here."""
    from fakes import FakeOpenAI

    with FakeOpenAI(template_tools=template_tools) as fake:
        p = paths()
        p.config_file.parent.mkdir(parents=True, exist_ok=True)
        p.config_file.write_text(
            f'[providers.llama]\nkind = "openai"\nbase_url = "{fake.base_url}"\nlocal = true\n'
        )
        text = AGENT.replace(
            'system = "Write the brief."\n',
            'system = "Write the brief."\nroute = "llama"\nmodel = "m"\ntools = ["shell:date"]\n',
        )
        path = write(p.routines_dir, "day-brief", text)
        done = _validate(str(path))
        assert [r.path for r in fake.requests] == ["/props"]
    last = done.stdout.splitlines()[-1]
    if template_tools:
        assert done.returncode == 0, done.stdout
        assert last == f"{path}: provider llama: shows the tools"
    else:
        assert done.returncode == 1
        assert last.startswith(f'{path}: provider llama: "llama" at http://127.0.0.1:')
        assert last.endswith(
            "this model's chat template cannot show tools: start llama-server with `--jinja` "
            "and a template that supports tools (e.g. --chat-template-file, or a model whose "
            "GGUF has one)"
        )
