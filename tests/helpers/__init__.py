"""Small shared helpers for the routines/ tests: routine text, files, problems, instants."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from routines.spec.checks import RoutineInvalid
from routines.spec.loader import load_file

__all__ = ["AGENT", "COMMAND", "at", "problems_of", "write"]

# A minimal valid agent routine: fixed zone (no dependence on the machine's), a budget (no WARN).
AGENT = """\
[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
system = "Write the brief."

[budget]
max_dollars_per_day = 0.5
"""

COMMAND = """\
[routine]
kind = "command"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[command]
run = "df -h"
"""


def write(directory: Path, name: str, text: str) -> Path:
    """Write `text` to directory/name (".toml" added when `name` has no suffix)."""
    path = directory / (name if "." in name else f"{name}.toml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def identity(path: Path) -> str:
    """Which file `path` is, as an enable/disable override is bound to it (Routine.identity)."""
    return load_file(path).identity


def problems_of(path: Path) -> list[str]:
    """Every problem (errors and warnings) of a routine file, as the user reads them."""
    try:
        routine = load_file(path)
    except RoutineInvalid as exc:
        return [str(p) for p in exc.problems]
    return list(routine.warnings)


def at(text: str, zone: str = "UTC") -> datetime:
    """`at("2024-03-10 01:59")`: an aware instant from a wall time in `zone`."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone))
