"""The worker's side of the run's cgroup (supervisor/engine/runcgroup.py makes it): each bwrap the
worker starts enters the run's sandbox cgroup between fork and exec, so the kernel holds every
sandboxed process of the run (shell calls, actions, MCP servers, a command routine's command)
to memory.max = max_run_memory_mb and pids.max = max_processes together, socket buffers and
kernel memory included. With no such cgroup (SANDBOX_ENV unset), the per-call sampled limits
of sandbox/limits.py are all there is.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable

__all__ = ["SANDBOX_ENV", "Joined", "join", "kernel_killed", "oom_kills"]

SANDBOX_ENV = "VINOS_SANDBOX_CGROUP"  # set by the daemon (supervisor/engine/runcgroup.py)


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
    """The run's sandbox cgroup for one spawn: `enter` is the child's preexec_fn (None when
    the run has no cgroup), `killed()` after the call, `close()` once spawned."""

    def __init__(self, cgroup: str | None = None, memory_mb: int = 0, processes: int = 0) -> None:
        self.cgroup = cgroup
        self.memory_mb = memory_mb
        self.enter: Callable[[], object] | None = None
        self._fd = -1
        self.oom_before = 0
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
        self._fd = os.open(f"{cgroup}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        # Run in the child between fork and exec, where another thread of the worker may have
        # held a lock at the fork: one write(2) of "0" (the calling process) through C code
        # alone, no Python frame and no allocation.
        self.enter = functools.partial(os.write, self._fd, b"0")

    def killed(self) -> bool:
        """Whether the kernel killed a process of the run's sandboxes since this spawn."""
        return self.cgroup is not None and oom_kills(self.cgroup) > self.oom_before

    def problem(self) -> str | None:
        """The error of a spawn the kernel ended at the run's memory.max, or None."""
        return kernel_killed(self.memory_mb) if self.killed() else None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


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
