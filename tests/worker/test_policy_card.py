"""No card/sandbox mismatch for any grant kind: for a routine holding each kind of grant, the
bwrap argv of each of its sandboxes (its shell, each MCP server, each action: built as a run
builds them, worker/shellpolicy.py and worker/mcptools.py) is walked, and everything in it
that widens the empty sandbox must be on the capability card, which renders the same policy
(routines/policy.py). The kinds: read (the read tool), write, home entry, credential,
network, MCP server, install folder, environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from routines.policy import ScopeKind, host_policy
from routines.spec import Routine
from routines.spec.config import SandboxSettings
from routines.spec.loader import load_file
from routines.spec.paths import paths
from sandbox import ShellPolicy
from sandbox.argv import build_argv
from sandbox.host import SYSTEM_DIRS, Host
from sandbox.netns import proxy_env
from sandbox.policy import ENV_NAMES
from supervisor.cli.commands.capabilities import card, card_lines
from tests.helpers import AGENT, write
from worker.mcptools import server_policy
from worker.shellpolicy import shell_policy_for

TOOLS = '["read:~/notes/*.md", "mcp:notes/search"]'


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with something behind every grant: notes, a gh login, a server installation
    with the person's `.env` in it."""
    home = tmp_path / "home"
    for d in (
        "notes",
        "src/site",
        ".config/gh",
        ".config/notes-api",
        "mail",
        "mcp-notes/bin",
        "drafts",
    ):
        (home / d).mkdir(parents=True)
    (home / "notes/a.md").write_text("a")
    (home / ".config/gh/hosts.yml").write_text("token")
    (home / "mcp-notes/pyvenv.cfg").write_text("home = /usr/bin\n")
    (home / "mcp-notes/.env").write_text("KEY=1\n")
    server = home / "mcp-notes/bin/notes-server"
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    return home


def _routine(home: Path, permissions: str = "ask") -> Routine:
    text = AGENT.replace(
        'system = "Write the brief."\n',
        f'system = "Write the brief."\ntools = {TOOLS}\nhome = ["~/src/site"]\n'
        'network = ["status.example.org"]\nwrite = ["~/drafts"]\n',
    )
    text = f'[routine]\npermissions = "{permissions}"\n\n' + text
    text += (
        '\n[[agent.credentials]]\npath = "~/.config/gh"\nhosts = ["api.github.com"]\n'
        f'\n[[agent.mcp]]\nname = "notes"\ncommand = ["{home}/mcp-notes/bin/notes-server"]\n'
        'home = ["~/notes"]\nnetwork = ["search.example"]\n'
        '\n[[agent.mcp.credentials]]\npath = "~/.config/notes-api"\nhosts = ["notes.example"]\n'
        '\n[[agent.actions]]\nname = "file"\nrun = "cat > x"\nhome = ["~/mail"]\n'
        'network = ["smtp.example"]\n'
    )
    return load_file(write(paths().routines_dir, "walk", text))


def _tilde(path: str, home: Path) -> str:
    real = os.path.realpath(home)
    return "~" + path[len(real) :] if path.startswith(real + "/") else path


