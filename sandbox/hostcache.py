"""What a sandboxing process learns about the host once, kept for the next ones this boot.

Each `vinos-routine sandbox` call, each worker and each probe child is a new process, and
without this each would run bwrap's trial, the overlays' trial and libseccomp's compile
(whose binding runs `ldconfig -p` twice on import) again. An entry is kept under a key of
everything its answer depends on: the boot (/proc/sys/kernel/random/boot_id: a reboot, and
with it a changed kernel or sysctl, starts afresh), the uid, and the identity (path, device,
inode, size, mtime) of every binary or library the answer came from. A changed bwrap, nsenter,
Python, libseccomp or filter makes a new key, and the answer is computed again.

Only answers that passed are kept: a failure is computed each time, so a fix (an AppArmor
profile, a sysctl) shows at once. Keeping a pass is security-neutral: what the trial showed
depends on the binary, which is keyed, and on host settings that, changed within a boot, make
the real call fail closed (bwrap refuses to start), never run unsandboxed.

The entries live in $XDG_RUNTIME_DIR/vinos-routine/ (a tmpfs the login manager gives the
user alone, emptied at logout and reboot), used only when that directory is the user's own
and mode 0700. Every entry is opened relative to the directory's fd with O_NOFOLLOW, must be
a regular 0600 file of the user, and is written to a new file then renamed: a link planted
there, or another user's file, is never read or written through
(tests/sandbox/test_hostcache.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Mapping
from typing import Any

__all__ = ["boot_id", "file_id", "load", "store"]

_SUBDIR = "vinos-routine"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_BYTES = 1 << 20


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def file_id(path: str) -> list[Any] | None:
    """What changes when the file at `path` (links resolved) is replaced or rewritten."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None
    return [real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def _owned_dir(parent: int | None, name: str, make: bool) -> int | None:
    """The directory `name` (beneath `parent`'s fd, or an absolute path) opened without
    following a link, if it is the user's own and no one else may enter it; else None."""
    try:
        if make:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=parent)
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError:
        return None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        return None
    return fd


def _cache_dir() -> int | None:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if not os.path.isabs(runtime):
        return None
    top = _owned_dir(None, runtime, make=False)
    if top is None:
        return None
    try:
        return _owned_dir(top, _SUBDIR, make=True)
    finally:
        os.close(top)


def _entry(kind: str) -> str:
    return f"sandbox-{kind}.json"


def _key(key: Mapping[str, Any]) -> str:
    full = {**key, "boot": boot_id(), "uid": os.geteuid()}
    return hashlib.sha256(json.dumps(full, sort_keys=True).encode()).hexdigest()


def load(kind: str, key: Mapping[str, Any]) -> dict[str, Any] | None:
    """The value stored for `kind` under `key` this boot, or None."""
    if boot_id() is None:
        return None
    d = _cache_dir()
    if d is None:
        return None
    try:
        fd = os.open(_entry(kind), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=d)
    except OSError:
        return None
    finally:
        os.close(d)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None
        data = json.loads(os.read(fd, _MAX_BYTES))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or data.get("key") != _key(key):
        return None
    value = data.get("value")
    return value if isinstance(value, dict) else None


def store(kind: str, key: Mapping[str, Any], value: Mapping[str, Any]) -> None:
    """Keep `value` for `kind` under `key` (the last one stored wins); a failure to write
    loses only the time it would have saved."""
    if boot_id() is None:
        return
    d = _cache_dir()
    if d is None:
        return
    tmp = f".{_entry(kind)}.{os.getpid()}"
    try:
        body = json.dumps({"key": _key(key), "value": dict(value)}).encode()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=d)
        fd = os.open(tmp, flags, 0o600, dir_fd=d)
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        os.replace(tmp, _entry(kind), src_dir_fd=d, dst_dir_fd=d)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=d)
    finally:
        os.close(d)
