"""The workspace quota kept by the kernel: a shell call's writable dirs as overlays whose upper
dirs share one tmpfs of max_workspace_mb (sandbox/overlayholder.py builds them).

The overlays are built by the overlay maker (sandbox/overlayholder.py, one small process per
runner process, started at its first overlaid call) in a user and mount namespace of their own,
which bwrap joins: it is started under nsenter (`Overlays.argv`).

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

import atexit
import contextlib
import os
import selectors
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from sandbox import hostcache
from sandbox.binaries import BinaryRefused, check_binary
from sandbox.copyback import CopyBackError, Guard, Tally, apply, measure
from sandbox.limits import MiB, gb_or_mb
from sandbox.quota import MAX_ENTRIES, Usage

__all__ = [
    "HOLDER",
    "OverlayError",
    "Overlays",
    "SharedMaker",
    "Verdict",
    "make_overlays_in_process",
    "overlay_unavailable",
    "quota_in_force",
    "share_maker",
    "verdict",
]

_HERE = os.path.dirname(os.path.abspath(__file__))
HOLDER = os.path.join(_HERE, "overlayholder.py")
INODE_SLACK = 64  # the upper and work dirs themselves
_KEPT = "nothing the call wrote there was kept"
_REPLY_SEC = 30.0  # the maker's child building one call's overlays
NSENTER = "/usr/bin/nsenter"  # util-linux: joins the namespaces, then execs what follows


class OverlayError(Exception):
    """The overlays could not be built (the text says why): nothing ran."""


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


_NO_NAMES = Guard()


class Overlays:
    """One call's overlays: the empty dir the tmpfs is mounted on (in the overlays' namespace
    only), the tmpfs and the namespaces the maker sent back, and `shown()`, what bwrap binds.

    `kept` are the person's write folders, after the quota dirs and outside the quota: copied
    back through `guard` (sandbox/copyback.py), which keeps out dot-names, credential names
    and repositories; what it kept out is `refused` once copy_back has run. They share the
    call's tmpfs, so a call writes at most max_workspace_mb in all its dirs together."""

    def __init__(
        self,
        dirs: Sequence[tuple[str, int]],
        max_mb: int,
        kept: Sequence[tuple[str, int]] = (),
        guard: Guard = _NO_NAMES,
    ) -> None:
        self.dirs = (*dirs, *kept)
        self.quota = len(dirs)  # the first ones are the quota's
        self.guard = guard
        self.refused: list[str] = []
        self.size = max_mb * MiB
        self.mnt = _maker.mount_dir()
        self.tmpfs: int | None = None
        # The maker's child that holds the namespaces until this socket is closed, its pid.
        self._holder: tuple[socket.socket, int] | None = None
        self._nsenter = NSENTER

    def shown(self) -> dict[str, str]:
        """Each dir's path -> the overlay bwrap binds there (in the overlays' namespace)."""
        return {path: f"{self.mnt}/m/{i}" for i, (path, _) in enumerate(self.dirs)}

    def build(self) -> None:
        """Have the maker build them. Raises OverlayError."""
        self._nsenter = check_binary(NSENTER, "nsenter")  # BinaryRefused: a ValueError
        paths = [path for path, _ in self.dirs]
        self.tmpfs, self._holder = _make(self.mnt, self.size, paths, [fd for _, fd in self.dirs])

    def argv(self, inner: Sequence[str]) -> list[str]:
        """`inner` run in the overlays' user and mount namespaces. nsenter is passed no fd
        (it opens the holding child's /proc/PID/ns files, alive until close()), so nothing of
        the namespaces reaches bwrap; --preserve-credentials: our own uid, no setuid(0)."""
        assert self._holder is not None
        ns = f"/proc/{self._holder[1]}/ns"
        return [
            self._nsenter,
            f"--user={ns}/user",
            f"--mount={ns}/mnt",
            "--preserve-credentials",
            "--",
            *inner,
        ]

    def copy_back(self, before: Sequence[Usage], max_mb: int) -> str | None:
        """Copy the upper dirs into the real dirs if the result is within the quota; else
        nothing, and why (the text the call fails with). The tmpfs is closed either way."""
        try:
            return self._judged(before, max_mb, apply_too=True)
        except (CopyBackError, OSError) as exc:
            return (
                f"what the call wrote could not be copied back (what was copied before this "
                f"stays): {exc}"
            )
        finally:
            self.close()

    def check(self, before: Sequence[Usage], max_mb: int) -> str | None:
        """Why what the upper dirs hold now could not be copied back (the quota's verdict), or
        None; copies nothing. For a writer that lives on (an MCP server, after each call):
        its writes may go on meanwhile, so only the copy back, once it is gone, decides (a walk
        that trips on a file it is changing is no verdict either)."""
        try:
            return self._judged(before, max_mb, apply_too=False)
        except (CopyBackError, OSError):
            return None

    def _judged(self, before: Sequence[Usage], max_mb: int, *, apply_too: bool) -> str | None:
        """The verdict on the upper dirs, and the copy back when `apply_too` and within it.
        Raises CopyBackError, OSError."""
        tmpfs = self.tmpfs
        if tmpfs is None:
            return None  # never built: nothing was written
        vfs = os.statvfs(tmpfs)
        # A write stopped at ENOSPC leaves the tmpfs full; what the call made of its files
        # then is not what it meant, so none of it is kept.
        full = vfs.f_bavail == 0 or vfs.f_favail == 0
        uppers: list[int] = []
        try:
            for i in range(len(self.dirs)):
                uppers.append(_open_upper(tmpfs, i))
            quota = self.dirs[: self.quota]
            tallies = [measure(u, fd) for u, (_, fd) in zip(uppers, quota, strict=False)]
            where = [path for path, _ in quota]
            problem = verdict(where, before, tallies, max_mb, full).problem
            if problem is None and apply_too:
                for i, (u, (path, fd)) in enumerate(zip(uppers, self.dirs, strict=True)):
                    guard = self.guard if i >= self.quota else None
                    done = apply(u, fd, guard)
                    self.refused += [f"{path}/{line}" for line in done.refused]
            return problem
        finally:
            for u in uppers:
                os.close(u)

    def close(self) -> None:
        # The tmpfs and its memory go with the last fd on it and the end of its namespace.
        if self.tmpfs is not None:
            os.close(self.tmpfs)
            self.tmpfs = None
        if self._holder is not None:
            sock, pid = self._holder
            self._holder = None
            _close_and_await(sock, pid)


