"""Per-call limits over all of a call's processes, and the sandbox binary, for real.

- several processes together over max_run_memory_mb: killed, and the result says why;
- a workspace over max_workspace_mb after the call: the call fails, naming where and how much
  (test_run_quota.py has the rest of the quota);
- a fake `bwrap` first on PATH is never run; a bwrap not owned by root is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import Limits
from tests.sandbox.sandbox_testkit import REPO, Box


@pytest.mark.slow
def test_processes_over_the_run_memory_cap_together_are_killed(box: Box) -> None:
    # Three processes of 150 MB each: every one is far under the per-process address-space
    # limit, together they pass a 300 MB cap for the call.
    hog = "/usr/bin/python3 -c 'import time; b = b\"x\" * (150 << 20); time.sleep(60)'"
    limits = Limits(run_memory_mb=300, address_space_mb=1024)
    r = box.run(f"{hog} & {hog} & {hog} & wait; echo survived", limits=limits, timeout=60)
    assert r.error is not None and r.error.startswith("killed: the command's processes used")
    # The processes' share: the budget less /tmp's 64 MB (sandbox/limits.py).
    assert "together, over the 236 MB that max_run_memory_mb = 300 leaves beside /tmp's" in r.error
    assert r.exit_code is None
    assert "survived" not in r.stdout
    assert r.duration_sec < 60  # killed, not timed out
    assert not r.timed_out


def test_a_call_under_the_memory_cap_runs_to_its_end(box: Box) -> None:
    r = box.run(
        "/usr/bin/python3 -c 'b = b\"x\" * (20 << 20)'; echo done", limits=Limits(run_memory_mb=300)
    )
    assert (r.error, r.stdout) == (None, "done\n")


def test_a_workspace_over_its_quota_fails_the_call(box: Box) -> None:
    r = box.run(
        f"head -c 3000000 /dev/urandom > {box.workspace}/big; echo wrote",
        limits=Limits(workspace_mb=2),
    )
    assert r.stdout == "wrote\n"
    assert r.error is not None
    workspace, scratch = os.path.realpath(box.workspace), os.path.realpath(box.scratch)
    # The kernel stopped the write at 2 MB (sandbox/overlay.py), and nothing was kept.
    assert r.error == (
        f"the call wrote more than {workspace} and {scratch} may hold, over "
        "max_workspace_mb = 2; nothing the call wrote there was kept"
    )
    assert not (box.workspace / "big").exists()
    # Under the quota, the next call passes.
    r = box.run(f"ls {box.workspace}; echo ok", limits=Limits(workspace_mb=2))
    assert (r.error, r.stdout) == (None, "ok\n")


@pytest.mark.usefixtures("polling")
def test_a_workspace_over_its_quota_fails_the_call_when_polled(box: Box) -> None:
    """Where the kernel cannot keep the quota, the measure after the call reports it."""
    r = box.run(
        f"head -c 3000000 /dev/urandom > {box.workspace}/big; echo wrote",
        limits=Limits(workspace_mb=2),
    )
    assert r.stdout == "wrote\n"
    workspace, scratch = os.path.realpath(box.workspace), os.path.realpath(box.scratch)
    assert r.error == (
        f"{workspace} and {scratch} hold 3 MB together, over max_workspace_mb = 2 "
        f"({workspace}: 3 MB, {scratch}: 0 MB); delete files there"
    )
    # Under the quota again, the next call passes.
    r = box.run(f"rm {box.workspace}/big; echo ok", limits=Limits(workspace_mb=2))
    assert (r.error, r.stdout) == (None, "ok\n")


def test_the_quota_walk_follows_no_symlink(box: Box, tmp_path: Path) -> None:
    """A link planted in the workspace to a big tree elsewhere is not counted, nor walked."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "big").write_bytes(os.urandom(3_000_000))
    link = f"ln -s {elsewhere} {box.workspace}/link; echo linked"
    r = box.run(link, limits=Limits(workspace_mb=2))
    assert (r.error, r.stdout) == (None, "linked\n")


