"""`watch = [...]`: inotify on the folders of the watched globs, debounced, each written file an
event (supervisor/engine/triggers.py `watch_event`: one per path and mtime).

The kernel's inotify through libc (ctypes: no dependency), read on the daemon's loop
(`add_reader`). Each glob's literal folder is watched, not below it: `~/Downloads/*.pdf`
watches ~/Downloads for files closed after writing or moved in. A path is handed on once it
has been quiet for DEBOUNCE_SEC, so a file written in many pieces is one event.

`watched_dirs` and `matching` are pure (tests/supervisor/test_filewatch.py); `Inotify` is the
syscalls; `FileWatch` carries them out.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import fnmatch
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from routines.spec import Routine
from routines.spec.trigger import watch_folder, watch_root
from supervisor.engine.triggers import TriggerBook, watch_event

__all__ = ["DEBOUNCE_SEC", "FileWatch", "Inotify", "matching", "ours", "watched_dirs"]

log = logging.getLogger("vinos.filewatch")

DEBOUNCE_SEC = 0.5
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_Q_OVERFLOW = 0x00004000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then `len` bytes of name


# A watched glob: (its routine, the glob with `~` expanded, the grant it lies inside, expanded).
Glob = tuple[str, str, str]


def watched_dirs(routines: Iterable[Routine], home: str) -> dict[str, list[Glob]]:
    """Folder → [(routine, expanded glob, expanded grant)] for every routine's `watch` globs
    (pure). A glob inside no grant (the loader refuses it) is left out."""

    def expand(p: str) -> str:
        return home + p[1:] if p.startswith("~/") else p

    out: dict[str, list[Glob]] = {}
    for r in routines:
        reads = r.agent.read_patterns if r.agent is not None else ()
        homes = r.agent.home if r.agent is not None else r.command.home if r.command else ()
        for pattern in r.trigger.watch if r.trigger else ():
            root = watch_root(pattern, reads, homes)
            if root is None:
                continue
            full = expand(pattern)
            out.setdefault(watch_folder(full), []).append((r.name, full, expand(root)))
    return out


def matching(path: str, globs: Iterable[Glob]) -> list[str]:
    """The routines one of whose globs matches `path` (pure)."""
    return list(dict.fromkeys(name for name, g, _ in globs if fnmatch.fnmatchcase(path, g)))


def inside(resolved: str, globs: Iterable[Glob]) -> list[Glob]:
    """The globs whose grant, its links resolved, holds the folder `resolved` (already
    resolved). A link on the way (`~/notes/inbox` → `~/.ssh`, planted by a run that may write
    to ~/notes) must not carry a watch outside what its routine may read: the changed paths
    are handed to the model (tests/supervisor/test_redteam_watch.py)."""
    out = []
    for g in globs:
        root = os.path.realpath(g[2])
        if resolved == root or resolved.startswith(root.rstrip("/") + "/"):
            out.append(g)
    return out


def ours(st: os.stat_result) -> bool:
    """Whether a written file may start a run: a regular file of this user. Another local
    user who can write into a watched folder (a shared one, named by an absolute `read:`
    glob) must not start runs that spend this user's budget; a link or a FIFO is no file
    written."""
    import stat

    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


class Inotify:
    """An inotify instance (non-blocking, close-on-exec) and its watches."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd: int = fd

    def add(self, path: str) -> int:
        wd = int(self._add(self.fd, os.fsencode(path), IN_CLOSE_WRITE | IN_MOVED_TO))
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return wd

    def remove(self, wd: int) -> None:
        self._rm(self.fd, wd)  # a folder already gone removed its watch itself

    def read(self) -> list[tuple[int, int, str]]:
        """The pending events: (wd, mask, name); [] when there are none."""
        try:
            data = os.read(self.fd, 64 * 1024)
        except BlockingIOError:
            return []
        out = []
        at = 0
        while at + _EVENT.size <= len(data):
            wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
            raw = data[at + _EVENT.size : at + _EVENT.size + size]
            out.append((wd, mask, os.fsdecode(raw.rstrip(b"\0"))))
            at += _EVENT.size + size
        return out

    def close(self) -> None:
        os.close(self.fd)


