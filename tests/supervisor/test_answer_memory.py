"""The daemon's memory across thin-client answers (supervisor/control/answers.py,
supervisor/control/memtrim.py):
answering `list --json` for thousands of routines builds megabytes of rows and text and frees
them; the idle daemon must not keep the pages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervisor.daemonkit import REPO, DaemonProcess, command_routine, write_routine

ROUTINES = 5_000
# What the socket answers may add to the idle daemon once each verb was answered; without the
# trim after an answer (supervisor/control/memtrim.py), the answers below left it ~10 MB bigger at
# this
# many routines (3 MB of `list --json` each).
GROWTH_MB = 5.0

THIN = (
    "import sys\nfrom supervisor.cli.thinclient import thin\n"
    "code = thin(sys.argv[1:])\nsys.exit(99 if code is None else code)\n"
)


def _ask(d: DaemonProcess, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", THIN, *args],
        cwd=REPO,
        env={**d.env, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{args}: {done.returncode} {done.stderr}"  # 99: not answered
    return done.stdout


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow  # a real daemon with 5,000 routine files
def test_large_answers_leave_the_idle_daemon_no_bigger(tmp_path: Path, not_root: None) -> None:
    for i in range(ROUTINES):
        # First of January only: none comes due while the test runs.
        write_routine(f"r{i}", command_routine("true", schedule=f'cron = "{i % 60} 0 1 1 *"'))
    d = DaemonProcess(tmp_path, tick=1.0).start(wait=False)
    try:
        d.wait_ready(timeout=300)
        assert d.daemon_pid is not None
        # The first answer of each verb loads what answering needs, once: modules, the
        # ledger's pages, the allocator's arenas those pin.
        verbs = (("history", "r1"), ("cost",), ("status",), ("status", "--waybar"), ("list",))
        for args in verbs:
            _ask(d, *args)
        before = _rss_mb(d.daemon_pid)
        for _ in range(3):
            assert _ask(d, "list", "--json").count('"name"') == ROUTINES
        for args in verbs:
            _ask(d, *args)
        after = _rss_mb(d.daemon_pid)
        assert after - before <= GROWTH_MB, f"{before:.1f} MB -> {after:.1f} MB"
    finally:
        d.stop()