def _walk(policy: ShellPolicy, home: Path, shown: str, writable: set[str]) -> list[str]:
    """Each thing in the argv of `policy` that widens the sandbox and is not on `shown`."""
    argv = build_argv(policy, Host.probe(policy), 3)
    missing = []
    for i, arg in enumerate(argv):
        if arg == "--ro-bind-try":  # home entries and credentials
            where = _tilde(argv[i + 2], home)
            if where not in shown:
                missing.append(f"read-only {where}")
        elif arg == "--ro-bind" and argv[i + 1] != "/dev/null":
            path = argv[i + 2]
            # The system dirs every sandbox shows (sandbox/argv.py), nothing of the person's.
            system = path in ("/usr", "/etc", *SYSTEM_DIRS)
            if not system and path not in shown:  # an installation
                missing.append(f"read-only {path}")
        elif arg in ("--bind", "--bind-fd"):
            # The run's own dirs, or a write folder the card says is written without asking.
            where = _tilde(argv[i + 2], home)
            if argv[i + 2] not in writable and f"{where} (its shell commands and" not in shown:
                missing.append(f"writable {where}")
        elif arg == "--setenv":
            name = argv[i + 1]
            proxy = name in dict(proxy_env()) and "proxy" in shown
            if not (proxy or (name in ENV_NAMES and ", ".join(ENV_NAMES) in shown)):
                missing.append(f"environment {name}")
    if policy.network:
        hosts = policy.network if isinstance(policy.network, tuple) else ("any host",)
        missing += [f"network {h}" for h in hosts if h not in shown]
    return missing


@pytest.mark.parametrize("permissions", ["ask", "files"])
def test_every_grant_that_widens_a_sandbox_is_on_the_card(home: Path, permissions: str) -> None:
    routine = _routine(home, permissions)
    p = paths()
    settings = SandboxSettings()
    policy = host_policy(routine, p, settings, os.environ.get("PATH", "/usr/bin"))
    shown = "\n".join(card_lines(card(routine, policy)))
    scratch = p.run_scratch(routine.name, "walk")
    # Write: the routine's own workspace and the run's scratch (the card need not list them),
    # and its write folders only where the card says so; everything else is read-only.
    writable = {os.path.realpath(p.workspace(routine.name)), os.path.realpath(scratch)}
    shells = [shell_policy_for(routine, paths=p, scratch_dir=scratch, settings=settings)]
    shells += [
        shell_policy_for(routine, paths=p, scratch_dir=scratch, settings=settings, action=a)
        for a in routine.actions
    ]
    assert routine.agent is not None
    servers = [
        server_policy(routine, s, paths=p, scratch_dir=scratch, settings=settings)[0]
        for s in routine.agent.mcp
    ]
    missing = [m for sp in (*shells, *servers) for m in _walk(sp, home, shown, writable)]
    assert missing == [], shown
    # Each kind is really in this routine's sandboxes (the walk above is not vacuous), and
    # the read tool's globs, read host-side, are on the card too.
    install = os.path.realpath(home / "mcp-notes")
    assert install in servers[0].ro_binds and f"{install}/.env" in servers[0].masks
    assert policy.of(ScopeKind.MCP, "notes").install == (install,)
    assert {d for _, d in shells[0].declared} >= {str(home / "src/site"), str(home / ".config/gh")}
    assert {d for _, d in servers[0].declared} == {
        str(home / "notes"),
        str(home / ".config/notes-api"),
    }
    assert shells[1].network == ("smtp.example",)
    drafts = str(home / "drafts")
    if permissions == "files":  # read-write, and nowhere else
        assert drafts in shells[0].rw_binds and "~/drafts (its shell commands and" in shown
        assert all(drafts not in s.rw_binds for s in (*shells[1:], *servers))
    else:  # read-only, and each write_file there asks
        assert drafts in {d for _, d in shells[0].declared} and drafts not in shells[0].rw_binds
        assert "~/drafts (read-only to its shell commands; each write_file there asks" in shown
    assert "~/notes/*.md (read tool)" in shown


def test_a_write_folder_reached_through_a_link_is_refused_under_files(home: Path) -> None:
    """It is bound read-write from a descriptor opened with O_NOFOLLOW at its own path: a
    link there is refused by name, never bound in its target's place."""
    (home / "drafts").rmdir()
    (home / "drafts").symlink_to(home / "mail")
    routine = _routine(home, "files")
    p = paths()
    scratch = p.run_scratch(routine.name, "walk")
    with pytest.raises(ValueError, match="'~/drafts' is reached through a link"):
        shell_policy_for(routine, paths=p, scratch_dir=scratch, settings=SandboxSettings())
