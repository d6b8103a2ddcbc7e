"""`make demo` keeps working: scripts/demo.py end to end (validate, explain, list, a real daemon
running the sandboxed command routine, a clean stop). The daemon's clock is offset to just
before a minute boundary so the test need not wait up to a minute for the first slot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the demo starts a real daemon: make test-fast leaves it out

REPO = Path(__file__).resolve().parent.parent


def test_the_demo_runs_a_routine_in_the_sandbox_and_stops_cleanly(
    tmp_path: Path, not_root: None
) -> None:
    offset = tmp_path / "clock-offset"
    now = time.time()
    # Land the daemon's clock 8 s before the next minute boundary.
    offset.write_text(repr(60 - (now % 60) - 8))
    env = dict(os.environ)
    env.update(
        DEMO_HOME=str(tmp_path / "demo-home"),
        DEMO_SECONDS="25",
        VINOS_DEBUG_TIMINGS=json.dumps(
            {"clock_offset_file": str(offset), "tick_max_sec": 0.5, "forkserver": False}
        ),
        PYTHONPATH=str(REPO),
    )
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py")],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.count(": OK") == 6  # the six starters validate
    assert "Every weekday at 9:00 AM" in out
    assert "machine-check" in out and "Every minute" in out
    assert "Output landed:" in out
    # What the sandbox let the routine see, as the demo's output prints it.
    assert "- files in ~/.ssh I can read: 0 bytes (masked)" in out
    assert "- network: none" in out
    assert "- writing to my home: refused" in out
    assert "Daemon stopped (exit 0)" in out
    outputs = list((tmp_path / "demo-home/routines/state/machine-check").glob("*.md"))
    assert outputs
