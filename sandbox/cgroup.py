"""The worker's side of the run's cgroup (supervisor/engine/runcgroup.py makes it): each bwrap the
worker starts enters the run's sandbox cgroup before it execs (`Joined.wrap`), so the kernel
holds every sandboxed process of the run (shell calls, actions, MCP servers, a command
routine's command) to memory.max = max_run_memory_mb and pids.max = max_processes together,
socket buffers and kernel memory included. With no such cgroup (SANDBOX_ENV unset), the
per-call sampled limits of sandbox/limits.py are all there is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from sandbox.binaries import BinaryRefused, check_binary

__all__ = ["SANDBOX_ENV", "SH", "Joined", "join", "kernel_killed", "oom_kills"]

SANDBOX_ENV = "VINOS_SANDBOX_CGROUP"  # set by the daemon (supervisor/engine/runcgroup.py)
SH = "/bin/sh"


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def oom_kills(cgroup: str) -> int:
    """How many processes the kernel has killed in `cgroup` at its memory.max."""
    for line in _read(f"{cgroup}/memory.events").splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


class Joined:
    """The run's sandbox cgroup, limited, for one spawn: `wrap(argv)` has the spawned process
    enter it before it execs argv (argv itself when the run has no cgroup); `problem()`
    after the call."""

    def __init__(self, cgroup: str | None = None, memory_mb: int = 0, processes: int = 0) -> None:
        self.cgroup = cgroup
        self.memory_mb = memory_mb
        self.oom_before = 0
        self._sh = ""
        if cgroup is None:
            return
        # The worker sets the limits (it has the run's Limits); the sandbox never sees
        # /sys/fs/cgroup, so nothing inside can change them.
        _write(f"{cgroup}/memory.max", str(memory_mb * 2**20))
        _write(f"{cgroup}/pids.max", str(processes))
        for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
            with contextlib.suppress(FileNotFoundError):
                _write(f"{cgroup}/{name}", value)  # no swap accounting: memory.max holds RAM
        self.oom_before = oom_kills(cgroup)
        try:
            self._sh = check_binary(SH, "sh")
        except BinaryRefused as exc:
            raise OSError(str(exc)) from exc

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """`argv`, entering the run's cgroup first. A shell that writes "0" (itself) to
        cgroup.procs and execs argv: a preexec_fn would do the same in the forked child, but
        it makes subprocess fork() the worker instead of vfork(), 15 to 30 times slower for a
        worker's size (about 30 ms a call). A failed write ends it before argv runs."""
        if self.cgroup is None:
            return list(argv)
        procs = f"{self.cgroup}/cgroup.procs"
        return [self._sh, "-c", 'echo 0 >"$0" && exec "$@"', procs, *argv]

    def killed(self) -> bool:
        """Whether the kernel killed a process of the run's sandboxes since this spawn."""
        return self.cgroup is not None and oom_kills(self.cgroup) > self.oom_before

    def problem(self) -> str | None:
        """The error of a spawn the kernel ended at the run's memory.max, or None."""
        return kernel_killed(self.memory_mb) if self.killed() else None


def kernel_killed(memory_mb: int) -> str:
    """What a call or a server the kernel ended at the run's memory.max fails with."""
    return (
        "killed by the kernel: the run's sandboxed processes together passed "
        f"max_run_memory_mb = {memory_mb} (the run's cgroup counts socket buffers and kernel "
        "memory too)"
    )


def join(memory_mb: int, processes: int) -> Joined:
    """The run's sandbox cgroup for one spawn, when the daemon gave the worker one; an empty
    Joined (sampled limits only) when not, or when it cannot be written. Never raises."""
    cgroup = os.environ.get(SANDBOX_ENV)
    if cgroup:
        with contextlib.suppress(OSError):
            return Joined(cgroup, memory_mb, processes)
    return Joined()
