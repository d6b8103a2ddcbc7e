"""The read tool: `read_files(glob)` in the worker, outside bwrap, so it must be airtight.

The walk goes down from `/` one directory fd at a time with O_NOFOLLOW: a symlinked directory is
never followed out of the pattern. Each file is opened first (O_PATH; its last component may be a
symlink: a declared file is often a link into a dotfiles tree), and only then checked: the path the
open descriptor really points to (/proc/self/fd) must match a declared pattern, and the content is
read from that very inode. A symlink swapped between a check and the open cannot win: nothing is
checked before the open.

Caps: 256 KB per file, 500 KB per call, 1 MB per run (tests/sandbox/test_sandbox_readtool.py:
test_per_file_cap_256_kb, test_per_call_cap_500_kb_marks_later_files, test_per_run_cap_1_mb).
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import stat
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.globs import Glob, GlobError, compile_glob, has_magic, match_part
from sandbox.whitelist import check_read

__all__ = ["CALL_CAP", "FILE_CAP", "RUN_CAP", "SYSTEM_DIRS", "ReadBudget", "read_files"]

# Never read, whatever a pattern says: /proc/*/environ holds the worker's own environment
# (its API key), /sys and /dev are the kernel's, /run holds the user's sockets and tokens.
# Checked on the resolved path, so a link into them is refused too (test_sandbox_readtool.py).
SYSTEM_DIRS = ("/proc", "/sys", "/dev", "/run")

FILE_CAP = 256 * 1024
CALL_CAP = 500 * 1024
RUN_CAP = 1024 * 1024
MAX_FILES = 200  # entries listed in one result, read or not
MAX_SCANNED = 20_000  # directory entries looked at by one call's walk

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(slots=True)
class ReadBudget:
    """What one run may still read, in bytes of content returned (1 MB to start with)."""

    remaining: int = RUN_CAP


def read_files(
    pattern: str,
    declared: Sequence[str],
    *,
    home: Path,
    budget: ReadBudget,
    never: Sequence[str] = (),
    own: Sequence[str] = (),
    never_names: Sequence[str] = (),
) -> dict[str, Any]:
    """Read the files matching `pattern`, which must equal a declared read glob verbatim.

    A file whose real path is under a `never` path (absolute, normalised: the never-list,
    routines/spec/never.py) is refused, unless it is under one of `own` (the routine's workspace);
    so is one with a component whose name matches `never_names` (fnmatch, case-insensitive:
    `.env`, `credentials*`, `*token*`, `*.pem`, …), and anything in SYSTEM_DIRS.

    Returns {"pattern", "files": [{"path", "content", "truncated"}], "skipped": [{"path",
    "reason"}]}, with "error" when the pattern is refused and "note" when a cap cut the result.
    """
    result: dict[str, Any] = {"pattern": pattern, "files": [], "skipped": []}
    refusal = check_read(declared, pattern)
    if refusal is not None:
        result["error"] = f"refused: {refusal}"
        return result
    real_home = os.path.realpath(home)
    try:
        wanted = compile_glob(pattern, real_home)
    except GlobError as exc:
        result["error"] = str(exc)
        return result
    allowed = []
    for text in declared:
        with contextlib.suppress(GlobError):
            allowed.append(compile_glob(text, real_home))
    checks = _Allowed(allowed, never, own, never_names)
    call_left = CALL_CAP
    walk = _Walk()
    with contextlib.closing(walk.candidates(wanted)) as found:
        for dir_fd, name, path in found:
            if len(result["files"]) >= MAX_FILES:
                result["note"] = f"more than {MAX_FILES} files match; the rest are not listed"
                break
            limit = min(FILE_CAP, call_left, budget.remaining)
            entry, used = _read_one(dir_fd, name, path, checks, limit)
            if entry is None:
                continue
            if "reason" in entry:
                result["skipped"].append(entry)
                continue
            call_left -= used
            budget.remaining -= used
            result["files"].append(entry)
            if entry["truncated"] and limit < FILE_CAP:
                result["note"] = (
                    "the read budget ran out (500 KB per call, 1 MB per run): later files are"
                    " empty and marked truncated"
                )
    result["skipped"].extend(walk.problems)
    if walk.scanned >= MAX_SCANNED:
        result["note"] = f"stopped after looking at {MAX_SCANNED} directory entries"
    return result


@dataclass(frozen=True, slots=True)
class _Allowed:
    globs: list[Glob]
    never: Sequence[str]
    own: Sequence[str]
    names: Sequence[str] = ()

    def refusal(self, real: str) -> str | None:
        for s in SYSTEM_DIRS:
            if _under(real, s):
                return f"resolves to {s}, a kernel or runtime interface: it is never read"
        matching = [g for g in self.globs if g.matches(real)]
        if not matching:
            return "resolves outside the declared read patterns"
        if any(_under(real, o) for o in self.own):
            return None
        for n in self.never:
            if _under(real, n):
                return f"resolves to {n}, which is on the never-list: no routine may read it"
        parts = [p for p in real.split("/") if p]
        for g in matching:
            # Below the folder the glob reads from (its literal root, or a literal path's
            # folder): the names above it (the home folder's own name) are not the file's.
            for part in parts[_root_len(g.parts) :]:
                low = part.lower()
                hit = next((n for n in self.names if fnmatch.fnmatchcase(low, n)), None)
                if hit is not None:
                    return f'"{part}" looks like a credential ({hit}): no routine may read it'
        return None


def _root_len(parts: tuple[str, ...]) -> int:
    """How many leading components of a glob are literal, the last one never counted."""
    n = 0
    while n < len(parts) - 1 and parts[n] != "**" and not has_magic(parts[n]):
        n += 1
    return n


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _read_one(
    dir_fd: int, name: str, path: str, allowed: _Allowed, limit: int
) -> tuple[dict[str, Any] | None, int]:
    """(entry, bytes of content used); an entry with "reason" is a skipped file."""
    entry = _open_checked(dir_fd, name, path, allowed)
    if isinstance(entry, int):
        fd = entry
    else:
        return entry, 0
    try:
        data = _read_up_to(fd, limit + 1)
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError as exc:
        return {"path": path, "reason": f"cannot read: {exc.strerror}"}, 0
    finally:
        os.close(fd)
    truncated = len(data) > limit
    text = _decode(data[:limit], truncated)
    if text is None:
        return {"path": path, "reason": "binary or not UTF-8 text; not shown"}, 0
    found: dict[str, Any] = {"path": path, "content": text, "truncated": truncated}
    if real != path:
        found["resolved"] = real
    return found, len(text.encode())


def _open_checked(
    dir_fd: int, name: str, path: str, allowed: _Allowed
) -> int | dict[str, Any] | None:
    """An fd open for reading on a regular file whose real path matches `allowed`, or why not
    (None for a directory, which is skipped quietly)."""
    # O_PATH first: it follows a final symlink but opens nothing (no device side effects).
    # Everything is then checked on that descriptor, and the file is opened for reading
    # through /proc/self/fd, which is the same inode, whatever the path now points to.
    try:
        pfd = os.open(name, os.O_PATH | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        return {"path": path, "reason": f"cannot read: {exc.strerror}"}
    try:
        st = os.fstat(pfd)
        if stat.S_ISDIR(st.st_mode):
            return None
        if not stat.S_ISREG(st.st_mode):
            return {"path": path, "reason": "not a regular file"}
        try:
            real = os.readlink(f"/proc/self/fd/{pfd}")
        except OSError:
            return {"path": path, "reason": "cannot verify where it points (/proc unavailable)"}
        refusal = allowed.refusal(real)
        if refusal is not None:
            return {"path": path, "reason": refusal}
        try:
            fd = os.open(f"/proc/self/fd/{pfd}", _FILE_FLAGS)
        except OSError as exc:
            return {"path": path, "reason": f"cannot read: {exc.strerror}"}
    finally:
        os.close(pfd)
    same = os.fstat(fd)
    if (same.st_dev, same.st_ino) != (st.st_dev, st.st_ino):  # cannot happen; never trust it
        os.close(fd)
        return {"path": path, "reason": "changed while being opened"}
    return fd


def _read_up_to(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        chunk = os.read(fd, min(n, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _decode(data: bytes, truncated: bool) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # The cut may split the last character: drop its first bytes, nothing else.
        if truncated and exc.start >= len(data) - 3 and exc.reason == "unexpected end of data":
            return data[: exc.start].decode("utf-8", "strict")
        return None


_Found = Generator[tuple[int, str, str], None, None]


class _Walk:
    """Finds (dir fd, name, path) candidates for a glob, never following a directory link."""

    def __init__(self) -> None:
        self.problems: list[dict[str, str]] = []
        self.scanned = 0

    def candidates(self, glob: Glob) -> _Found:
        try:
            root = os.open("/", _DIR_FLAGS)
        except OSError as exc:
            self.problems.append({"path": "/", "reason": f"cannot open: {exc.strerror}"})
            return
        try:
            yield from self._walk(root, "", glob.parts)
        finally:
            os.close(root)

    def _walk(self, dir_fd: int, path: str, parts: tuple[str, ...]) -> _Found:
        head, rest = parts[0], parts[1:]
        if head == "**":
            yield from self._walk(dir_fd, path, rest)
            for name in sorted(self._list(dir_fd, path)):
                if not name.startswith("."):
                    yield from self._descend(dir_fd, path, name, parts, quiet=True)
            return
        if not has_magic(head):
            names = [head]
        else:
            names = [n for n in self._list(dir_fd, path) if match_part(head, n)]
        for name in sorted(names):
            if self.scanned >= MAX_SCANNED:
                return
            if not rest:
                yield dir_fd, name, f"{path}/{name}"
            else:
                yield from self._descend(dir_fd, path, name, rest, quiet=has_magic(head))

    def _descend(
        self, dir_fd: int, path: str, name: str, parts: tuple[str, ...], *, quiet: bool
    ) -> _Found:
        child_path = f"{path}/{name}"
        if child_path in SYSTEM_DIRS:
            self.problems.append({"path": child_path, "reason": "never read (kernel or runtime)"})
            return
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if quiet and exc.errno in (errno.ENOTDIR, errno.ELOOP):
                return  # a file or a link where the pattern wants a directory: no match
            if exc.errno == errno.ELOOP or (
                exc.errno == errno.ENOTDIR and os.path.islink(child_path)
            ):
                reason = "a symlinked directory is not followed; declare its real path"
            elif exc.errno == errno.ENOENT:
                return  # nothing there: no match
            else:
                reason = f"cannot open: {exc.strerror}"
            self.problems.append({"path": child_path, "reason": reason})
            return
        try:
            yield from self._walk(child, child_path, parts)
        finally:
            os.close(child)

    def _list(self, dir_fd: int, path: str) -> list[str]:
        try:
            names = os.listdir(dir_fd)
        except OSError as exc:
            self.problems.append({"path": path or "/", "reason": f"cannot list: {exc.strerror}"})
            return []
        room = MAX_SCANNED - self.scanned
        self.scanned += min(len(names), room)
        return names[:room]
