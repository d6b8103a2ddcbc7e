"""The run's cgroup: one cgroup v2 per run where the daemon has a delegated subtree
(supervisor/engine/runcgroup.py), which every sandbox of the run enters before it execs
(sandbox/cgroup.py), so memory.max holds socket buffers and kernel memory too.

What the kernel keeps is tested where the host gives this test a cgroup v2 subtree of its own
with the memory and pids controllers (a user manager's `systemd-run --user -p Delegate=yes`,
or a subtree made for the test user): a socket-buffer hog in a real bwrap is stopped at
max_run_memory_mb. Where it has none (a hybrid host whose memory controller is cgroup v1's,
a container), those tests skip, saying why, and the fallback is tested: the same hog passes
the sampled per-call limit, which is what `doctor` and the card then say.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from sandbox import Limits, cgroup
from sandbox.stdio import start_stdio
from supervisor.engine import runcgroup
from supervisor.engine.runcgroup import CgroupFacts, Enforcement, RunCgroup, decide
from tests.sandbox.sandbox_testkit import Box, python_in_sandbox

MiB = 2**20

# A model's (or a routine author's) hog of kernel memory no process maps: TCP connections over
# the sandbox's own loopback, written to and never read, until `target` MB sit in their
# buffers; then it holds them a moment and says so.
HOG = textwrap.dedent(
    """
    import socket, time
    target = {target} << 20
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(512)
    held, queued = [], 0
    while queued < target and len(held) < 200:
        c = socket.create_connection(srv.getsockname()); s, _ = srv.accept()
        c.setblocking(False); held += [c, s]
        try:
            while queued < target:
                queued += c.send(b"x" * (1 << 20))
        except BlockingIOError:
            pass
    print("queued", queued >> 20, flush=True)
    time.sleep(1)
    print("survived", flush=True)
    """
)


def _queued(stdout: str) -> int:
    for line in stdout.splitlines():
        if line.startswith("queued "):
            return int(line.split()[1])
    return 0


# --- the decision (pure) ---------------------------------------------------------------------


def test_a_writable_subtree_with_memory_and_pids_gets_a_cgroup_per_run() -> None:
    f = CgroupFacts("/sys/fs/cgroup", "/u/d.service", "/sys/fs/cgroup/u/d.service", True,
                    frozenset({"memory", "pids", "cpu"}))  # fmt: skip
    s = decide(f)
    assert s.enforcement is Enforcement.CGROUP
    assert s.root == "/sys/fs/cgroup/u/d.service"
    assert runcgroup.describe(s).startswith("kept by the kernel")


@pytest.mark.parametrize(
    ("f", "why"),
    [
        (CgroupFacts(None, None), "no cgroup v2 hierarchy is mounted"),
        (CgroupFacts("/sys/fs/cgroup", "/"), "not delegated"),
        (CgroupFacts("/sys/fs/cgroup", "/session-1.scope", "/x", False), "not delegated"),
        (
            CgroupFacts("/sys/fs/cgroup", "/s", "/x", True, frozenset({"memory", "pids"}), True),
            "holds other processes",
        ),
        (CgroupFacts("/sys/fs/cgroup/unified", "/u", "/x", True, frozenset()), "no memory or pids"),
        (CgroupFacts("/sys/fs/cgroup", "/u", "/x", True, frozenset({"memory"})), "no pids"),
    ],
)
def test_without_a_delegated_memory_controller_the_limits_are_sampled_and_say_why(
    f: CgroupFacts, why: str
) -> None:
    s = decide(f)
    assert s.enforcement is Enforcement.SAMPLED
    assert s.root == ""
    assert why in s.why
    text = runcgroup.describe(s)
    assert text.startswith("sampled") and "socket buffers is not counted" in text
    assert why in text


def test_the_daemon_and_the_worker_name_the_same_variable() -> None:
    """The daemon imports nothing of sandbox/, so the name is written twice."""
    assert runcgroup.SANDBOX_ENV == cgroup.SANDBOX_ENV


def test_with_no_run_cgroup_a_spawn_joins_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cgroup.SANDBOX_ENV, raising=False)
    joined = cgroup.join(128, 64)
    assert joined.wrap(["/usr/bin/bwrap", "x"]) == ["/usr/bin/bwrap", "x"]
    assert joined.problem() is None


def test_a_run_cgroup_that_cannot_be_written_falls_back_to_sampling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(cgroup.SANDBOX_ENV, "/proc/no-such-cgroup")
    joined = cgroup.join(128, 64)
    assert joined.cgroup is None and joined.wrap(["/usr/bin/bwrap"]) == ["/usr/bin/bwrap"]


# --- the fallback, where this host has no delegated memory controller -------------------------


def test_socket_buffers_pass_the_sampled_limit(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gap the cgroup closes (docs/redteam.md, D), as it stays where there is none: the
    buffers are in no process's memory, so the sampled watchdog lets 200 MB of them sit
    against max_run_memory_mb = 128."""
    monkeypatch.delenv(cgroup.SANDBOX_ENV, raising=False)
    r = box.run(python_in_sandbox(HOG.format(target=200)), limits=Limits(run_memory_mb=128),
                timeout=60)  # fmt: skip
    assert r.error is None, r.error
    assert _queued(r.stdout) >= 200 and "survived" in r.stdout, r.stdout + r.stderr