@dataclass(slots=True)
class _Dir:
    wd: int
    globs: list[Glob]
    resolved: str  # the folder with its links resolved when its watch was added


class FileWatch:
    """The daemon's watches: kept in step with the followed routines (`sync`), events handed
    to the trigger book after DEBOUNCE_SEC of quiet, then `wake`."""

    def __init__(
        self,
        book: TriggerBook,
        wake: Callable[[], None],
        *,
        home: str,
        debounce: float = DEBOUNCE_SEC,
    ) -> None:
        self.book = book
        self.wake = wake
        self.home = home
        self.debounce = debounce
        self.ino: Inotify | None = None
        self.dirs: dict[str, _Dir] = {}
        self.by_wd: dict[int, str] = {}
        self.quiet_at: dict[str, float] = {}  # changed path → when it is handed on
        self._timer: asyncio.TimerHandle | None = None

    def sync(self, routines: Iterable[Routine]) -> None:
        wanted: Mapping[str, list[Glob]] = watched_dirs(routines, self.home)
        if not wanted and self.ino is None:
            return
        if self.ino is None:
            self.ino = Inotify()
            asyncio.get_running_loop().add_reader(self.ino.fd, self._readable)
        for folder in [f for f in self.dirs if f not in wanted]:
            self.ino.remove(self.dirs[folder].wd)
            self.by_wd.pop(self.dirs.pop(folder).wd, None)
        for folder, globs in wanted.items():
            d = self.dirs.get(folder)
            if d is not None:
                d.globs = inside(d.resolved, globs)
                continue
            try:
                wd, kept, resolved = self._add(folder, globs)
            except OSError as exc:  # a folder not there (yet): said once a sync, not fatal
                log.warning("watch: cannot watch %s: %s", folder, exc.strerror or exc)
                continue
            if wd is None:
                continue
            self.dirs[folder] = _Dir(wd, kept, resolved)
            self.by_wd[wd] = folder

    def _add(self, folder: str, globs: list[Glob]) -> tuple[int | None, list[Glob], str]:
        """Watch `folder` if, its links resolved, it lies inside its globs' grants; the watch
        is added on the folder opened and checked (its /proc/self/fd link), so a link swapped
        in after the check is never followed."""
        assert self.ino is not None
        fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            proc = f"/proc/self/fd/{fd}"
            resolved = os.readlink(proc)
            kept = inside(resolved, globs)
            if not kept:
                log.warning(
                    "watch: %s is %s, outside what %s may read: not watched",
                    folder,
                    resolved,
                    ", ".join(dict.fromkeys(g[0] for g in globs)),
                )
                return None, [], resolved
            return self.ino.add(proc), kept, resolved
        finally:
            os.close(fd)

    def _readable(self) -> None:
        assert self.ino is not None
        now = time.monotonic()
        for wd, mask, name in self.ino.read():
            if mask & IN_Q_OVERFLOW:
                log.warning("watch: the kernel's event queue overflowed; some writes were missed")
                continue
            folder = self.by_wd.get(wd)
            if folder is None or not name:
                continue
            self.quiet_at[os.path.join(folder, name)] = now + self.debounce
        if self.quiet_at and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.debounce, self._flush)

    def _flush(self) -> None:
        self._timer = None
        now = time.monotonic()
        ready = [p for p, at in self.quiet_at.items() if at <= now]
        offered = False
        for path in ready:
            del self.quiet_at[path]
            folder = os.path.dirname(path)
            d = self.dirs.get(folder)
            if d is None:
                continue
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    log.warning("watch: cannot stat %s: %s", path, exc.strerror)
                continue  # gone again: nothing to hand on
            if not ours(st):
                log.warning("watch: %s is not yours (uid %d): it starts nothing", path, st.st_uid)
                continue
            for name in matching(path, d.globs):
                offered |= self.book.offer(watch_event(name, path, st.st_mtime_ns))
        if offered:
            self.wake()
        if self.quiet_at:
            wait = max(0.01, min(self.quiet_at.values()) - now)
            self._timer = asyncio.get_running_loop().call_later(wait, self._flush)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.ino is not None:
            asyncio.get_running_loop().remove_reader(self.ino.fd)
            self.ino.close()
            self.ino = None
