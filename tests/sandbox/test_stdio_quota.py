"""The disk quota of a long-lived sandboxed program (an MCP server, sandbox/stdio.py): its
writable dirs are overlays on a tmpfs of `max_workspace_mb` for its whole life, as a shell
call's are for the call, so the kernel stops its writes at the quota (ENOSPC) whenever it
makes them, and what it wrote is copied back within the quota when it ends. Where the kernel
cannot (tests marked `polling`), worker/mcpquota.py's poll ends it. The worker's side, with a
real MCP server: tests/worker/test_worker_mcp_quota.py."""

from __future__ import annotations

import contextlib
import os
import select
import time

import pytest

from sandbox import Limits
from sandbox.stdio import StdioChild, start_stdio
from tests.sandbox.sandbox_testkit import Box
from worker.mcpquota import ServerQuota

MiB = 1024 * 1024

pytestmark = pytest.mark.usefixtures("no_leftovers")


def _said(child: StdioChild, word: bytes, timeout: float = 60) -> None:
    """Wait until the program has written `word` on its stdout."""
    got = b""
    until = time.monotonic() + timeout
    while word not in got:
        assert time.monotonic() < until, f"the program never said {word!r}: {got!r}"
        if select.select([child.stdout], [], [], 0.2)[0]:
            with contextlib.suppress(BlockingIOError):
                got += os.read(child.stdout, 4096)


def _held(box: Box) -> int:
    return sum(p.stat().st_blocks * 512 for p in box.workspace.rglob("*") if p.is_file())


def test_writes_past_the_quota_stop_at_it_and_none_is_kept(box: Box) -> None:
    writers = " ".join(
        f"dd if=/dev/zero of={box.workspace}/f{i} bs=1M count=10 status=none &" for i in range(20)
    )
    program = ["/bin/sh", "-c", f"{writers} wait; echo written; exec cat"]
    child = start_stdio(program, box.policy(limits=Limits(workspace_mb=16)))
    try:
        assert child.overlaid
        _said(child, b"written")
        problem = child.quota_problem()
        assert problem is not None and "wrote more than" in problem, problem
        assert "max_workspace_mb = 16" in problem
        assert child.running()  # ENOSPC stopped the writes, not the program
    finally:
        child.close()
    assert child.not_kept is not None and "wrote more than" in child.not_kept
    assert list(box.workspace.iterdir()) == []


def test_writes_within_the_quota_are_kept_when_it_ends(box: Box) -> None:
    (box.workspace / "old.txt").write_text("old\n")
    program = [
        "/bin/sh",
        "-c",
        f"head -c 3M /dev/zero > {box.workspace}/made.bin && rm {box.workspace}/old.txt && "
        "echo written; exec cat",
    ]
    child = start_stdio(program, box.policy(limits=Limits(workspace_mb=16)))
    try:
        _said(child, b"written")
        assert child.quota_problem() is None
        assert not (box.workspace / "made.bin").exists()  # in its overlay until it ends
    finally:
        child.close()
    assert child.not_kept is None
    assert (box.workspace / "made.bin").stat().st_size == 3 * MiB
    assert not (box.workspace / "old.txt").exists()


@pytest.mark.usefixtures("polling")
def test_without_the_kernels_quota_the_poll_ends_a_program_writing_past_it(box: Box) -> None:
    policy = box.policy(limits=Limits(workspace_mb=16))
    quota = ServerQuota(policy)  # measured before it starts, as worker/mcptools.py does
    program = [
        "/bin/sh",
        "-c",
        f"for i in $(seq 20); do head -c 5M /dev/zero > {box.workspace}/f$i; sleep 0.2; done;"
        " exec cat",
    ]
    child = start_stdio(program, policy)
    try:
        assert not child.overlaid
        quota.watch(child)
        assert child.wait(60), "the poll did not end the program"
        assert quota.killed is not None and "max_workspace_mb = 16" in quota.killed
    finally:
        child.close()
        quota.close()
    assert child.not_kept is None