# --- the kernel's limit, where this host delegates one ---------------------------------------


def _delegation() -> str | None:
    """Why this test process cannot have a run cgroup of its own with memory and pids, or
    None: it can."""
    f = runcgroup.facts()
    if f.own is None or not f.writable:
        return "this test runs in no cgroup v2 subtree it may write"
    missing = [c for c in runcgroup.CONTROLLERS if c not in f.controllers]
    if missing:
        return f"the test's cgroup {f.own} has no {' or '.join(missing)} controller"
    return None


@pytest.fixture
def run_cgroup(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunCgroup]:
    """This process as the daemon: in a cgroup of its own under the delegated one it runs in
    (the daemon leaf's parent), with a run's cgroup whose sandbox part a spawn joins."""
    why = _delegation()
    if why is not None:
        pytest.skip(f"no delegated cgroup v2 with memory and pids here: {why}")
    f = runcgroup.facts()
    own = f"{f.mount}{f.own}"
    mine = f"{own}/t{os.getpid()}"
    os.mkdir(mine)
    with open(f"{mine}/cgroup.procs", "w") as fh:
        fh.write("0")
    try:
        s = runcgroup.prepare()
        assert s.enforcement is Enforcement.CGROUP, s.why
        run = RunCgroup.create(s.root, "test:run")
        monkeypatch.setenv(cgroup.SANDBOX_ENV, run.sandbox)
        yield run
        run.remove()
        assert not os.path.exists(run.path)
    finally:
        with open(f"{own}/cgroup.procs", "w") as fh:
            fh.write("0")
        for d in (f"{mine}/daemon", mine):
            if os.path.isdir(d):
                os.rmdir(d)


def test_socket_buffers_past_the_run_memory_are_stopped_by_the_kernel(
    box: Box, run_cgroup: RunCgroup
) -> None:
    """The same hog, in the run's cgroup: the kernel counts the buffers against
    memory.max = max_run_memory_mb and ends the sandbox (red before the cgroup per run)."""
    r = box.run(python_in_sandbox(HOG.format(target=200)), limits=Limits(run_memory_mb=128),
                timeout=60)  # fmt: skip
    assert "survived" not in r.stdout, r.stdout
    assert r.error == cgroup.kernel_killed(128)


def test_an_mcp_server_holding_socket_buffers_is_stopped_by_the_kernel(
    box: Box, run_cgroup: RunCgroup
) -> None:
    """A server (a stdio child, as worker/mcptools.py starts one) is in the run's cgroup too:
    the same hog ends it, and why is what the worker reports of the dead server."""
    policy = box.policy(limits=Limits(run_memory_mb=128))
    child = start_stdio(["/bin/sh", "-c", python_in_sandbox(HOG.format(target=200))], policy)
    try:
        assert child.wait(60), "the server outlived its run's memory"
        assert child.exit_note() == cgroup.kernel_killed(128)
    finally:
        child.close()


def test_every_process_of_a_sandbox_is_in_the_run_cgroup(box: Box, run_cgroup: RunCgroup) -> None:
    r = box.run("cat /proc/self/cgroup; (cat /proc/self/cgroup) | cat")
    assert r.error is None, r.error
    # The sandbox's own cgroup namespace shows its cgroup as its root.
    assert r.stdout.splitlines() == ["0::/", "0::/"], r.stdout
    with open(f"{run_cgroup.sandbox}/memory.max") as fh:
        assert int(fh.read()) == Limits().run_memory_mb * MiB


def test_the_run_cgroup_goes_with_whatever_is_left_in_it(run_cgroup: RunCgroup) -> None:
    joined = cgroup.join(64, 16)
    sleeper = subprocess.Popen(joined.wrap([sys.executable, "-c", "import time; time.sleep(60)"]))
    run_cgroup.remove()
    assert sleeper.wait(timeout=10) == -9
    assert not os.path.exists(run_cgroup.path)
