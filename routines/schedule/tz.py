"""Time zones: the machine's IANA zone (the default for a routine that names none), and the
one place a zone name from a person or a file becomes a `ZoneInfo` (`zone_info`)."""

from __future__ import annotations

import contextlib
import os
import zoneinfo
from functools import cache
from pathlib import Path

__all__ = ["UnknownZone", "machine_timezone", "zone_info"]


class UnknownZone(ValueError):
    """A zone name this machine's tz database does not have; the message says what to write."""


def zone_info(name: str) -> zoneinfo.ZoneInfo:
    """The zone `name`, or UnknownZone naming it. Every way a name can fail is caught here
    (not in tzdata: ZoneInfoNotFoundError; a path: ValueError; too long for a file name, or
    bytes that are no text: OSError, UnicodeError), so no caller sees a traceback for a bad
    zone (tests/cli/test_cli_bad_input.py walks --tz with each)."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        pass
    # The name as given: the CLI refuses an argument too long or not UTF-8 before this (one
    # place: supervisor.cli.main.bad_argument), and routines.schedule imports no safetext.
    raise UnknownZone(
        f'time zone "{name}" is not in this machine\'s tz database: use an IANA '
        "name such as Europe/Berlin or UTC (`timedatectl list-timezones` lists them)"
    )


@cache
def machine_timezone() -> str:
    """$TZ if it names a zone, else /etc/localtime's target, else /etc/timezone, else UTC.

    A machine with no zone configured really runs on UTC, so UTC is not a guess there.
    """
    candidates: list[str] = []
    tz_env = os.environ.get("TZ", "").removeprefix(":")
    if tz_env:
        candidates.append(tz_env)
    try:
        target = os.readlink("/etc/localtime")
        if "zoneinfo/" in target:
            candidates.append(target.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    with contextlib.suppress(OSError):
        candidates.append(Path("/etc/timezone").read_text().strip())
    for name in candidates:
        try:
            zone_info(name)
        except UnknownZone:
            continue
        return name
    return "UTC"
