"""Limits over a whole shell call rather than one process: memory together (the disk quota is
sandbox/quota.py).

Memory. RLIMIT_AS is per process: five processes of 1.8 GB each pass a 2 GB limit. A cgroup
v2 memory.max is the exact tool, but an unprivileged user gets one only from a user manager
that delegates a subtree (`systemd-run --user --scope -p MemoryMax=`), which neither this
project's CI nor many desktops started from a display manager without lingering offer, and a
scope's failure modes need a D-Bus session the worker does not have. So a watchdog, trusted
and outside the sandbox, samples the call's process tree (every process under the sandbox's
pid-1, which is every process of its pid namespace: an orphan is re-parented to that pid-1)
and sums their proportional set size (PSS: shared pages divided among the processes sharing
them, so 20 forks of one bash do not count its libraries 20 times). Over the cap, it kills
the sandbox's pid-1 with SIGKILL, which ends the whole namespace. A watchdog samples, so
memory can overshoot between two samples (SAMPLE_SEC); RLIMIT_AS per process bounds how far.

Memory no process maps is in nobody's PSS, so the watchdog cannot see it; each kind is either
impossible or sized by the kernel out of the same budget:
- memfd_create, memfd_secret and SysV shared memory (shmget/shmat/shmctl) are refused by
  seccomp (sandbox/seccomp.py); POSIX shared memory needs /dev/shm, which the sandbox's /dev
  does not have;
- /tmp is the one writable tmpfs. Its size is taken out of the budget: /tmp gets
  tmp_mb() = min(tmp_size_mb, run_memory_mb / 4) and the watchdog's cap for the processes is
  process_memory_mb() = run_memory_mb - tmp_mb(). So processes (sampled) + /tmp (kept by the
  kernel's tmpfs size) <= run_memory_mb. A file in /tmp that a process also maps is counted
  twice (its pages are in the PSS too): an overcount, never an undercount. With the defaults
  (2048 MB, tmp_size_mb = 64): /tmp 64 MB, processes 1984 MB.
What stays outside the count is kernel memory a call holds for its processes: pipe and socket
buffers, bounded by open_files and processes (a cgroup would count them).
"""

from __future__ import annotations

import contextlib
import os
import signal

from sandbox.policy import Limits

__all__ = ["SAMPLE_SEC", "MemoryWatch", "gb_or_mb", "process_memory_mb", "tmp_mb", "tree_memory"]

SAMPLE_SEC = 0.05
MiB = 2**20


def tmp_mb(limits: Limits) -> int:
    """The size of the sandbox's /tmp: tmp_size_mb, but never more than a quarter of the run's
    memory budget (and at least 1 MB: a tmpfs of size 0 would be unbounded)."""
    return max(1, min(limits.tmp_size_mb, limits.run_memory_mb // 4))


def process_memory_mb(limits: Limits) -> int:
    """What the budget leaves the processes beside /tmp: the watchdog's cap."""
    return max(0, limits.run_memory_mb - tmp_mb(limits))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None  # the process has just exited, or is not ours to read


def tree_pids(root: int) -> list[int]:
    """`root` and every descendant, via /proc/PID/task/TID/children."""
    seen: list[int] = []
    todo = [root]
    while todo and len(seen) < 100_000:
        pid = todo.pop()
        seen.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            text = _read(f"/proc/{pid}/task/{tid}/children")
            if text:
                todo.extend(int(c) for c in text.split())
    return seen


def _pss_kb(pid: int) -> int:
    text = _read(f"/proc/{pid}/smaps_rollup")
    if text is not None:
        for line in text.splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    statm = _read(f"/proc/{pid}/statm")  # no smaps_rollup (kernel < 4.14): RSS instead
    if statm:
        return int(statm.split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    return 0


def tree_memory(root: int) -> int:
    """Bytes of memory (PSS) used by `root` and all its descendants together."""
    return sum(_pss_kb(pid) for pid in tree_pids(root)) * 1024


def gb_or_mb(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


class MemoryWatch:
    """Sample one sandbox's process tree; kill its pid-1 once the sum passes the processes'
    share of the budget (process_memory_mb). Held by test_run_limits.py and
    test_escape_memory.py."""

    def __init__(self, limits: Limits) -> None:
        self.budget_mb = limits.run_memory_mb
        self.tmp_mb = tmp_mb(limits)
        self.cap_mb = process_memory_mb(limits)
        self.root: int | None = None  # the sandbox's pid-1 on the host, once bwrap says it
        self.due = 0.0  # monotonic time of the next sample
        self.peak = 0
        self.killed: str | None = None  # why, for the tool result

    def sample(self, now: float) -> bool:
        """Measure once; True when the tree was over the cap and has been killed."""
        self.due = now + SAMPLE_SEC
        if self.root is None or self.killed is not None:
            return self.killed is not None
        used = tree_memory(self.root)
        self.peak = max(self.peak, used)
        if used <= self.cap_mb * MiB:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.root, signal.SIGKILL)  # pid-1 of the namespace: all of it ends
        self.killed = (
            f"killed: the command's processes used {gb_or_mb(used)} together, over the "
            f"{self.cap_mb} MB that max_run_memory_mb = {self.budget_mb} leaves beside "
            f"/tmp's {self.tmp_mb} MB"
        )
        return True
