"""Copy a shell call's overlay upper dir back into the real writable dir, like a hostile archive.

Everything in the upper dir was made by the sandbox, so it is read as an attacker's archive:
- every lookup is one name relative to a dir fd, with O_NOFOLLOW (or follow_symlinks=False);
  no path string is resolved twice, and a symlink in either tree is never followed;
- a symlink is copied as a symlink (its text, never its target); a regular file is copied by
  content into a new file made with O_EXCL beside its name, then renamed over it, so a name
  that is a hard link or a symlink in the real dir is replaced, never written through;
- device nodes, fifos and sockets are not copied (a char device 0/0 is overlayfs' whiteout:
  the name was deleted); set-id and sticky bits are dropped; xattrs are not copied (the
  upper dir's own `user.overlay.*` marks are read: `opaque` means the folder replaced the one
  below instead of merging with it);
- the walk holds one fd per level and stops at MAX_DEPTH; the real dir's folders get their
  owner's rwx back before they are entered (sandbox/quota.py, open_dir_restoring).

`measure` walks both trees without writing and says what the real dir would gain and lose;
the runner copies back (`apply`) only when the result is within the quota
(tests/sandbox/test_overlay_quota.py holds both).

Into a person's write folder (`apply(..., guard=Guard(...))`) only plain files and folders are
carried: a name the guard keeps out (a dot-name, a credential name, HEAD), a symlink, and
everything below a folder that holds a HEAD (a bare repository) stay in the upper dir, and a
real folder holding such a name is neither removed nor replaced; each is reported. So nothing
the shell does makes or changes a repository, a hook or a start-up file there, which the
person's own `git status` would act on outside any sandbox
(tests/routines/test_redteam_writes.py::
test_a_repository_the_shell_makes_in_a_write_folder_runs_nothing_on_the_host).
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass

from sandbox.quota import MAX_DEPTH, MAX_ENTRIES, open_dir_restoring, usage

__all__ = ["DIR_BYTES", "CopyBackError", "Guard", "Tally", "apply", "marks_a_repository", "measure"]

DIR_BYTES = 4096  # what a new folder takes on the real disk (one ext4/xfs block)
_LINK_INLINE = 60  # a symlink text up to this long fits in the inode (ext4): no block
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_OPAQUE = "user.overlay.opaque"


class CopyBackError(Exception):
    """The upper dir cannot be copied back (too deep, a real folder that cannot be opened)."""


# A repository's own top (git finds a bare one by its HEAD, objects/ and refs/, and a
# core.worktree in its config makes `git status` there run core.fsmonitor).
REPOSITORY_MARK = "head"


def marks_a_repository(name: str) -> bool:
    """Pure: whether `name` is git's mark of a repository's top (write_file asks it too)."""
    return name.lower() == REPOSITORY_MARK


@dataclass(frozen=True, slots=True)
class Guard:
    """What a copy-back into a person's folder keeps out: `names` are credential-name
    patterns (fnmatch, lower case, as the sandbox masks them)."""

    names: tuple[str, ...] = ()

    def refuses(self, name: str) -> str | None:
        """Pure: why the entry `name` is never carried into the folder, or None."""
        low = name.lower()
        if name.startswith("."):
            return "a dot-name"
        if marks_a_repository(name):
            return "a repository's HEAD"
        if any(fnmatch.fnmatchcase(low, n) for n in self.names):
            return "credential-named"
        return None


@dataclass(frozen=True, slots=True)
class Tally:
    added: int  # bytes the copied entries would take on the real disk
    freed: int  # bytes of real entries they replace or delete
    entries_added: int
    entries_removed: int
    skipped: int  # fifos, sockets and devices, not copied
    # What a Guard kept out: a path below the folder and why, one a line.
    refused: tuple[str, ...] = ()


class _Count:
    def __init__(self, guard: Guard | None = None) -> None:
        self.added = self.freed = self.entries_added = self.entries_removed = self.skipped = 0
        self.guard = guard
        self.refused: list[str] = []
        self.where = ""  # the folder being walked, relative to the top, "" or ending in "/"

    def tally(self) -> Tally:
        return Tally(
            self.added,
            self.freed,
            self.entries_added,
            self.entries_removed,
            self.skipped,
            tuple(self.refused),
        )

    def refuse(self, name: str, why: str) -> None:
        self.refused.append(f"{self.where}{name} ({why})")


def measure(upper_fd: int, real_fd: int, guard: Guard | None = None) -> Tally:
    """What copying `upper_fd` into `real_fd` would add and remove; writes nothing."""
    count = _Count(guard)
    _walk(upper_fd, real_fd, count, write=False)
    return count.tally()


def apply(upper_fd: int, real_fd: int, guard: Guard | None = None) -> Tally:
    """Copy `upper_fd` into `real_fd`, less what `guard` keeps out. Raises CopyBackError or
    OSError part way on a failure (the disk full, a folder made unreadable meanwhile): what
    was copied before it stays."""
    count = _Count(guard)
    _walk(upper_fd, real_fd, count, write=True)
    return count.tally()


def _walk(upper_top: int, real_top: int, count: _Count, *, write: bool) -> None:
    if count.guard is not None and _lstat(real_top, "HEAD") is not None:
        count.refuse(".", "the folder is a repository: nothing the call changed in it is kept")
        return
    # (upper dir fd, real dir fd or None: the real folder is new or replaced, so nothing
    # below it exists yet; names still to do; its path below the top), one frame per level.
    frames: list[tuple[int, int | None, list[os.DirEntry[str]], str]] = []
    try:
        frames.append((os.dup(upper_top), os.dup(real_top), [], ""))
        frames[-1] = (frames[-1][0], frames[-1][1], _entries(frames[-1][0]), "")
        while frames:
            up, real, pending, where = frames[-1]
            if not pending:
                frames.pop()
                os.close(up)
                if real is not None:
                    os.close(real)
                continue
            entry = pending.pop()
            count.where = where
            child = _one(entry, up, real, count, write)
            if child is None:
                continue
            if len(frames) >= MAX_DEPTH:
                os.close(child[0])
                if child[1] is not None:
                    os.close(child[1])
                raise CopyBackError(f"the call made folders more than {MAX_DEPTH} deep")
            below = f"{where}{entry.name}/"
            frames.append((child[0], child[1], [], below))
            frames[-1] = (child[0], child[1], _entries(child[0]), below)
    finally:
        for up, real, _, _ in frames:
            os.close(up)
            if real is not None:
                os.close(real)


def _entries(fd: int) -> list[os.DirEntry[str]]:
    """The upper folder's entries, whiteouts last so they are popped (done) first: space is
    freed before it is taken."""
    with os.scandir(fd) as it:
        found = list(it)
    return sorted(found, key=lambda e: _is_whiteout(e.stat(follow_symlinks=False)))


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _one(
    entry: os.DirEntry[str], up: int, real: int | None, count: _Count, write: bool
) -> tuple[int, int | None] | None:
    """Do one upper entry; for a folder, the (upper, real) fds to descend into."""
    name = entry.name
    st = entry.stat(follow_symlinks=False)
    if _refused(count, name, st):
        return None
    old = _lstat(real, name)
    if _is_whiteout(st):
        if old is not None and real is not None and not _kept(count, real, name, old):
            _forget(real, name, old, count)
            if write:
                _remove(real, name, old)
        return None
    if stat.S_ISDIR(st.st_mode):
        return _folder(name, st, up, real, old, count, write)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        count.skipped += 1  # a fifo, socket or device: never made in the real dir
        return None
    if old is not None and real is not None:
        if _kept(count, real, name, old):
            return None
        _forget(real, name, old, count)
    count.entries_added += 1
    if stat.S_ISLNK(st.st_mode):
        text = os.readlink(name, dir_fd=up)
        count.added += 0 if len(os.fsencode(text)) < _LINK_INLINE else DIR_BYTES
        if write and real is not None:
            _replace(real, name, old, lambda tmp: os.symlink(text, tmp, dir_fd=real))
        return None
    # Copied whole: a sparse file's holes take blocks on the real disk.
    count.added += -(-st.st_size // DIR_BYTES) * DIR_BYTES
    if write and real is not None:
        _replace(real, name, old, lambda tmp: _copy_file(up, name, real, tmp, st))
    return None


def _refused(count: _Count, name: str, st: os.stat_result) -> bool:
    """Whether the guard keeps the upper entry `name` out (made, changed or deleted by the
    call: the real one, if any, stays as it was)."""
    if count.guard is None:
        return False
    why = count.guard.refuses(name)
    if why is None and stat.S_ISLNK(st.st_mode):
        # A link names any place (a repository elsewhere, a dot-name): a person's folder
        # gets files and folders only.
        why = "a symbolic link"
    if why is None:
        return False
    count.refuse(name, why)
    return True


def _kept(count: _Count, real: int, name: str, old: os.stat_result) -> bool:
    """Whether the real folder `name`, which the call removed or replaced, stays whole because
    the guard keeps something below it (the repository in a folder renamed or deleted)."""
    if count.guard is None or not stat.S_ISDIR(old.st_mode):
        return False
    if not _holds_kept(real, name, count.guard):
        return False
    count.refuse(name, "removed or replaced by the call, but it holds a dot-name: kept")
    return True


def _holds_kept(real: int, name: str, guard: Guard) -> bool:
    """Whether the real tree `name` holds a name `guard` keeps out, or cannot be walked whole
    (then it is kept: fail closed)."""
    try:
        todo = [open_dir_restoring(name, real)]
    except OSError:
        return True
    seen = 0
    try:
        while todo:
            if len(todo) > MAX_DEPTH:
                return True
            fd = todo.pop()
            try:
                with os.scandir(fd) as it:
                    found = list(it)
                seen += len(found)
                if seen > MAX_ENTRIES:
                    return True
                for e in found:
                    if guard.refuses(e.name) is not None:
                        return True
                    if e.is_dir(follow_symlinks=False):
                        todo.append(open_dir_restoring(e.name, fd))
            finally:
                os.close(fd)
    except OSError:
        return True
    finally:
        for fd in todo:
            os.close(fd)
    return False


def _is_repository(real: int, name: str) -> bool:
    """Whether the real folder `name` holds a HEAD (git's mark of a repository's top)."""
    fd = open_dir_restoring(name, real)
    try:
        return _lstat(fd, "HEAD") is not None
    finally:
        os.close(fd)


def _guarded_folder(
    count: _Count,
    name: str,
    child_up: int,
    real: int | None,
    old_dir: os.stat_result | None,
    opaque: bool,
) -> bool | None:
    """A folder of the call under a guard: None when it is kept out whole (a repository, made
    by the call or there before), else whether it replaces the real one (opaque), which it
    does not when that one holds something the guard keeps."""
    if _lstat(child_up, "HEAD") is not None:
        count.refuse(name, "made a repository: nothing in it is kept")
        return None
    if old_dir is None or real is None:
        return opaque
    if _is_repository(real, name):
        count.refuse(name, "a repository: nothing the call changed in it is kept")
        return None
    if opaque and _kept(count, real, name, old_dir):
        return False  # what it held stays; what the call made is added to it
    return opaque


def _folder(
    name: str,
    st: os.stat_result,
    up: int,
    real: int | None,
    old: os.stat_result | None,
    count: _Count,
    write: bool,
) -> tuple[int, int | None] | None:
    child_up = open_dir_restoring(name, up)  # a chmod 000 folder is read all the same
    try:
        opaque = _opaque(child_up)
        was_dir = old is not None and stat.S_ISDIR(old.st_mode)
        if count.guard is not None:
            kept = _guarded_folder(count, name, child_up, real, old if was_dir else None, opaque)
            if kept is None:
                os.close(child_up)
                return None
            opaque = kept
        merge = was_dir and not opaque
        if old is not None and real is not None and not merge:
            _forget(real, name, old, count)
            if write:
                _remove(real, name, old)
        if not merge:
            count.added += DIR_BYTES
            count.entries_added += 1
        if real is None or not (merge or write):
            return child_up, None
        if not merge:
            os.mkdir(name, 0o700, dir_fd=real)
        child_real = open_dir_restoring(name, real)
    except BaseException:
        os.close(child_up)
        raise
    if write:
        try:
            # Its mode less set-id and sticky bits, with its owner's rwx (sandbox/quota.py).
            os.fchmod(child_real, stat.S_IMODE(st.st_mode) & 0o777 | stat.S_IRWXU)
        except BaseException:
            os.close(child_up)
            os.close(child_real)
            raise
    return child_up, child_real


def _opaque(fd: int) -> bool:
    try:
        return os.getxattr(fd, _OPAQUE) == b"y"
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP):
            return False
        raise


def _lstat(real: int | None, name: str) -> os.stat_result | None:
    if real is None:
        return None
    try:
        return os.stat(name, dir_fd=real, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _forget(real: int, name: str, old: os.stat_result, count: _Count) -> None:
    """Count the real entry `name` as freed: its bytes and entries, a folder's whole tree
    (as sandbox/quota.py counts them)."""
    count.freed += old.st_blocks * 512
    count.entries_removed += 1
    if not stat.S_ISDIR(old.st_mode):
        return
    fd = open_dir_restoring(name, real)
    try:
        used = usage(fd)
    finally:
        os.close(fd)
    if used.unreadable:
        raise CopyBackError(f"a folder {name!r} replaced by the call cannot be counted")
    count.freed += used.bytes
    count.entries_removed += used.entries


def _remove(real: int, name: str, old: os.stat_result) -> None:
    """Delete the real entry `name`, a whole tree for a folder, by fds (links are unlinked)."""
    if not stat.S_ISDIR(old.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=real)
        return
    frames = [(real, name, open_dir_restoring(name, real))]
    try:
        while frames:
            parent, fname, fd = frames[-1]
            sub = None
            with os.scandir(fd) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        sub = e.name
                        break
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(e.name, dir_fd=fd)
            if sub is not None:
                if len(frames) >= MAX_DEPTH:
                    raise CopyBackError(f"a folder to delete is more than {MAX_DEPTH} deep")
                frames.append((fd, sub, open_dir_restoring(sub, fd)))
                continue
            frames.pop()
            os.close(fd)
            os.rmdir(fname, dir_fd=parent)
    finally:
        for _, _, fd in frames:
            os.close(fd)


def _replace(real: int, name: str, old: os.stat_result | None, make: Callable[[str], None]) -> None:
    """Make the new entry under a fresh name beside `name`, then rename it over `name`."""
    if old is not None and stat.S_ISDIR(old.st_mode):
        _remove(real, name, old)  # rename cannot replace a folder with a file
    while True:
        tmp = f".vinos-copy-{secrets.token_hex(8)}"
        try:
            make(tmp)
            break
        except FileExistsError:
            continue  # a name the call made: another one
    try:
        os.rename(tmp, name, src_dir_fd=real, dst_dir_fd=real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=real)
        raise


def _copy_file(up: int, name: str, real: int, tmp: str, st: os.stat_result) -> None:
    src = _open_readable(up, name)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        dst = os.open(tmp, flags, 0o600, dir_fd=real)
        try:
            left = st.st_size
            while left > 0:
                n = os.sendfile(dst, src, None, left)
                if n == 0:
                    break
                left -= n
            os.fchmod(dst, stat.S_IMODE(st.st_mode) & 0o777)  # no set-id or sticky bit
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _open_readable(up: int, name: str) -> int:
    """The upper file `name` opened for reading, given its owner's r first if the sandbox took
    it (a chmod 000 file is copied all the same), through the inode an O_PATH fd holds."""
    path_fd = os.open(name, _PATH, dir_fd=up)
    try:
        st = os.fstat(path_fd)
        if not stat.S_ISREG(st.st_mode):
            raise CopyBackError(f"{name!r} is no longer a file")
        if not st.st_mode & stat.S_IRUSR:
            os.chmod(f"/proc/self/fd/{path_fd}", stat.S_IMODE(st.st_mode) | stat.S_IRUSR)
        return os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(path_fd)
