"""The workspace quota kept by the kernel: a shell call's writable dirs as overlays whose upper
dirs share one tmpfs of max_workspace_mb (sandbox/overlayholder.py builds them).

The call writes into the tmpfs only; the kernel stops it at the quota (ENOSPC), however many
processes write at once. Once the sandbox is gone, the runner measures what the upper dirs
would make of the real dirs (sandbox/copyback.py) and copies them back only if the result is
within the quota; over it, nothing is copied and the call fails with the quota error.

The tmpfs is as large as the whole quota, not what is left of it: a call may rewrite a file
however large (overlayfs copies a changed file whole into the upper dir) as long as the result
fits. Its pages are charged to the memory cgroup of the process that writes them, and live
until the runner closes its descriptor after the copy back: a call costs at most
max_workspace_mb of memory for what it writes, freed when it ends.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from sandbox.copyback import CopyBackError, Tally, apply, measure
from sandbox.limits import MiB, gb_or_mb
from sandbox.quota import MAX_ENTRIES, Usage

__all__ = ["HOLDER", "Overlays", "Verdict", "overlay_unavailable", "verdict"]

_HERE = os.path.dirname(os.path.abspath(__file__))
HOLDER = os.path.join(_HERE, "overlayholder.py")
INODE_SLACK = 64  # the upper and work dirs themselves
_KEPT = "nothing the call wrote there was kept"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a call's upper dirs may be copied back: None, or why not."""

    problem: str | None


def verdict(
    where: Sequence[str], before: Sequence[Usage], tallies: Sequence[Tally], max_mb: int, full: bool
) -> Verdict:
    """Pure: the quota decision on what the dirs held before and what the call changed."""
    names = " and ".join(where)
    quota = f"max_workspace_mb = {max_mb}"
    # A call that began over the quota may still delete: it must not end above where it began.
    limit = max(max_mb * MiB, sum(u.bytes for u in before))
    most = max(MAX_ENTRIES, sum(u.entries for u in before))
    if full:
        return Verdict(f"the call wrote more than {names} may hold, over {quota}; {_KEPT}")
    total = sum(u.bytes for u in before) + sum(t.added - t.freed for t in tallies)
    entries = sum(u.entries for u in before) + sum(
        t.entries_added - t.entries_removed for t in tallies
    )
    if entries > most:
        return Verdict(f"{names} would hold more than {most:,} files ({quota}); {_KEPT}")
    if total > limit:
        return Verdict(f"{names} would hold {gb_or_mb(total)}, over {quota}; {_KEPT}")
    return Verdict(None)


class Overlays:
    """One call's overlays: the empty dir the tmpfs is mounted on (in the holder's namespace
    only), the socket the tmpfs comes back on, and `shown()`, what bwrap binds."""

    def __init__(self, dirs: Sequence[tuple[str, int]], max_mb: int) -> None:
        self.dirs = tuple(dirs)
        self.size = max_mb * MiB
        self.mnt = tempfile.mkdtemp(prefix="vinos-overlay-")
        self._ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.tmpfs: int | None = None

    def shown(self) -> dict[str, str]:
        """Each dir's path -> the overlay bwrap binds there (in the holder's namespace)."""
        return {path: f"{self.mnt}/m/{i}" for i, (path, _) in enumerate(self.dirs)}

    def argv(self, inner: Sequence[str]) -> list[str]:
        layers = [f"{fd}:{path}" for path, fd in self.dirs]
        return [
            *_holder(self.theirs.fileno(), self.mnt, self.size),
            *layers,
            "--",
            *inner,
        ]

    def pass_fds(self) -> list[int]:
        return [self.theirs.fileno(), *(fd for _, fd in self.dirs)]

    def spawned(self) -> None:
        """The holder has our end's twin: close ours of it, so its end means EOF."""
        self.theirs.close()

    def receive(self) -> int | None:
        """The tmpfs fd the holder sent, once the sandbox is gone (None: it never mounted)."""
        self.theirs.close()
        self._ours.setblocking(False)
        try:
            _, fds, _, _ = socket.recv_fds(self._ours, 1, 1, socket.MSG_CMSG_CLOEXEC)
        except (BlockingIOError, OSError):
            return None
        self.tmpfs = fds[0] if fds else None
        return self.tmpfs

    def copy_back(self, before: Sequence[Usage], max_mb: int) -> str | None:
        """Copy the upper dirs into the real dirs if the result is within the quota; else
        nothing, and why (the text the call fails with). The tmpfs is closed either way."""
        tmpfs = self.receive() if self.tmpfs is None else self.tmpfs
        if tmpfs is None:
            return None  # the holder failed before the call ran: nothing was written
        try:
            vfs = os.statvfs(tmpfs)
            # A write stopped at ENOSPC leaves the tmpfs full; what the call made of its
            # files then is not what it meant, so none of it is kept.
            full = vfs.f_bavail == 0 or vfs.f_favail == 0
            uppers: list[int] = []
            try:
                for i in range(len(self.dirs)):
                    uppers.append(_open_upper(tmpfs, i))
                tallies = [measure(u, fd) for u, (_, fd) in zip(uppers, self.dirs, strict=True)]
                where = [path for path, _ in self.dirs]
                problem = verdict(where, before, tallies, max_mb, full).problem
                if problem is None:
                    for u, (_, fd) in zip(uppers, self.dirs, strict=True):
                        apply(u, fd)
                return problem
            finally:
                for u in uppers:
                    os.close(u)
        except (CopyBackError, OSError) as exc:
            return (
                f"what the call wrote could not be copied back (what was copied before this "
                f"stays): {exc}"
            )
        finally:
            self.close()

    def close(self) -> None:
        if self.tmpfs is not None:
            os.close(self.tmpfs)  # the tmpfs and its memory go with the last fd on it
            self.tmpfs = None
        self._ours.close()
        self.theirs.close()
        with contextlib.suppress(OSError):
            os.rmdir(self.mnt)  # empty out here: the tmpfs was mounted on it only in there


def _holder(send_fd: int, mnt: str, size: int) -> list[str]:
    inodes = MAX_ENTRIES + INODE_SLACK
    return [sys.executable, "-I", "-S", HOLDER, str(send_fd), mnt, str(size), str(inodes)]


def _open_upper(tmpfs: int, i: int) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    u = os.open("u", flags, dir_fd=tmpfs)
    try:
        return os.open(str(i), flags, dir_fd=u)
    finally:
        os.close(u)


_available: dict[str, str | None] = {}


def overlay_unavailable() -> str | None:
    """Why the overlays cannot be built here (cached per interpreter), or None: they can.

    Runs the holder once with no dirs: it mounts a tmpfs and an overlay with a lower dir in it,
    and removes and remakes a folder there (Linux >= 6.6 for user xattrs on tmpfs).
    """
    if sys.executable in _available:
        return _available[sys.executable]
    mnt = tempfile.mkdtemp(prefix="vinos-overlay-probe-")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        argv = [*_holder(theirs.fileno(), mnt, MiB), "--", "/bin/true"]
        done = subprocess.run(
            argv,
            pass_fds=[theirs.fileno()],
            capture_output=True,
            env={},
            timeout=30,
            check=False,
        )
        reason = None
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = str(exc)
    finally:
        ours.close()
        theirs.close()
        os.rmdir(mnt)
    _available[sys.executable] = reason
    return reason
