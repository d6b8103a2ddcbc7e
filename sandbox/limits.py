"""Limits over a whole shell call rather than one process: memory together, and a disk quota.

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

Disk. The persistent dirs a call can write are walked after it, by descriptor, following no
symlink and crossing no mount, summing allocated blocks (a sparse file counts what it uses).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from dataclasses import dataclass

__all__ = ["SAMPLE_SEC", "MemoryWatch", "Usage", "quota_problem", "tree_memory", "usage"]

SAMPLE_SEC = 0.05
MAX_ENTRIES = 200_000  # a walk this long is itself over any sensible quota


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


def _gb_or_mb(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


class MemoryWatch:
    """Sample one sandbox's process tree; kill its pid-1 once the sum passes the cap."""

    def __init__(self, cap_mb: int) -> None:
        self.cap_mb = cap_mb
        self.root: int | None = None  # the sandbox's pid-1 on the host, once bwrap says it
        self.peak = 0
        self.killed: str | None = None  # why, for the tool result

    def sample(self) -> bool:
        """Measure once; True when the tree was over the cap and has been killed."""
        if self.root is None or self.killed is not None:
            return self.killed is not None
        used = tree_memory(self.root)
        self.peak = max(self.peak, used)
        if used <= self.cap_mb * 2**20:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.root, signal.SIGKILL)  # pid-1 of the namespace: all of it ends
        self.killed = (
            f"killed: the command's processes used {_gb_or_mb(used)} together, over "
            f"max_run_memory_mb = {self.cap_mb}"
        )
        return True


@dataclass(frozen=True, slots=True)
class Usage:
    bytes: int  # allocated blocks, as du counts them
    entries: int  # files, dirs, links … (at most MAX_ENTRIES + 1)


def usage(dir_fd: int) -> Usage:
    """What the tree under `dir_fd` holds; follows no symlink and stays on its filesystem."""
    total = entries = 0
    dev = os.fstat(dir_fd).st_dev
    stack = [os.dup(dir_fd)]
    try:
        while stack:
            fd = stack.pop()
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        entries += 1
                        if entries > MAX_ENTRIES:
                            return Usage(total, entries)
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        total += st.st_blocks * 512
                        if stat.S_ISDIR(st.st_mode) and st.st_dev == dev:
                            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                            with contextlib.suppress(OSError):
                                stack.append(os.open(entry.name, flags, dir_fd=fd))
            finally:
                os.close(fd)
    finally:
        for fd in stack:
            os.close(fd)
    return Usage(total, entries)


def quota_problem(path: str, max_mb: int) -> str | None:
    """Why the dir at `path` is over `[sandbox].max_workspace_mb`, or None.

    Opened with O_NOFOLLOW: a sandbox that swapped the dir for a symlink is refused, not
    followed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return f"the workspace {path} cannot be checked: {exc.strerror}"
    try:
        used = usage(fd)
    finally:
        os.close(fd)
    if used.entries > MAX_ENTRIES:
        return (
            f"the workspace {path} holds more than {MAX_ENTRIES:,} files; delete some "
            f"(max_workspace_mb = {max_mb})"
        )
    if used.bytes > max_mb * 2**20:
        return (
            f"the workspace {path} holds {_gb_or_mb(used.bytes)}, over max_workspace_mb = "
            f"{max_mb}; delete files there"
        )
    return None
