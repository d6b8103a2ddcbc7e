"""`vinos-routine run NAME` without a daemon runs in its own process, owning its ledger row; a
daemon that starts meanwhile treats the routine as busy (a routine never overlaps itself, wherever
it runs).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from routines.spec.paths import paths
from supervisor.cli.client import DaemonError
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    entered,
    final,
    gated,
    release,
    rows,
    sid,
    wait_for,
    write_routine,
)
from tests.supervisor.gates import gate_home

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def test_run_without_a_daemon_runs_in_process(tmp_path: Path, not_root: None) -> None:
    write_routine("solo", command_routine("echo alone", enabled=False))
    d = DaemonProcess(tmp_path)  # not started: only its environment is used
    out = d.cli("run", "solo")
    assert out.returncode == 0, out.stderr
    assert "no daemon running: running solo in this process" in out.stderr
    assert "shell:echo alone" in out.stdout
    [row] = rows("solo")
    assert (row.trigger, row.status, row.detail) == ("manual", "ok", "alone")
    assert row.output_file and Path(row.output_file).parent == paths().routine_state("solo")


def test_a_daemon_started_during_an_in_process_run_sees_the_routine_busy(
    tmp_path: Path, not_root: None
) -> None:
    write_routine("common", command_routine(gated("common"), extra=gate_home("common")))
    d = DaemonProcess(tmp_path)
    manual = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "run", "common"],
        env=d.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: entered("common") == 1 or manual.poll() is not None, what="the run")
        assert manual.poll() is None, manual.communicate()
        d.start()
        with pytest.raises(DaemonError) as refused:
            d.request("run", {"name": "common"})
        assert refused.value.code == "busy"
        assert "in another process" in str(refused.value)
        skipped = sid(d.to_slot())
        wait_for(lambda: len(final("common")) == 1, what="the daemon's slot to be skipped")
        release("common")
        assert manual.wait(60) == 0
    finally:
        if manual.poll() is None:
            manual.kill()
        manual.communicate()
    # Once the in-process run is over, the daemon runs the routine again.
    nxt = sid(d.to_slot())
    wait_for(lambda: len(final("common")) == 3, what="the next slot's run")
    assert [(r.trigger, r.slot, r.status) for r in rows("common")] == [
        ("manual", None, "ok"),
        ("schedule", skipped, "skipped"),
        ("schedule", nxt, "ok"),
    ]
    assert d.stop() == 0
