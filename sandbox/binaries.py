"""The sandbox binary is taken from an absolute path and trusted only if root controls it.

A bwrap found on PATH could be any program the user (or a tool they installed) put earlier on
PATH, and a fake one would run every command unsandboxed with nothing noticing. So bwrap comes
from `[sandbox].bwrap` (default /usr/bin/bwrap), and is refused unless the file and every
directory above it are owned by root and writable by nobody else (a root-owned file in a
user-writable directory can be swapped by a rename).
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
        problem = _unsafe(parent, os.stat(parent))
        if problem is not None:
            raise BinaryRefused(f"{key} = {path!r}: refused, its directory {problem}")
        if parent == "/":
            return real
        parent = os.path.dirname(parent)


def _unsafe(path: str, st: os.stat_result) -> str | None:
    if st.st_uid != 0:
        return f"{path} is owned by uid {st.st_uid}, expected root (uid 0)"
    if st.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None
