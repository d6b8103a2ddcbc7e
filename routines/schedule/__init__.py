"""Schedules: a routine's [schedule] parsed, evaluated in its zone and described.

    slots       compile_schedule: the one entry point, a Schedule that yields Slots
    error       ScheduleError, the one error every parser raises
    cron        five-field cron, strictly
    oncalendar  systemd calendar events, as systemd 252 parses them
    every       plain-language schedules, resolved to cron
    pattern     the field sets every form compiles to (naive wall times)
    walltime    a pattern's wall times as UTC instants, under the DST rule
    describe    "Every weekday at 9:00 AM", written from the pattern
    translate   cron -> systemd OnCalendar
    tz          the machine's zone, a routine's default

Of the rest of routines/ it imports only routines.runs (the slot id); the typed [schedule]
table and the routine's kind are its own (written.py), which routines.spec re-exports:
pyproject.toml's import contracts. The names
below are imported on first use, so `from routines.schedule import machine_timezone` costs the one
small module, not the parsers (tests/cli/test_cli_list.py counts what a plain `list` loads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from routines.schedule.cron import parse_cron as parse_cron
    from routines.schedule.describe import format_time as format_time
    from routines.schedule.describe import ordinal as ordinal
    from routines.schedule.error import ScheduleError as ScheduleError
    from routines.schedule.error import never_fires as never_fires
    from routines.schedule.every import EXAMPLES as EXAMPLES
    from routines.schedule.every import resolve_every as resolve_every
    from routines.schedule.oncalendar import (
        SHORTHANDS as SHORTHANDS,
    )
    from routines.schedule.oncalendar import (
        parse_oncalendar as parse_oncalendar,
    )
    from routines.schedule.pattern import Pattern as Pattern
    from routines.schedule.slots import (
        FREQUENT_SECONDS as FREQUENT_SECONDS,
    )
    from routines.schedule.slots import (
        MIN_SPACING_SECONDS as MIN_SPACING_SECONDS,
    )
    from routines.schedule.slots import (
        Schedule as Schedule,
    )
    from routines.schedule.slots import (
        Slot as Slot,
    )
    from routines.schedule.slots import (
        compile_schedule as compile_schedule,
    )
    from routines.schedule.slots import (
        explain as explain,
    )
    from routines.schedule.slots import (
        summary as summary,
    )
    from routines.schedule.translate import translate_cron as translate_cron
    from routines.schedule.tz import machine_timezone as machine_timezone
    from routines.schedule.walltime import next_instant as next_instant

# Each name the package exports -> the module that defines it (imported on first use).
_EXPORTS = {
    "EXAMPLES": "every",
    "FREQUENT_SECONDS": "slots",
    "MIN_SPACING_SECONDS": "slots",
    "Pattern": "pattern",
    "SHORTHANDS": "oncalendar",
    "Schedule": "slots",
    "ScheduleError": "error",
    "Slot": "slots",
    "compile_schedule": "slots",
    "explain": "slots",
    "format_time": "describe",
    "machine_timezone": "tz",
    "never_fires": "error",
    "next_instant": "walltime",
    "ordinal": "describe",
    "parse_cron": "cron",
    "parse_oncalendar": "oncalendar",
    "resolve_every": "every",
    "summary": "slots",
    "translate_cron": "translate",
}

__all__ = [
    "EXAMPLES",
    "FREQUENT_SECONDS",
    "MIN_SPACING_SECONDS",
    "SHORTHANDS",
    "Pattern",
    "Schedule",
    "ScheduleError",
    "Slot",
    "compile_schedule",
    "explain",
    "format_time",
    "machine_timezone",
    "never_fires",
    "next_instant",
    "ordinal",
    "parse_cron",
    "parse_oncalendar",
    "resolve_every",
    "summary",
    "translate_cron",
]

if not TYPE_CHECKING:  # mypy reads the imports above; a module __getattr__ would hide typos

    def __getattr__(name: str) -> object:
        """The exported name, importing only the module that defines it (PEP 562)."""
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value