class _Maker:
    """This process's overlay maker: started at the first overlaid call, again if it died
    or this process is a fork of the one that started it, unless that one shared it
    (share_maker: the forkserver's, for the runs it forks)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # send() starts the maker, which takes mount_dir()
        self.pid = 0  # the process that started it
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: socket.socket | None = None
        self.mnt = ""
        self.mnt_pid = 0
        self.in_process = False  # make_overlays_in_process()
        self.shared = False  # share_maker(): forks of its starter use it too

    def mount_dir(self) -> str:
        """The empty dir every call's tmpfs is mounted on, each only in its own namespace, so
        calls at once do not meet: made once per process (removing one per call cost about a
        ms, bench_sandbox), again if it went, removed at exit. A fork of a process that
        shared its maker uses that process's dir: the mounts are no more visible to each other
        across processes than within one."""
        with self.lock:
            if (self.mnt_pid != os.getpid() and not self.shared) or not _our_dir(self.mnt):
                self.mnt = tempfile.mkdtemp(prefix="vinos-overlay-")
                self.mnt_pid = os.getpid()
                atexit.register(_remove_dir, self.mnt, self.mnt_pid)
            return self.mnt

    def send(self, msg: bytes, fds: list[int]) -> None:
        with self.lock:
            if self.in_process:
                _fork_child(msg, fds)
                return
            for attempt in (1, 2):
                if self.channel is None or (self.pid != os.getpid() and not self.shared):
                    self._start()
                assert self.channel is not None
                try:
                    socket.send_fds(self.channel, [msg], fds)
                    return
                except OSError:
                    if attempt == 2:
                        raise
                    self.channel.close()
                    self.channel = None  # it died: start another

    def _start(self) -> None:
        if self.proc is not None and self.pid == os.getpid():
            with contextlib.suppress(OSError):
                self.proc.kill()
            self.proc.wait()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # Empty environment, nothing of ours but its socket: it holds no secret.
            argv = [sys.executable, "-I", "-S", HOLDER, str(theirs.fileno()), self.mount_dir()]
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, pass_fds=[theirs.fileno()], env={}
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        # A fork whose shared maker died starts its own, for itself alone.
        self.channel, self.pid, self.shared = ours, os.getpid(), False


_maker = _Maker()


@dataclass(frozen=True, slots=True)
class SharedMaker:
    """The shared maker's channel (the fd a fork keeps) and its pid (the starter reaps it)."""

    fd: int
    pid: int


def share_maker() -> SharedMaker | None:
    """Start this process's overlay maker now, for every process it forks to use: the
    forkserver's, before its first fork. A forked run then asks it for its first call's
    overlays instead of starting a maker of its own (an interpreter's start, about 8 ms on
    the way from a due slot to its command). Returns its channel's fd, which a fork keeps
    open (worker/forkserver.py), and its pid; None where this host builds no overlays.

    Safe to share: the maker holds no secret (an empty environment, nothing of ours but this
    socket), answers each request in a child of its own with a namespace of its own built on
    the dirs the request sends, and anything that can send on the socket is a process of
    ours (a socketpair, close-on-exec: no sandbox, MCP server or action inherits it). A
    request builds overlays, which any process of the user could build itself; one run's
    request cannot reach another's namespace or tmpfs
    (tests/supervisor/test_forkserver.py::test_forked_runs_share_the_forkservers_overlay_maker).
    """
    if overlay_unavailable() is not None:
        return None
    with _maker.lock:
        if _maker.channel is None or _maker.pid != os.getpid():
            _maker._start()
        assert _maker.channel is not None and _maker.proc is not None
        _maker.mount_dir()
        _maker.shared = True
        return SharedMaker(_maker.channel.fileno(), _maker.proc.pid)


