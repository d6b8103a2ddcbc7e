"""`[[agent.mcp]]`, `mcp:SERVER/TOOL` and `[command].mcp` in routine files: what a valid
file means, and the exact error for each kind of mistake (file, key, expected, found)."""

from __future__ import annotations

from pathlib import Path

import pytest

from routines.spec import Credential, McpCall, McpServer, Tool, ToolKind
from routines.spec.checks import RoutineInvalid
from routines.spec.loader import load_file
from tests.helpers import AGENT, write

GIT = """
[[agent.mcp]]
name = "git"
command = ["mcp-server-git", "--repository", "~/src/site"]
home = ["~/src/site"]
network = false
"""


def _agent(tools: str, servers: str = GIT) -> str:
    return (
        AGENT.replace(
            'system = "Write the brief."\n', f'system = "Write the brief."\ntools = {tools}\n'
        )
        + servers
    )


def _errors(rdir: Path, text: str) -> list[str]:
    path = write(rdir, "day-brief", text)
    with pytest.raises(RoutineInvalid) as info:
        load_file(path)
    prefix = f"{path}: "
    return [str(p).removeprefix(prefix) for p in info.value.errors]


@pytest.fixture
def rdir(tmp_path: Path) -> Path:
    d = tmp_path / "routines"
    d.mkdir()
    return d


def test_a_server_and_its_whitelisted_tools(rdir: Path) -> None:
    servers = (
        GIT
        + """
[[agent.mcp]]
name = "fetch"
command = ["mcp-server-fetch"]
network = ["example.org"]
timeout_sec = 20
[[agent.mcp.credentials]]
path = "~/.config/fetch-token"
hosts = ["api.example.org"]
"""
    )
    text = _agent('["mcp:git/git_log", "mcp:fetch/fetch", "read:~/Notes/*.md"]', servers)
    agent = load_file(write(rdir, "day-brief", text)).agent
    assert agent is not None
    assert agent.tools[0] == Tool(ToolKind.MCP, "git/git_log")
    assert str(agent.tools[0]) == "mcp:git/git_log"
    assert agent.mcp_tools == (("git", "git_log"), ("fetch", "fetch"))
    git, fetch = agent.mcp
    assert git == McpServer(
        "git", ("mcp-server-git", "--repository", "~/src/site"), home=("~/src/site",)
    )
    assert fetch.timeout_sec == 20
    assert fetch.credentials == (Credential("~/.config/fetch-token", ("api.example.org",)),)
    assert fetch.egress == ("example.org", "api.example.org")


def test_an_undeclared_server_names_the_key_and_the_servers_declared(rdir: Path) -> None:
    assert _errors(rdir, _agent('["mcp:gti/git_log"]')) == [
        '[agent].tools[0]: "mcp:gti/git_log" names the MCP server "gti", which is not '
        'declared; servers declared: "git"'
    ]


def test_no_server_declared_says_so(rdir: Path) -> None:
    assert _errors(rdir, _agent('["mcp:git/git_log"]', servers="")) == [
        '[agent].tools[0]: "mcp:git/git_log" names the MCP server "git", which is not '
        "declared; servers declared: none ([[agent.mcp]] declares one)"
    ]


@pytest.mark.parametrize(
    "entry", ["mcp:git", "mcp:git/", "mcp:/git_log", "mcp:git/git log", "mcp:Git/x"]
)
def test_a_malformed_entry_is_refused(rdir: Path, entry: str) -> None:
    (error,) = _errors(rdir, _agent(f'["{entry}"]'))
    assert error.startswith('[agent].tools[0]: expected "mcp:SERVER/TOOL"'), error
    assert error.endswith(f'found "{entry}"')


@pytest.mark.parametrize(
    ("server", "error"),
    [
        (
            'name = "git"\ncommand = "mcp-server-git --repository ~/src"',
            '[agent].mcp[0].command: expected an argv array such as ["mcp-server-git", '
            '"--repository", "~/src"] (an argv, never a shell string), found "mcp-server-git '
            '--repository ~/src" (a string)',
        ),
        (
            'name = "git"\ncommand = ["mcp-server-git"]\nnetwork = true',
            "[agent].mcp[0].network: expected false or an array of host names such as "
            '["api.github.com"] (never true), found true (a boolean)',
        ),
        (
            'name = "git_server"\ncommand = ["mcp-server-git"]',
            "[agent].mcp[0].name: expected lowercase letters, digits and '-' (at most 32, no "
            """'_'), found "git_server" (a string)""",
        ),
        ('command = ["mcp-server-git"]', '[agent].mcp[0].name: required, e.g. name = "git"'),
        (
            'name = "git"\ncommand = ["mcp-server-git"]\nhomes = ["~/src"]',
            "[agent].mcp[0].homes: unknown key (did you mean home?)",
        ),
        (
            'name = "git"\ncommand = ["mcp-server-git"]\nhome = ["~/.ssh"]',
            None,
        ),
    ],
    ids=["shell-string", "network-true", "underscore", "no-name", "typo", "never-list"],
)
def test_a_bad_server_table(rdir: Path, server: str, error: str | None) -> None:
    errors = _errors(rdir, _agent('["mcp:git/git_log"]', f"\n[[agent.mcp]]\n{server}\n"))
    if error is None:
        assert len(errors) == 1 and errors[0].startswith("[agent].mcp[0].home[0]: "), errors
        assert "~/.ssh" in errors[0]
    else:
        assert error in errors, errors


def test_two_servers_of_one_name(rdir: Path) -> None:
    errors = _errors(rdir, _agent('["mcp:git/git_log"]', GIT + GIT))
    assert errors == [
        '[agent].mcp[1].name: expected a name unique in the routine, found "git" again'
    ]


COMMAND_MCP = """
[routine]
kind = "command"

[schedule]
every = "every day at 7:00"

[command]
mcp = { server = "time", tool = "get_current_time", arguments = { timezone = "Europe/Paris" } }

[[command.mcp_servers]]
name = "time"
command = ["mcp-server-time"]
"""


def test_a_command_routines_mcp_call(rdir: Path) -> None:
    command = load_file(write(rdir, "paris", COMMAND_MCP)).command
    assert command is not None and command.run == ""
    assert command.mcp == McpCall("time", "get_current_time", '{"timezone": "Europe/Paris"}')
    assert [s.name for s in command.mcp_servers] == ["time"]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            ('server = "time"', 'server = "clock"'),
            '[command].mcp.server: "clock" is not declared in [[command.mcp_servers]]; servers '
            'declared: "time"',
        ),
        (
            ("[command]\n", '[command]\nrun = "date"\n'),
            "[command].run: set either run or mcp, not both",
        ),
        (
            ('arguments = { timezone = "Europe/Paris" }', 'arguments = "Europe/Paris"'),
            "[command].mcp.arguments: expected a table of the tool's arguments, e.g. { timezone = "
            '"UTC" }, found "Europe/Paris" (a string)',
        ),
    ],
    ids=["undeclared", "run-too", "arguments"],
)
def test_a_bad_command_mcp(rdir: Path, change: tuple[str, str], error: str) -> None:
    path = write(rdir, "paris", COMMAND_MCP.replace(*change))
    with pytest.raises(RoutineInvalid) as info:
        load_file(path)
    assert [str(p).removeprefix(f"{path}: ") for p in info.value.errors] == [error]
