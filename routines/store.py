"""The state store: outputs and last-run.json under state/<name>/, written so a crash never
leaves half a file (temp file in the same directory, fsync, rename, fsync the directory).

No sandbox can write below the state dir any more (its shell tools get a workspace of their
own, routines/spec/paths.py), but a state dir written by an older version, or by hand, may still
hold a link (memory.md -> ~/.ssh/id_rsa). So every host-side open here is O_NOFOLLOW,
relative to a directory fd that was itself opened with O_NOFOLLOW: `open_dir`,
`read_regular`, `write_atomic`, `open_beneath` and `deliver_output` never follow one.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "deliver_output",
    "json_lines",
    "open_beneath",
    "open_dir",
    "open_dir_beneath",
    "read_beneath",
    "read_json",
    "read_regular",
    "read_regular_at",
    "remove_tree",
    "write_atomic",
    "write_atomic_at",
    "write_json_atomic",
]


def open_beneath(
    base: Path, relative: str, flags: int, mode: int = 0o600, make_dirs: bool = False
) -> int:
    """Open `base/relative` without following a symlink anywhere below `base`.

    `base` must not be a symlink itself; its parents are trusted. Missing directories are
    created (0700) when `make_dirs`. Raises OSError (ELOOP/ENOTDIR for a symlink in the way).
    """
    parts = _parts(relative, base)
    fd = open_dir_beneath(base, "/".join(parts[:-1]), make=make_dirs) if parts[:-1] else None
    if fd is None:
        fd = open_dir(base)
    try:
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)


def open_dir_beneath(base: Path, relative: str, *, make: bool = False) -> int:
    """A directory fd on `base/relative`, walked one component at a time with O_NOFOLLOW
    (`base` itself too), so a link anywhere below `base` fails (ELOOP/ENOTDIR) instead of
    leading elsewhere. With `make`, missing directories (`base` included) are created 0700."""
    fd = open_dir(base, make=make)
    try:
        for part in _parts(relative, base) if relative not in ("", ".") else []:
            if make:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
            nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _parts(relative: str, base: Path) -> list[str]:
    parts = [p for p in Path(relative).parts if p not in ("", ".")]
    if not parts or ".." in parts or Path(relative).is_absolute():
        raise ValueError(f"not a relative path below {base}: {relative!r}")
    return parts


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(directory: Path, *, make: bool = False) -> int:
    """A directory fd on `directory`, refusing a symlink in its place (ELOOP/ENOTDIR).

    Its parents are the runtime's own (VINOS_HOME, routines/, state/): no sandbox can write
    there. With `make`, missing directories are created (0700) first.
    """
    if make:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(directory, _DIR_FLAGS)


def read_regular(path: Path, limit: int | None = None, *, head: bool = False) -> bytes | None:
    """The last `limit` bytes (the first, with `head`; all when None) of a regular file, or
    None when it is missing, a symlink (or below one, at its directory), not a regular file,
    or unreadable."""
    try:
        dfd = open_dir(path.parent)
    except OSError:
        return None
    try:
        return read_regular_at(dfd, path.name, limit, head=head)
    finally:
        os.close(dfd)


def read_regular_at(
    dir_fd: int, name: str, limit: int | None = None, *, head: bool = False
) -> bytes | None:
    """`read_regular` of `name` in the directory open as `dir_fd`."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return None
    return _read_fd(fd, limit, head)


def read_beneath(base: Path, relative: str, limit: int) -> bytes | None:
    """The first `limit` bytes of the regular file base/relative, or None when it is
    missing, a symlink anywhere below `base`, or not a regular file."""
    try:
        fd = open_beneath(base, relative, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError):
        return None
    return _read_fd(fd, limit, head=True)


def _read_fd(fd: int, limit: int | None, head: bool) -> bytes | None:
    """The regular file open as `fd` (closed here), its last or first `limit` bytes."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if head and limit is not None:
            return _read_up_to(fd, limit)
        if limit is not None and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        data = b"".join(chunks)
        return data[-limit:] if limit is not None else data
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_up_to(fd: int, n: int) -> bytes:
    chunks = []
    while n > 0 and (chunk := os.read(fd, min(n, 1 << 16))):
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


_seq = itertools.count()


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` atomically: readers see the old file or the new, never half.

    Relative to an O_NOFOLLOW fd on its directory: the temp file beside it is created with
    O_EXCL (a symlink planted under its name is refused, never followed), and the rename
    replaces a symlink at `path` rather than writing through it. (Not `tempfile`: its imports
    cost a worker's start-up a few ms.)
    The mode is 0600 unless asked: what the runtime writes is the user's alone.
    """
    dfd = open_dir(path.parent, make=True)
    try:
        write_atomic_at(dfd, path.name, data, mode)
    finally:
        os.close(dfd)


