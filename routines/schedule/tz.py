"""The machine's IANA time zone, the default for a routine that names none."""

from __future__ import annotations

import contextlib
import os
import zoneinfo
from functools import cache
from pathlib import Path

__all__ = ["machine_timezone"]


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
            zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            continue
        return name
    return "UTC"
