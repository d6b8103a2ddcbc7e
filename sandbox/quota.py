"""The disk quota of a shell call: what its writable dirs (the workspace and the run's scratch
dir, together) may hold, `[sandbox].max_workspace_mb`.

Kept three ways, because a check after the call alone lets one call write the disk full:
- before the call, the dirs are measured and RLIMIT_FSIZE is set to what is left, rounded up
  to the next MB (the prelude's `ulimit -f` counts whole MB here): a file stopped by it has
  always taken the dirs over the quota, by at most 1 MB, so the checks below report it;
- during the call, a poll measures again (every QUOTA_SAMPLE_SEC, or less often when a walk
  is slow, so the poll never takes more than a quarter of a core) and kills the sandbox once the
  dirs hold more than the quota, or more than they held at the start when the call began over
  it (a call over the quota must still be able to delete files);
- after the call, over the quota fails the call with a tool error naming where and how much.

The walk is by descriptor, follows no symlink and crosses no mount, summing allocated blocks
(a sparse file counts what it uses). During the call the poll also counts files the sandbox
holds open after unlinking them (or made with O_TMPFILE): no walk finds them, and without
them many processes could each fill a file up to RLIMIT_FSIZE. They are found through
/proc/PID/fd of the call's processes (fstat of what the fd holds, on the quota dirs'
filesystems, with no link left); they vanish with the processes, so the check after the
call has nothing of them to count. Not found: a deleted file only mapped, its fd closed
(stat through /proc/PID/map_files needs CAP_SYS_ADMIN); each stays under RLIMIT_FSIZE.

A folder the sandbox made unreadable (chmod 000, or r without x) is counted all the same: we
are its owner, so its mode gets u+rwx back, through an O_PATH fd opened with O_NOFOLLOW on
that very folder (chmod of /proc/self/fd/N acts on the inode the fd holds), never through a
path a sandbox could swap for a link in between.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sandbox.limits import MiB, gb_or_mb, tree_pids

__all__ = [
    "MAX_ENTRIES",
    "QUOTA_SAMPLE_SEC",
    "QuotaWatch",
    "Usage",
    "open_dir_restoring",
    "usage",
]

MAX_ENTRIES = 200_000  # a walk this long is itself over any sensible quota
QUOTA_SAMPLE_SEC = 0.25
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_PATH = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OWNER = stat.S_IRWXU


@dataclass(frozen=True, slots=True)
class Usage:
    bytes: int  # allocated blocks, as du counts them
    entries: int  # files, dirs, links … (at most MAX_ENTRIES + 1)
    unreadable: int = 0  # folders that could not be opened even by their owner


def open_dir_restoring(name: str, dir_fd: int | None = None) -> int:
    """A readable dir fd on `name` (relative to `dir_fd`), never following a link in its
    place, and with its owner's rwx given back first when a sandbox took them away.

    Raises OSError: ELOOP/ENOTDIR for a link or a file there, EPERM when it is not ours.
    """
    path_fd = os.open(name, _PATH, dir_fd=dir_fd)
    try:
        mode = os.fstat(path_fd).st_mode
        if stat.S_IMODE(mode) & _OWNER != _OWNER:
            # The magic link resolves to exactly the inode path_fd holds: no lookup by name.
            try:
                os.chmod(f"/proc/self/fd/{path_fd}", stat.S_IMODE(mode) | _OWNER)
            except OSError as exc:
                raise OSError(exc.errno, f"{exc.strerror}: chmod u+rwx of {name!r}") from exc
        return os.open(f"/proc/self/fd/{path_fd}", _DIR)
    finally:
        os.close(path_fd)


def usage(dir_fd: int) -> Usage:
    """What the tree under `dir_fd` holds; follows no symlink and stays on its filesystem.

    Depth first, holding one descriptor per level (the folders still to visit are names):
    a descriptor per pending folder ran a wide folder (more subfolders than the process may
    open files) out of them, and the folders past that went uncounted
    (tests/sandbox/test_redteam_quota.py). A tree deeper than MAX_DEPTH counts the folders
    below as unreadable.
    """
    top = os.fstat(dir_fd)
    if stat.S_IMODE(top.st_mode) & _OWNER != _OWNER:
        os.fchmod(dir_fd, stat.S_IMODE(top.st_mode) | _OWNER)  # lookups below need its x
    walk = _Walk(top.st_dev)
    frames: list[tuple[int, list[str]]] = []
    try:
        fd = os.dup(dir_fd)
        frames.append((fd, walk.scan(fd)))
        while frames and walk.entries <= MAX_ENTRIES:
            fd, pending = frames[-1]
            if not pending:
                frames.pop()
                os.close(fd)
                continue
            name = pending.pop()
            if len(frames) >= MAX_DEPTH:
                walk.unreadable += 1
                continue
            try:
                child = open_dir_restoring(name, fd)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    walk.unreadable += 1  # not even its owner can open it
                continue
            frames.append((child, []))  # held before the scan: `finally` closes it if that fails
            frames[-1] = (child, walk.scan(child))
    finally:
        for fd, _ in frames:
            os.close(fd)
    return Usage(walk.total, walk.entries, walk.unreadable)


MAX_DEPTH = 512  # folders deep: one descriptor each while the walk is below them


class _Walk:
    """What one `usage` walk has counted so far."""

    def __init__(self, dev: int) -> None:
        self.dev = dev
        self.total = self.entries = self.unreadable = 0

    def scan(self, fd: int) -> list[str]:
        """Count the entries of the folder `fd`; the names of its folders to visit next."""
        folders: list[str] = []
        with os.scandir(fd) as it:
            for entry in it:
                self.entries += 1
                if self.entries > MAX_ENTRIES:
                    break
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed while we walked (a poll during the call)
                except OSError:
                    self.unreadable += 1  # its folder's mode changed under the walk
                    continue
                self.total += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode) and st.st_dev == self.dev:
                    folders.append(entry.name)
        return folders


class QuotaWatch:
    """The quota of one call over `dirs` [(path, dir fd)], together; the caller owns the fds.

    `start()` before the call (what is left, for RLIMIT_FSIZE), `sample(now)` during it,
    `problem()` after it. Held by tests/sandbox/test_run_quota.py.
    """

    def __init__(self, dirs: Sequence[tuple[str, int]], max_mb: int) -> None:
        self.dirs = tuple(dirs)
        self.max_mb = max_mb
        self.root: int | None = None  # the sandbox's pid-1 on the host, once bwrap says it
        self.due = 0.0
        self.killed: str | None = None
        self._limit = max_mb * MiB  # what the poll allows: the quota, or the start if over
        self._entries = MAX_ENTRIES  # likewise for the number of entries
        self.before: list[Usage] = []  # what each dir held at start()

    def measure(self) -> list[tuple[str, Usage]]:
        return [(path, usage(fd)) for path, fd in self.dirs]

    def start(self, now: float) -> int:
        """Measure before the call; the RLIMIT_FSIZE to set, in whole MB (at least 1).

        left // MiB + 1 is more than what is left and at most 1 MB more: reaching it takes
        the dirs over the quota, which the poll and the check after the call report.
        """
        measured = self.measure()
        self.before = [u for _, u in measured]
        used = _total(measured)
        self._limit = max(self.max_mb * MiB, used)
        self._entries = max(MAX_ENTRIES, sum(u.entries for _, u in measured))
        self.due = now + QUOTA_SAMPLE_SEC
        return max(0, self.max_mb * MiB - used) // MiB + 1

    def sample(self, now: float) -> bool:
        """Measure during the call; True once over and the sandbox has been killed."""
        if self.killed is not None:
            return True
        if not self.dirs:
            self.due = float("inf")  # no quota dirs: nothing to poll
            return False
        began = time.monotonic()
        measured = self.measure()
        if self.root is not None:
            held = _unlinked_bytes(self.root, {os.fstat(fd).st_dev for _, fd in self.dirs})
            if held:
                measured.append(("files deleted but held open", Usage(held, 0)))
        walk = time.monotonic() - began
        self.due = now + max(QUOTA_SAMPLE_SEC, 4 * walk)
        entries = sum(u.entries for _, u in measured)
        if self.root is None or (_total(measured) <= self._limit and entries <= self._entries):
            return False
        over = _over(measured, self.max_mb)
        if over is None:  # cannot be: both limits are at least the quota's
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.root, signal.SIGKILL)  # pid-1 of the namespace: all of it ends
        self.killed = f"stopped during the call: {over}"
        return True

    def problem(self) -> str | None:
        """After the call: why the dirs are over the quota (or cannot be counted), or None."""
        measured = self.measure()
        for path, used in measured:
            if used.unreadable:
                return (
                    f"{path} holds {used.unreadable} folder(s) that cannot be opened to count "
                    f"them against max_workspace_mb = {self.max_mb}; delete them"
                )
        return _over(measured, self.max_mb)


def _unlinked_bytes(root: int, devs: set[int]) -> int:
    """Blocks of regular files on `devs` that the processes under `root` hold open with no
    name left (each file once, however many fds hold it)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for pid in tree_pids(root):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # exited meanwhile
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")  # what the fd holds, not a path lookup
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if st.st_nlink or st.st_dev not in devs or not stat.S_ISREG(st.st_mode) or key in seen:
                continue
            seen.add(key)
            total += st.st_blocks * 512
    return total


def _total(measured: list[tuple[str, Usage]]) -> int:
    return sum(u.bytes for _, u in measured)


def _over(measured: list[tuple[str, Usage]], max_mb: int) -> str | None:
    if not measured:
        return None  # no quota dirs: nothing to hold
    names = [path for path, _ in measured]
    where = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    plural = len(measured) > 1
    if sum(u.entries for _, u in measured) > MAX_ENTRIES:
        return (
            f"{where} hold{'' if plural else 's'} more than {MAX_ENTRIES:,} files; delete some "
            f"(max_workspace_mb = {max_mb})"
        )
    total = _total(measured)
    if total <= max_mb * MiB:
        return None
    if not plural:
        return (
            f"{where} holds {gb_or_mb(total)}, over max_workspace_mb = {max_mb}; delete files there"
        )
    each = ", ".join(f"{path}: {gb_or_mb(u.bytes)}" for path, u in measured)
    return (
        f"{where} hold {gb_or_mb(total)} together, over max_workspace_mb = {max_mb} ({each}); "
        "delete files there"
    )
