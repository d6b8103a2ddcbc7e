"""`VINOS_ROUTINE_DEBUG=1 vinos-routine run NAME` prints each bwrap argv whether the run goes
through the daemon or runs in-process: the variable reaches the worker through its job (the
daemon's own environment does not have it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervisor.daemonkit import REPO, DaemonProcess, command_routine, write_routine

pytestmark = pytest.mark.slow  # a real daemon: make test-fast leaves it out


def cli(*args: str, debug: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "VINOS_ROUTINE_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    if debug:
        env["VINOS_ROUTINE_DEBUG"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_debug_prints_the_bwrap_argv_of_a_run_through_the_daemon(
    tmp_path: Path, not_root: None
) -> None:
    write_routine("dbg", command_routine("echo debugged", schedule='cron = "0 3 * * *"'))
    d = DaemonProcess(tmp_path).start()
    try:
        assert "VINOS_ROUTINE_DEBUG" not in d.env
        shown = cli("run", "dbg", debug=True)
        assert shown.returncode == 0, shown.stderr
        argv_lines = [line for line in shown.stdout.splitlines() if "sandbox argv: " in line]
        assert len(argv_lines) == 1, shown.stdout
        assert "--unshare-pid" in argv_lines[0] and "echo debugged" in argv_lines[0]
        # Without the variable, nothing of the kind: the flag is the run's, not the daemon's.
        quiet = cli("run", "dbg", debug=False)
        assert quiet.returncode == 0, quiet.stderr
        assert "sandbox argv: " not in quiet.stdout
        runs = d.request("status")
        assert runs["daemon"] is True
    finally:
        d.stop()