def run_probe(tmp_path: Path, bwrap: str, path_dirs: list[str]) -> dict[str, object]:
    """sandbox.probe() and one call, in a fresh process (the probe is cached per process)."""
    code = (
        "import json, os, sys; from sandbox import probe, run_shell, ShellPolicy\n"
        f"d = os.path.realpath({str(tmp_path)!r})\n"
        f"p = ShellPolicy(ro_binds=(), rw_binds=(d,), masks=(), cwd=d, bwrap={bwrap!r})\n"
        "r = run_shell('echo ran', p, timeout_sec=30)\n"
        f"reason = probe({bwrap!r}).reason\n"
        "print(json.dumps({'probe': reason, 'out': r.stdout, 'error': r.error}))\n"
    )
    env = {**os.environ, "PATH": os.pathsep.join([*path_dirs, os.environ.get("PATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip

    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_fake_bwrap_first_on_path_is_not_used(tmp_path: Path, not_root: None) -> None:
    fake_dir = tmp_path / "bin"
    fake_dir.mkdir()
    witness = tmp_path / "fake-ran"
    fake = fake_dir / "bwrap"
    fake.write_text(f'#!/bin/sh\ntouch {witness}\nexec "$@"\n')
    fake.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    got = run_probe(work, "/usr/bin/bwrap", [str(fake_dir)])
    assert got == {"probe": "", "out": "ran\n", "error": None}
    assert not witness.exists()


def test_a_bwrap_not_owned_by_root_is_refused(tmp_path: Path, not_root: None) -> None:
    copy = tmp_path / "bwrap"
    shutil.copy2("/usr/bin/bwrap", copy)
    assert copy.stat().st_uid == os.getuid() != 0
    work = tmp_path / "work"
    work.mkdir()
    got = run_probe(work, str(copy), [])
    reason = str(got["probe"])
    assert f"[sandbox].bwrap = '{copy}': refused" in reason
    assert f"owned by uid {os.getuid()}, expected root" in reason
    assert got["out"] == ""
    assert str(got["error"]).startswith("shell tools are disabled on this machine: [sandbox].bwrap")


def test_a_world_writable_binary_is_refused(tmp_path: Path) -> None:
    from sandbox.binaries import BinaryRefused, check_binary

    with pytest.raises(BinaryRefused, match="expected an absolute path"):
        check_binary("bwrap")
    with pytest.raises(BinaryRefused, match="not found"):
        check_binary(str(tmp_path / "missing"))
    assert check_binary("/usr/bin/bwrap") == os.path.realpath("/usr/bin/bwrap")


FAKE_PROBE = """
import json, os, sys
import sandbox, sandbox.host
# An unprivileged test cannot make a root-owned file, so the ownership check is stubbed: what
# is tested is the probe's own check that the sandbox isolates, against a real fake bwrap.
sandbox.host.check_binary = lambda path, key="": path
d = os.path.realpath(sys.argv[2])
policy = sandbox.ShellPolicy(ro_binds=(), rw_binds=(d,), masks=(), cwd=d, bwrap=sys.argv[1])
r = sandbox.run_shell("touch " + sys.argv[3], policy, timeout_sec=30)
print(json.dumps({"probe": sandbox.probe(sys.argv[1]).reason, "error": r.error}))
"""


def test_the_probe_refuses_a_bwrap_that_does_not_isolate(tmp_path: Path, not_root: None) -> None:
    fake = tmp_path / "bwrap"
    # Skips every option and runs the command as is: no namespace, no mount, nothing.
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n')
    fake.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    witness = tmp_path / "ran-unsandboxed"
    done = subprocess.run(
        [sys.executable, "-c", FAKE_PROBE, str(fake), str(work), str(witness)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    got = json.loads(done.stdout)
    assert got["probe"] == (
        f"{fake} does not isolate: a path outside the sandbox, or the host's network, was "
        "visible from inside"
    )
    assert got["error"] == f"shell tools are disabled on this machine: {got['probe']}"
    assert not witness.exists()
