"""A command routine's one long command writes its workspace through the overlay a model's
shell call writes (sandbox/runner.py, sandbox/overlay.py): the kernel stops it at
`max_workspace_mb` (ENOSPC on the tmpfs upper layer), nothing over the quota reaches the
workspace, and what it wrote within the quota is copied back when it ends. Real worker, real
bwrap, real files.

Before: the command wrote the workspace live, kept by RLIMIT_FSIZE and a poll; a 40 MB write
against 16 left a 16 MB file in the workspace beside what was there.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from sandbox.limits import MiB
from sandbox.overlay import overlay_unavailable
from tests.worker.worker_harness import command_toml, make_job, run_worker

pytestmark = [pytest.mark.usefixtures("not_root"), pytest.mark.slow]


def _workspace(home: Path) -> Path:
    ws = home / "routines" / "workspace" / "quota"
    ws.mkdir(parents=True)
    return ws


def _held(ws: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in ws.rglob("*") if p.is_file())


def test_a_command_writing_past_its_quota_is_stopped_by_the_kernel_and_keeps_nothing(
    home: Path,
) -> None:
    assert overlay_unavailable() is None  # the kernel keeps the quota on this test host
    ws = _workspace(home)
    (ws / "kept.bin").write_bytes(b"k" * MiB)
    command = f"dd if=/dev/zero of={ws}/big.bin bs=1M count=40 status=none; echo done"
    job = msgspec.structs.replace(
        make_job(home, command_toml(command, timeout_sec=120), name="quota"),
        sandbox={"max_workspace_mb": 16},
    )
    r = run_worker(job, timeout=120)
    assert r.result.status == "failed", r.stderr
    # The verdict's words for a tmpfs the writes filled: the kernel stopped them (ENOSPC).
    assert r.result.error is not None and "wrote more than" in r.result.error, r.result
    assert "max_workspace_mb = 16" in r.result.error
    assert not (ws / "big.bin").exists()
    assert (ws / "kept.bin").read_bytes() == b"k" * MiB
    assert _held(ws) <= 16 * MiB


def test_a_commands_writes_within_its_quota_land_in_the_workspace_when_it_ends(
    home: Path,
) -> None:
    ws = _workspace(home)
    (ws / "old.txt").write_text("old\n")
    command = (
        f"dd if=/dev/zero of={ws}/made.bin bs=1M count=3 status=none && "
        f"mkdir {ws}/sub && echo new > {ws}/sub/new.txt && rm {ws}/old.txt && echo wrote"
    )
    job = msgspec.structs.replace(
        make_job(home, command_toml(command, timeout_sec=120), name="quota"),
        sandbox={"max_workspace_mb": 16},
    )
    r = run_worker(job, timeout=120)
    assert r.result.status == "ok", (r.result, r.stderr)
    # The supervisor is told before the copy back, which may outlast timeout_sec: its
    # backstop then waits for it, once (tests/supervisor/test_spawn.py).
    kinds = r.kinds()
    assert kinds.index("copy_back") > kinds.index("tool_call"), kinds
    assert kinds.index("copy_back") < kinds.index("tool_result"), kinds
    assert (ws / "made.bin").stat().st_size == 3 * MiB
    assert (ws / "sub" / "new.txt").read_text() == "new\n"
    assert not (ws / "old.txt").exists()
