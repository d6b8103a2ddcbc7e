"""The disk quota of a shell call, for real: it covers the workspace and the scratch dir
together, it is kept during the call (where the kernel cannot keep it, tests marked `polling`:
RLIMIT_FSIZE no larger than what is left, and a poll) as well as after it, and a folder the
sandbox made unreadable is counted all the same. The kernel's way: test_overlay_quota.py."""

from __future__ import annotations

import os

import pytest

from sandbox import Limits
from tests.sandbox.sandbox_testkit import Box, python_in_sandbox

MiB = 1024 * 1024


def test_a_chmod_000_folder_in_the_workspace_is_counted(box: Box) -> None:
    hide = f"{box.workspace}/hide"
    r = box.run(
        f"mkdir {hide} && for i in 1 2 3 4 5 6; do head -c 20M /dev/zero > {hide}/f$i; done;"
        f" chmod 000 {hide}; echo hidden",
        limits=Limits(workspace_mb=200),
        timeout=60,
    )
    assert (r.error, r.stdout) == (None, "hidden\n")
    r = box.run("true", limits=Limits(workspace_mb=16))
    assert r.error is not None, "120 MB behind a chmod 000 folder went uncounted"
    assert "hold 120 MB together, over max_workspace_mb = 16" in r.error
    # The owner's walk gave the folder back its owner's access, nothing else.
    assert (box.workspace / "hide").stat().st_mode & 0o777 == 0o700


@pytest.mark.usefixtures("polling")
def test_the_scratch_dir_is_under_the_quota(box: Box) -> None:
    """200 MB in the run's working directory: stopped during the call, not after it."""
    r = box.run(
        "for i in $(seq 10); do head -c 20M /dev/zero > f$i; sleep 0.5; done; echo survived",
        limits=Limits(workspace_mb=16),
        timeout=60,
    )
    assert r.error is not None and r.error.startswith("stopped during the call: "), r
    assert "over max_workspace_mb = 16" in r.error and f"{box.scratch}: " in r.error
    assert "survived" not in r.stdout
    assert sum(f.stat().st_size for f in box.scratch.iterdir()) < 100 * MiB


@pytest.mark.usefixtures("polling")
def test_one_file_stops_where_the_quota_does(box: Box) -> None:
    """RLIMIT_FSIZE is what is left of the quota (rounded up to the MB, so reaching it is
    always over the quota and reported), not the 64 MB of max_file_size_mb."""
    (box.workspace / "old").write_bytes(b"x" * (4 * MiB))
    r = box.run(
        f"head -c 100M /dev/zero > {box.workspace}/big; echo rc=$?", limits=Limits(workspace_mb=16)
    )
    size = (box.workspace / "big").stat().st_size
    assert size <= 13 * MiB, size  # 12 MB left, rounded up
    assert r.error is not None and "over max_workspace_mb = 16" in r.error


@pytest.mark.usefixtures("polling")
def test_many_small_files_are_stopped_during_the_call(box: Box) -> None:
    """Each file under RLIMIT_FSIZE, together far over: the poll stops the call before it
    ends, and the tool result says why."""
    r = box.run(
        f"for i in $(seq 100); do head -c 1M /dev/zero > {box.workspace}/f$i; sleep 0.1; done;"
        " echo survived",
        limits=Limits(workspace_mb=16),
        timeout=60,
    )
    assert "survived" not in r.stdout
    assert r.exit_code is None
    assert r.error is not None and r.error.startswith("stopped during the call: ")
    assert "over max_workspace_mb = 16" in r.error
    assert len(os.listdir(box.workspace)) < 100


def test_a_call_over_the_quota_may_still_delete_files(box: Box) -> None:
    (box.workspace / "big").write_bytes(b"x" * (20 * MiB))
    r = box.run("ls; echo looked", limits=Limits(workspace_mb=16))
    assert r.stdout.endswith("looked\n") and r.error is not None  # not stopped, but reported
    r = box.run(f"rm {box.workspace}/big; echo ok", limits=Limits(workspace_mb=16))
    assert (r.error, r.stdout) == (None, "ok\n")


def test_a_link_planted_in_place_of_a_folder_is_not_followed(box: Box) -> None:
    """The walk restores modes through directory fds opened with O_NOFOLLOW: a link in the
    workspace pointing at a chmod 000 folder outside it is neither counted nor chmod'ed."""
    outside = box.home / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * (4 * MiB))
    outside.chmod(0)
    try:
        os.symlink(outside, box.workspace / "link")
        r = box.run("true", limits=Limits(workspace_mb=2))
        assert r.error is None, r.error
        assert outside.stat().st_mode & 0o777 == 0
    finally:
        outside.chmod(0o700)


@pytest.mark.usefixtures("polling")
def test_files_deleted_but_held_open_count_during_the_call(box: Box) -> None:
    """No walk finds a file unlinked while open: the poll counts what the processes hold."""
    code = f"""
import os, time
fds = []
for i in range(60):
    fd = os.open("{box.workspace}/f%d" % i, os.O_CREAT | os.O_WRONLY, 0o600)
    os.unlink("{box.workspace}/f%d" % i)
    os.write(fd, b"x" * (1 << 20))
    fds.append(fd)
    time.sleep(0.1)
print("survived")
"""
    r = box.run(python_in_sandbox(code), limits=Limits(workspace_mb=16), timeout=60)
    assert "survived" not in r.stdout
    assert r.error is not None and r.error.startswith("stopped during the call: "), r
    assert "files deleted but held open: " in r.error