def make_overlays_in_process() -> None:
    """Build each call's overlays in a fork of this process, not in the maker's child.

    For a short-lived, single-threaded process that holds no secret and is dumpable (its
    fork may then write the new namespace's uid_map): `vinos-routine sandbox`
    (worker/sandboxcli.py), whose maker would be a second interpreter started for one call.
    The fork never execs; it closes every fd but the request's and does what the maker's
    child does (sandbox/overlayholder.py `answer_forked`). The worker never calls this: it is
    not dumpable (it holds the API key) and runs threads."""
    _maker.in_process = True


def _fork_child(msg: bytes, fds: list[int]) -> None:
    from sandbox import overlayholder  # stdlib only; its import costs nothing elsewhere

    if os.fork() == 0:
        overlayholder.answer_forked(msg, fds)  # never returns


def _close_and_await(sock: socket.socket, pid: int) -> None:
    """Close the holding child's socket and return once it has exited (with it its
    namespaces, its mounts and the tmpfs' memory): nothing of a call outlives it
    (tests/sandbox/conftest.py's no_leftovers)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # gone already, or no pidfd (kernel < 5.3): nothing to wait on
        sock.close()
        return
    try:
        sock.close()  # EOF: the child exits
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            sel.select(_REPLY_SEC)
        # Forked here (make_overlays_in_process): ours to reap. A maker's child is not.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    finally:
        os.close(fd)


def _our_dir(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def _remove_dir(path: str, pid: int) -> None:
    if os.getpid() == pid:  # not a fork's: the process that made it may still use it
        with contextlib.suppress(OSError):
            os.rmdir(path)


def _make(
    mnt: str, size: int, paths: Sequence[str], dirs: Sequence[int]
) -> tuple[int, tuple[socket.socket, int]]:
    """The maker's child's answer: the tmpfs fd, and the socket that holds the child (its pid).
    Raises OverlayError."""
    inodes = MAX_ENTRIES + INODE_SLACK
    msg = "\0".join([mnt, str(size), str(inodes), *paths]).encode()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        with theirs:
            _maker.send(msg, [theirs.fileno(), *dirs])
        ours.settimeout(_REPLY_SEC)
        data, fds, _, _ = socket.recv_fds(ours, 4096, 1, socket.MSG_CMSG_CLOEXEC)
    except OSError as exc:
        ours.close()
        raise OverlayError(f"vinos-overlay: the overlay maker: {exc}") from exc
    if data[:1] == b"T" and len(fds) == 1 and data[1:].isdigit():
        return fds[0], (ours, int(data[1:]))
    for fd in fds:
        os.close(fd)
    ours.close()
    raise OverlayError(data[1:].decode(errors="replace") or "vinos-overlay: no answer")


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

    Has the maker build one with no dirs: a tmpfs and an overlay with a lower dir in it, where
    it removes and remakes a folder (Linux >= 6.6 for user xattrs on tmpfs); then nsenter
    joins its namespaces as bwrap's start does.
    """
    if sys.executable in _available:
        return _available[sys.executable]
    # Built and joined this boot with these very binaries: not again per process
    # (sandbox/hostcache.py; a failure is never kept).
    key = {
        "python": hostcache.file_id(sys.executable),
        "nsenter": hostcache.file_id(NSENTER),
        "holder": hostcache.file_id(HOLDER),
    }
    if hostcache.load("overlay", key) == {"ok": True}:
        _available[sys.executable] = None
        return None
    reason = None
    probe = Overlays([], 1)
    try:
        probe.build()
        done = subprocess.run(
            probe.argv(["/bin/true"]), capture_output=True, env={}, timeout=30, check=False
        )
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
    except (OSError, OverlayError, BinaryRefused, subprocess.TimeoutExpired) as exc:
        reason = str(exc)
    finally:
        probe.close()
    _available[sys.executable] = reason
    if reason is None:
        hostcache.store("overlay", key, {"ok": True})
    return reason


def quota_in_force() -> tuple[bool, str]:
    """What `doctor` and the card say of max_workspace_mb on this host: whether the kernel
    keeps it, and how (the run limits' line beside it: supervisor/engine/runcgroup.py)."""
    reason = overlay_unavailable()
    if reason is None:
        return True, (
            "kept by the kernel: max_workspace_mb holds every shell call, action, command and "
            "MCP server (overlays on a tmpfs of the quota, copied back within it)"
        )
    return False, (
        "polled: max_workspace_mb is measured during each shell call, action, command and MCP "
        f"server, so writers at once may pass it before a poll sees them ({reason})"
    )
