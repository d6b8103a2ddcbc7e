"""Read globs: `~`, `*`, `?`, `[abc]` and `**/`, matched one path component at a time.

A wildcard never matches `/`, and never matches a leading `.` (as in the shell), so
`~/notes/*` does not reach `~/notes/.secret` and `**` does not descend into hidden
directories. The walk (sandbox/readtool.py) and the check of a file's real path use this
same matcher, so what the walk finds and what the check allows cannot drift apart.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Glob", "GlobError", "compile_glob", "has_magic"]

_MAGIC = re.compile(r"[*?\[]")


class GlobError(ValueError):
    """A read pattern that cannot be used (relative, `..`, `~user`, a NUL)."""


def has_magic(part: str) -> bool:
    return _MAGIC.search(part) is not None


@dataclass(frozen=True, slots=True)
class Glob:
    text: str  # the pattern as declared
    parts: tuple[str, ...]  # components of the expanded absolute pattern, "**" for any dirs

    def matches(self, path: str) -> bool:
        """Whether the absolute, normalised `path` matches this glob."""
        if not path.startswith("/"):
            return False
        names = tuple(p for p in path.split("/") if p)
        return _match(self.parts, names)


def compile_glob(pattern: str, home: str) -> Glob:
    """Expand `~/` to `home` (a real path) and split; raises GlobError."""
    if "\0" in pattern or "\n" in pattern or "\r" in pattern:
        raise GlobError("a read pattern may not hold a NUL, newline or carriage return")
    if pattern == "~" or pattern.startswith("~/"):
        expanded = home.rstrip("/") + pattern[1:]
    elif pattern.startswith("/"):
        expanded = pattern
    else:
        raise GlobError(f'read pattern {pattern!r}: expected it to start with "~/" or "/"')
    parts = [p for p in expanded.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise GlobError(f"read pattern {pattern!r}: . and .. components are not allowed")
    if parts and parts[-1] == "**":
        parts.append("*")  # "dir/**" means every file below dir
    # "a/**/**/b" is "a/**/b".
    squeezed: list[str] = []
    for p in parts:
        if not (p == "**" and squeezed and squeezed[-1] == "**"):
            squeezed.append(p)
    return Glob(pattern, tuple(squeezed))


def match_part(pattern: str, name: str) -> bool:
    """One component: fnmatch without case folding, and no leading-dot match by a wildcard."""
    if name.startswith(".") and not pattern.startswith("."):
        return False
    return _regex(pattern).match(name) is not None


_cache: dict[str, re.Pattern[str]] = {}


def _regex(pattern: str) -> re.Pattern[str]:
    rx = _cache.get(pattern)
    if rx is None:
        rx = re.compile(fnmatch.translate(pattern), re.DOTALL)
        if len(_cache) < 1024:
            _cache[pattern] = rx
    return rx


def _match(parts: Sequence[str], names: Sequence[str]) -> bool:
    if not parts:
        return not names
    head = parts[0]
    if head == "**":
        # Zero or more non-hidden directories, then the rest.
        for i in range(len(names) + 1):
            if i > 0 and names[i - 1].startswith("."):
                return False
            if _match(parts[1:], names[i:]):
                return True
        return False
    if not names:
        return False
    return match_part(head, names[0]) and _match(parts[1:], names[1:])
