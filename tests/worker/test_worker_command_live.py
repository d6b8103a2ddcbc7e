"""A command routine's one long command writes its workspace as it goes, while a model's
shell call writes an overlay the kernel keeps to the quota, copied back after the call
(sandbox/runner.py `live`). A backup, a mirror or a progress file must show while the
command runs and survive a crash; it may also be larger than memory, which a tmpfs upper
layer would hold. Real worker, real bwrap, real files.

Before: with the overlay on every call, nothing the command wrote reached the workspace until
it ended, and a file the test waited for never appeared while the command ran.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from ipc import Hello, LineReader, Result, RunStatus, encode
from tests.worker.worker_harness import command_toml, make_job, spawn

pytestmark = pytest.mark.slow


def test_a_command_routines_files_show_in_its_workspace_while_it_runs(
    home: Path, not_root: None
) -> None:
    ws = home / "routines" / "workspace" / "live"
    ws.mkdir(parents=True)
    command = f"echo started > {ws}/progress; while [ ! -e {ws}/go ]; do sleep 0.05; done"
    job = make_job(home, command_toml(command, timeout_sec=120), name="live")
    proc = spawn()
    assert proc.stdin is not None
    proc.stdin.write(encode(Hello()) + encode(job))
    proc.stdin.flush()  # stdin stays open, as the daemon's does
    try:
        deadline = time.monotonic() + 60
        while not (ws / "progress").exists():
            assert proc.poll() is None, "the command ended before its file showed"
            assert time.monotonic() < deadline, "the command's file never showed while it ran"
            time.sleep(0.05)
        assert (ws / "progress").read_text() == "started\n"
        (ws / "go").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    reader = LineReader(io.BytesIO(out))
    results = []
    while (m := reader.read()) is not None:
        if isinstance(m, Result):
            results.append(m)
    assert [r.status for r in results] == [RunStatus.OK], err
