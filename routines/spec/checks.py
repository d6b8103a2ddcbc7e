"""Typed checks for TOML tables, and the problems they report.

Shared by routine files (`routines.spec.loader`) and config.toml (`routines.spec.config`): every
problem names the file, the table and key, what was expected and what was found.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "MACHINE_NAME",
    "Bad",
    "Check",
    "Problem",
    "Reader",
    "RoutineInvalid",
    "boolean",
    "duration",
    "expiry",
    "found",
    "machine_list",
    "machine_name",
    "malformed",
    "nearest",
    "nonempty_string",
    "nonnegative_int",
    "one_of",
    "parse_duration",
    "positive_int",
    "positive_number",
    "string",
    "string_list",
    "table_value",
]


@dataclass(frozen=True, slots=True)
class Problem:
    """One validation finding. `key` is like `[budget].max_dollars_per_day`, or "" for the file."""

    file: str
    key: str
    message: str
    warning: bool = False

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}: " if self.key else f"{self.file}: "
        return f"{where}{'WARN ' if self.warning else ''}{self.message}"


class RoutineInvalid(Exception):
    """A routine file that cannot be used; `problems` holds every error (and warning) found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in problems if not p.warning))

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if not p.warning)


class Bad(Exception):
    def __init__(self, expected: str) -> None:
        self.expected = expected


def found(value: object) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    text = repr(value) if not isinstance(value, bool) else str(value).lower()
    if isinstance(value, str):
        text = '"' + value.replace('"', '\\"')[:80] + '"'
    return f"{text} ({kinds.get(type(value), type(value).__name__)})"


def malformed(exc: Exception, text: str) -> str:
    """A TOML parse error as the user reads it: the parser's message with line and column.

    tomllib says only "(at end of document)" when the file stops too soon (a file cut off
    mid-edit): add the line and column of that end too.
    """
    message = str(exc)
    if message.endswith("(at end of document)"):
        line = text.count("\n") + 1
        column = len(text) - (text.rfind("\n") + 1) + 1
        message = message.removesuffix(")") + f", line {line}, column {column})"
    return f"malformed TOML: {message}"


Check = Callable[[object], object]


def string(value: object) -> str:
    if not isinstance(value, str):
        raise Bad("a string")
    return value


def nonempty_string(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Bad("a non-empty string")
    return value


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise Bad("true or false")
    return value


def positive_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise Bad("a positive integer")
    return value


def nonnegative_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Bad("an integer >= 0")
    return value


def positive_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise Bad("a positive number")
    if math.isnan(value) or math.isinf(value):
        raise Bad("a positive number")
    return float(value)


def string_list(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Bad("an array of strings")
    return tuple(value)


# A machine's name as a fleet shows it (config.toml [fleet].machine, [routine].machines).
MACHINE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def machine_name(value: object) -> str:
    if not isinstance(value, str) or not MACHINE_NAME.fullmatch(value):
        raise Bad("a machine name: letters, digits, '.', '_' or '-', at most 63 characters")
    return value


def machine_list(value: object) -> tuple[str, ...]:
    """[routine].machines: a non-empty list of machine names, each once."""
    names = string_list(value)
    if not names:
        raise Bad('a non-empty array of machine names such as ["desktop"] (omit it for any)')
    for name in names:
        machine_name(name)
    if len(set(names)) != len(names):
        raise Bad("machine names, each once")
    return names


def one_of(cls: type[StrEnum]) -> Check:
    choices = " | ".join(f'"{m.value}"' for m in cls)

    def check(value: object) -> StrEnum:
        if not isinstance(value, str) or value not in cls._value2member_map_:
            raise Bad(f"one of {choices}")
        return cls(value)

    return check


_DURATION = re.compile(r"(\d+)(s|m|h)")


def parse_duration(text: str) -> int:
    """`"30s" | "5m" | "1h"` → seconds; raises ValueError on anything else."""
    m = _DURATION.fullmatch(text)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


def duration(value: object) -> int:
    if not isinstance(value, str):
        raise Bad('a duration such as "30s", "5m" or "1h"')
    try:
        return parse_duration(value)
    except ValueError:
        raise Bad('a duration such as "30s", "5m" or "1h"') from None


_EXPIRY = re.compile(
    r"(\d+)\s*(s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?|w|weeks?)", re.IGNORECASE
)
_EXPIRY_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_EXPIRY_EXPECTED = 'a positive duration such as "7 days", "36 hours" or "30m"'


def parse_expiry(text: str) -> int:
    """`"7 days" | "36 hours" | "90 minutes" | "2w" | "30m"` → seconds (> 0); ValueError else."""
    m = _EXPIRY.fullmatch(text.strip())
    if not m or int(m.group(1)) <= 0:
        raise ValueError(text)
    unit = m.group(2).lower()
    return int(m.group(1)) * _EXPIRY_UNIT["m" if unit.startswith("mi") else unit[0]]


def expiry(value: object) -> int:
    if not isinstance(value, str):
        raise Bad(_EXPIRY_EXPECTED)
    try:
        return parse_expiry(value)
    except ValueError:
        raise Bad(_EXPIRY_EXPECTED) from None


def table_value(value: object) -> object:
    if not isinstance(value, dict):
        raise Bad("a table")
    return value


def nearest(word: str, known: list[str]) -> str:
    import difflib  # only for a mistake: its import (heapq too) costs every worker's start

    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]}?"
    return "known keys: " + ", ".join(known)


class Reader:
    """Collects problems while reading one file's tables."""

    def __init__(self, file: str, schema: Mapping[str, Mapping[str, Check]]) -> None:
        self.file = file
        self.schema = schema
        self.problems: list[Problem] = []

    def error(self, key: str, message: str) -> None:
        self._add(Problem(self.file, key, message))

    def warn(self, key: str, message: str) -> None:
        self._add(Problem(self.file, key, message, warning=True))

    def _add(self, problem: Problem) -> None:
        # A table that is not a table is found both by the top-level pass and by table():
        # say it once.
        if problem not in self.problems:
            self.problems.append(problem)

    def table(self, doc: Mapping[str, Any], name: str) -> dict[str, Any]:
        """The checked values of table `name` (dotted for nested); unknown keys reported."""
        raw = doc
        for part in name.split("."):
            raw = raw.get(part, {}) if isinstance(raw, dict) else {}
        if not isinstance(raw, dict):
            self.error(f"[{name}]", f"expected a table, found {found(raw)}")
            return {}
        schema = self.schema[name]
        out: dict[str, Any] = {}
        for key, value in raw.items():
            where = f"[{name}].{key}"
            if key not in schema:
                self.error(where, f"unknown key ({nearest(key, list(schema))})")
                continue
            try:
                out[key] = schema[key](value)
            except Bad as bad:
                self.error(where, f"expected {bad.expected}, found {found(value)}")
        return out
