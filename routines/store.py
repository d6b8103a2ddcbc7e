"""The state store: outputs and last-run.json under state/<name>/, written so a crash never
leaves half a file (temp file in the same directory, fsync, rename, fsync the directory).

A routine's state dir is writable from inside its sandbox, so anything below it may be a
symlink a shell tool planted (memory.md -> ~/.ssh/id_rsa). Whatever the runtime reads or
appends there goes through `read_regular` / `open_beneath`, which never follow one.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "deliver_output",
    "open_beneath",
    "read_json",
    "read_regular",
    "write_atomic",
    "write_json_atomic",
]


def open_beneath(
    base: Path, relative: str, flags: int, mode: int = 0o600, make_dirs: bool = False
) -> int:
    """Open `base/relative` without following a symlink anywhere below `base`.

    `base` itself is trusted (a state dir is a mount point inside the sandbox, which cannot
    replace it). Missing directories are created (0700) when `make_dirs`. Raises OSError
    (ELOOP/ENOTDIR for a symlink in the way).
    """
    parts = [p for p in Path(relative).parts if p not in ("", ".")]
    if not parts or ".." in parts or Path(relative).is_absolute():
        raise ValueError(f"not a relative path below {base}: {relative!r}")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            if make_dirs:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
            nfd = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = nfd
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)


def read_regular(path: Path, limit: int | None = None) -> bytes | None:
    """The last `limit` bytes (all when None) of a regular file, or None when it is missing,
    a symlink, not a regular file, or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
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


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_seq = itertools.count()


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` atomically: readers see the old file or the new, never half.

    The temp file beside it is created with O_EXCL (a symlink planted under its name is
    refused, never followed), and the rename replaces a symlink at `path` rather than writing
    through it. (Not `tempfile`: its imports cost a worker's start-up a few ms.)
    The mode is 0600 unless asked: what the runtime writes is the user's alone.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_seq)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # O_CREAT's mode is filtered by the umask
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def write_json_atomic(path: Path, value: Any) -> None:
    write_atomic(path, orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")


def read_json(path: Path) -> Any:
    """The JSON in `path`, or None when it is missing or unreadable."""
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def deliver_output(scratch_file: Path, state_dir: Path) -> Path:
    """Move a finished output from the run's scratch dir into state/<name>/ by rename.

    The name is kept (YYYY-MM-DD-HHMM.md); if a file of that name exists (two runs in one
    minute), `-2`, `-3`, … is added. The rename is atomic (same filesystem), and link() makes
    the "does it exist" check and the move one step, so two runs never overwrite each other.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    # Never follow a symlink: a shell tool can write in the scratch dir, and a link to, say,
    # ~/.ssh/id_ed25519 would be hard-linked into the state dir, which later sandboxes can read.
    fd = os.open(scratch_file, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)  # the worker may not have: the data must be on disk before the name is
    finally:
        os.close(fd)
    stem, suffix = scratch_file.stem, scratch_file.suffix
    for n in range(1, 1000):
        target = state_dir / (f"{stem}{suffix}" if n == 1 else f"{stem}-{n}{suffix}")
        try:
            os.link(scratch_file, target, follow_symlinks=False)
        except FileExistsError:
            continue
        os.unlink(scratch_file)
        _fsync_dir(state_dir)
        return target
    raise FileExistsError(f"{state_dir}: too many outputs named {stem}{suffix}")
