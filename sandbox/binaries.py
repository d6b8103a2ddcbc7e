"""The sandbox binary is taken from an absolute path and trusted only if root controls it.

A bwrap found on PATH could be any program the user (or a tool they installed) put earlier on
PATH, and a fake one would run every command unsandboxed with nothing noticing. So bwrap comes
from `[sandbox].bwrap` (default /usr/bin/bwrap), and is refused unless the file is owned by
root and writable by nobody else, and every directory above it is writable only by its owner,
root or the user themselves (a root-owned file in a directory another user or a group may write
can be swapped by a rename; the user's own processes could as well edit config.toml, and no
sandbox can write outside its workspace, scratch and /tmp).
"""

from __future__ import annotations

import os
import stat

__all__ = ["DEFAULT_BWRAP", "BinaryRefused", "check_binary"]

DEFAULT_BWRAP = "/usr/bin/bwrap"


class BinaryRefused(ValueError):
    """The configured binary is missing, relative, or not controlled by root alone."""


def check_binary(path: str, key: str = "[sandbox].bwrap") -> str:
    """`path` resolved, if it is a root-owned executable no one else may replace.

    Raises BinaryRefused with a message naming the key, what was expected and what was found.
    """
    if not os.path.isabs(path) or "\0" in path or "\n" in path:
        raise BinaryRefused(f"{key} = {path!r}: expected an absolute path")
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as exc:
        raise BinaryRefused(f"{key} = {path!r}: not found ({exc.strerror})") from exc
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
        raise BinaryRefused(f"{key} = {path!r}: not an executable file")
    problem = _unsafe(real, st)
    if problem is not None:
        raise BinaryRefused(f"{key} = {path!r}: refused, {problem}")
    parent = os.path.dirname(real)
    while True:
        problem = _unsafe(parent, os.stat(parent), owners=_root_uids() | {os.geteuid()})
        if problem is not None:
            raise BinaryRefused(f"{key} = {path!r}: refused, its directory {problem}")
        if parent == "/":
            return real
        parent = os.path.dirname(parent)


def _root_uids() -> frozenset[int]:
    """The uids under which root's files show here.

    In the initial user namespace, only 0. Nested in another user namespace (a container, or
    vinos-routine itself run inside a sandbox, as the tests do), root is unmapped and its files
    show as the kernel's overflow uid (65534), which no process here can own or chown to; on
    the host, 65534 is the real user `nobody`, and is refused."""
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            initial = f.read().split() == ["0", "0", "4294967295"]
        if initial:
            return frozenset({0})
        with open("/proc/sys/kernel/overflowuid", encoding="ascii") as f:
            return frozenset({0, int(f.read())})
    except (OSError, ValueError):
        return frozenset({0})


def _unsafe(path: str, st: os.stat_result, owners: frozenset[int] | None = None) -> str | None:
    if st.st_uid not in (_root_uids() if owners is None else owners):
        return f"{path} is owned by uid {st.st_uid}, expected root (uid 0)"
    if st.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None