def write_atomic_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """`write_atomic` of `name` in the directory open as `dir_fd`."""
    tmp = f".{name}.{os.getpid()}.{next(_seq)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)  # O_CREAT's mode is filtered by the umask
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def write_json_atomic(path: Path, value: Any) -> None:
    import orjson  # here, not at the top: `list` reads files through this module, never JSON

    write_atomic(path, orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")


def read_json(path: Path) -> Any:
    """The JSON in `path`, or None when it is missing, unreadable or a symlink."""
    import orjson

    data = read_regular(path)
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def json_lines(data: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file (a run log); a torn line, as a crash
    mid-write leaves, and anything but an object are skipped."""
    import orjson

    for line in data.splitlines():
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            yield entry


def deliver_output(scratch_file: Path, state_dir: Path) -> Path:
    """Move a finished output from the run's output dir into state/<name>/ by rename.

    The name is kept (YYYY-MM-DD-HHMM.md); if a file of that name exists (two runs in one
    minute), `-2`, `-3`, … is added. The rename is atomic (same filesystem), and link() makes
    the "does it exist" check and the move one step, so two runs never overwrite each other.
    Both directories are opened with O_NOFOLLOW and everything is relative to them; the
    source must be a regular file (a symlink is refused, never hard-linked).
    """
    try:
        relative = scratch_file.parent.relative_to(state_dir)
    except ValueError:
        src_dir = open_dir(scratch_file.parent)
    else:
        src_dir = open_dir_beneath(state_dir, str(relative))
    try:
        dst_dir = open_dir(state_dir, make=True)
        try:
            return _deliver_at(src_dir, scratch_file.name, dst_dir, state_dir)
        finally:
            os.close(dst_dir)
    finally:
        os.close(src_dir)


def _deliver_at(src_dir: int, name: str, dst_dir: int, state_dir: Path) -> Path:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_dir)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", name)
        os.fsync(fd)  # the worker may not have: the data must be on disk before the name is
    finally:
        os.close(fd)
    stem, suffix = os.path.splitext(name)
    for n in range(1, 1000):
        target = f"{stem}{suffix}" if n == 1 else f"{stem}-{n}{suffix}"
        try:
            os.link(name, target, src_dir_fd=src_dir, dst_dir_fd=dst_dir, follow_symlinks=False)
        except FileExistsError:
            continue
        os.unlink(name, dir_fd=src_dir)
        os.fsync(dst_dir)
        return state_dir / target
    raise FileExistsError(f"{state_dir}: too many outputs named {stem}{suffix}")


def remove_tree(path: Path) -> int:
    """Remove the directory `path` and everything in it, whatever modes a sandbox set in it
    (chmod 000 folders, read-only files) and however deep, following no link.

    Its parent is opened with O_NOFOLLOW; below, every folder is opened relative to its
    parent's fd with O_NOFOLLOW (a link in the tree is unlinked, never followed) and, being
    ours, gets its owner's rwx back first through an O_PATH fd on that very folder. Only two
    descriptors are open at a time: the walk goes back up through "..", checked against the
    parent it came from, so a tree deeper than the open-files limit goes too.
    Returns how many entries went (`path` itself included); missing: 0. Raises OSError when
    something stays; the caller says so in its log (held by tests/routines/test_remove_tree.py and
    tests/worker/test_worker_tools.py).
    """
    try:
        dfd = open_dir(path.parent)
    except FileNotFoundError:
        return 0
    try:
        return _remove_at(dfd, path.name)
    finally:
        os.close(dfd)


_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OWNER = stat.S_IRWXU


def _open_owned(parent_fd: int, name: str) -> int:
    """A readable fd on the folder `name`, never through a link, its owner's rwx restored."""
    path_fd = os.open(name, _PATH_FLAGS, dir_fd=parent_fd)
    try:
        mode = stat.S_IMODE(os.fstat(path_fd).st_mode)
        if mode & _OWNER != _OWNER:
            # The magic link resolves to exactly the inode path_fd holds: no lookup by name.
            try:
                os.chmod(f"/proc/self/fd/{path_fd}", mode | _OWNER)
            except OSError as exc:
                raise OSError(exc.errno, f"{exc.strerror}: chmod u+rwx of {name!r}") from exc
        return os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    finally:
        os.close(path_fd)


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _clear(fd: int) -> tuple[list[str], int]:
    """Unlink everything in the folder `fd` but its folders: (their names, how many went)."""
    folders = []
    gone = 0
    with os.scandir(fd) as it:
        for entry in it:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
                    gone += 1
    return folders, gone


def _remove_at(parent_fd: int, name: str) -> int:
    try:
        fd = _open_owned(parent_fd, name)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        os.unlink(name, dir_fd=parent_fd)  # a file or a link where the folder was
        return 1
    dev = os.fstat(fd).st_dev
    # One frame per level below `name`: (its name, (dev, inode) of its parent, its folders
    # still to remove). Names only: the fds are the current folder's and, briefly, one more.
    frames: list[tuple[str, tuple[int, int], list[str]]] = []
    gone = 1  # `name` itself, at the end
    try:
        folders, n = _clear(fd)
        frames.append((name, _ident(parent_fd), folders))
        gone += n
        while frames:
            here, parent, pending = frames[-1]
            if pending:
                sub = pending.pop()
                try:
                    child = _open_owned(fd, sub)
                except FileNotFoundError:
                    continue
                if os.fstat(child).st_dev != dev:
                    os.close(child)
                    raise OSError(errno.EXDEV, f"{sub!r} is on another filesystem")
                ident = _ident(fd)
                os.close(fd)
                fd = child
                folders, n = _clear(fd)
                frames.append((sub, ident, folders))
                gone += n
                continue
            frames.pop()
            if not frames:
                break
            up = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = up
            if _ident(fd) != parent:
                raise OSError(errno.ESTALE, f"the folder holding {here!r} moved during removal")
            os.rmdir(here, dir_fd=fd)
            gone += 1
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)
    return gone
