"""The in-process CLI (inprocess.py, the `cli` fixture) answers as `python -m supervisor` does:
the same exit status, stdout and stderr, and it leaves the test's process as it found it. The
rest of tests/cli relies on this."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import warnings

import pytest

from tests.cli.cli_helpers import Cli


def _same(cli: Cli, *args: str, env: dict[str, str | None] | None = None) -> None:
    here, there = cli(*args, env=env), cli.spawn(*args, env=env)
    assert (here.returncode, here.stdout, here.stderr) == (
        there.returncode,
        there.stdout,
        there.stderr,
    ), args


def test_answers_as_the_entry_point_does(cli: Cli) -> None:
    cli.agent("notes", description="the notes routine")
    cli.write("broken", "[agent]\nsystem = 1\n")
    _same(cli, "list", "--json")  # read through the thin client's path (no daemon)
    _same(cli, "validate")  # an error (exit 1) on stdout
    _same(cli, "frobnicate")  # a usage error (exit 2) on stderr
    _same(cli, "schedule", "explain", "0 6 * * 1-5")  # local times in the test's TZ
    _same(cli, "history", "nope", env={"NO_COLOR": "1"})  # stderr, and an extra variable


def test_leaves_the_process_as_it_found_it(cli: Cli, not_root: None) -> None:
    env, cwd, umask = dict(os.environ), os.getcwd(), os.umask(0o022)
    os.umask(umask)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)}
    root = logging.getLogger()
    logging_before = (root.handlers[:], root.level)
    filters, tzname = warnings.filters[:], time.tzname
    fds = sorted(os.listdir("/proc/self/fd"))
    cli.agent("notes")
    cli.command("hello", "echo hi")
    assert cli("list", env={"TZ": "Asia/Tokyo"}).returncode == 0
    ran = cli("run", "hello")  # a run in this process: its pool, its sandbox, its ledger
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert sorted(os.listdir("/proc/self/fd")) == fds  # nothing left open for the next test
    assert dict(os.environ) == env and os.getcwd() == cwd
    assert os.umask(umask) == umask
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert (root.handlers, root.level) == logging_before
    assert warnings.filters == filters and time.tzname == tzname
    assert sys.stdout is not None and not sys.stdout.closed


def test_a_command_that_would_exec_fails_the_test_naming_spawn(cli: Cli) -> None:
    # `sandbox NAME -- CMD` execs the sandbox runner: in-process, that would replace pytest's
    # worker, so the test fails instead, and the process keeps its real execve.
    cli.command("drafter", "true")
    real = os.execve
    with pytest.raises(pytest.fail.Exception, match=r"run it with cli\.spawn"):
        cli("sandbox", "drafter", "--", "true")
    assert os.execve is real
