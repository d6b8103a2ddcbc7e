"""The state store: outputs and last-run.json under state/<name>/, written so a crash never
leaves half a file (temp file in the same directory, fsync, rename, fsync the directory)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import orjson

__all__ = ["deliver_output", "read_json", "write_atomic", "write_json_atomic"]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data` atomically: readers see the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
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
