"""What the CLI says, word for word where a newcomer tripped: a plain-language schedule is not
"every every 30 minutes", a command without an exit status is not "exit None", and
`sandbox --argv | head` ends quietly."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from routines.spec.loader import load_text
from supervisor.cli.commands.capabilities import schedule_text
from tests.cli.cli_helpers import Cli

EVERY = """\
[routine]
kind = "command"
[schedule]
every = "every 30 minutes"
timezone = "UTC"
[command]
run = "true"
"""


def test_a_plain_language_schedule_is_summarised_once() -> None:
    routine = load_text(EVERY, Path("/tmp/half-hourly.toml"))
    assert schedule_text(routine) == "Every 30 minutes (cron */30 * * * *, UTC)"


def test_a_command_killed_at_its_timeout_says_so_not_exit_none(cli: Cli, not_root: None) -> None:
    cli.write(
        "slow",
        '[routine]\nkind = "command"\n[schedule]\ncron = "0 6 * * *"\n'
        '[command]\nrun = "sleep 30"\ntimeout_sec = 1\n',
    )
    res = cli("run", "slow", "--no-daemon")
    assert res.returncode == 1
    assert "exit None" not in res.stdout
    assert "command: killed at its timeout" in res.stdout


def test_sandbox_argv_into_a_closed_pipe_ends_quietly(cli: Cli, not_root: None) -> None:
    cli.command("piped", "echo hi")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: every write is EPIPE
    try:
        done = subprocess.run(
            cli.argv("sandbox", "piped", "--argv", "--", "echo hi"),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=cli.environ(),
            cwd=cli.home,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr, done.stderr
    assert "BrokenPipeError" not in done.stderr
    assert done.returncode == 0


def test_fleet_subcommands_have_examples(cli: Cli) -> None:
    for sub in ("status", "join", "leave"):
        res = cli("fleet", sub, "--help")
        assert res.returncode == 0
        assert "example:\n  " in res.stdout and f"vinos-routine fleet {sub}" in res.stdout, sub
