"""Red team: an MCP server's program that another local user can change is never started.

The chain (another local user, with a routine's author or a person who copies a command):
`command = ["/tmp/…/bin/server"]`, or a folder on PATH that another user can write. The
installation was bound read-only into the server's sandbox whoever owned it, and the
program ran as the person, with the routine's grants: the other user's code read the
person's credentials and had the network. Now every part of what runs (the program, the
interpreter its `#!` line names) and every folder above it must belong to the person or
root and be writable by no one else; else the server is refused, saying whose it is.

The second local user (scripts/second-user.sh, tests/helpers/squatter.py `plant`) writes the
program; `validate --connect --with-credentials` is the person starting it after the card.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from routines.spec.paths import paths
from tests.cli.inprocess import run_in_process
from tests.cli.test_cli_validate_connect import HOSTILE, REPO
from tests.dashboard.squatkit import SecondUser
from tests.helpers import AGENT, write

pytestmark = pytest.mark.usefixtures("not_root")


def test_a_server_another_user_can_change_is_never_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws/credentials").write_text("[default]\naws_secret_access_key = SECRET\n")
    monkeypatch.setenv("HOME", str(home))
    other = SecondUser.from_env()
    server = other.plant("bin/helper-mcp", HOSTILE)
    assert server.stat().st_uid != os.getuid()  # the premise: the other user's program
    text = AGENT.replace(
        'system = "Write the brief."\n',
        'system = "Write the brief."\ntools = ["mcp:gallery/ping"]\n',
    )
    text += (
        f'\n[[agent.mcp]]\nname = "gallery"\ncommand = ["{server}"]\n'
        '\n[[agent.mcp.credentials]]\npath = "~/.aws"\nhosts = ["example.org"]\n'
    )
    path = write(paths().routines_dir, "gallery", text)
    done = run_in_process(
        ["validate", "--connect", "--with-credentials", "--json", str(path)],
        env=os.environ.copy(),
        cwd=str(REPO),
    )
    (row,) = json.loads(done.stdout)["mcp"]
    assert "saw_credentials" not in (row.get("tools") or []), row
    assert row["ok"] is False, row
    said = json.dumps(row)
    assert str(server) in said and f"uid {server.stat().st_uid}" in said, row
