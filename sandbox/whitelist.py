"""The whitelist: a tool call runs only when its argument equals a declared entry, exactly.

No normalisation of any kind (whitespace, quotes, case, Unicode): the string the model sends
must be the very string the user wrote. A refusal comes back as a reason, which the worker
logs as `[NAME] refused tool call: shell:...` and returns to the model as the tool's error.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

__all__ = ["check_read", "check_shell"]

# Never legitimate in one whitelisted line; refused even if a declared entry somehow held one.
_FORBIDDEN = {"\0": "a NUL byte", "\n": "a newline", "\r": "a carriage return"}


def check_shell(declared: Sequence[str], command: str) -> str | None:
    """None when `command` equals a declared `shell:` entry exactly; else why it is refused."""
    return _check("shell", declared, command)


def check_read(declared: Sequence[str], pattern: str) -> str | None:
    """None when `pattern` equals a declared `read:` glob verbatim; else why it is refused."""
    return _check("read", declared, pattern)


def _check(kind: str, declared: Sequence[str], value: str) -> str | None:
    if not isinstance(value, str):  # the model's JSON may hold anything
        return f"expected a string, found {type(value).__name__}"  # type: ignore[unreachable]
    for char, name in _FORBIDDEN.items():
        if char in value:
            return f"the {kind} argument holds {name}; whitelisted entries are single lines"
    if value in declared:
        return None
    entries = "command" if kind == "shell" else "read pattern"
    reason = f"not a declared {entries}: only the exact strings in [agent].tools are allowed"
    hint = _near_miss(declared, value)
    return f"{reason} ({hint})" if hint else reason


def _near_miss(declared: Sequence[str], value: str) -> str:
    """Say when a refused string is a look-alike of a declared one, so the model can retry."""
    squashed = " ".join(value.split())
    folded = unicodedata.normalize("NFKC", squashed)
    for entry in declared:
        if " ".join(entry.split()) == squashed:
            return "it differs from a declared entry only in whitespace"
        if unicodedata.normalize("NFKC", " ".join(entry.split())) == folded:
            return "it differs from a declared entry in look-alike Unicode characters"
    return ""
