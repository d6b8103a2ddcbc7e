"""The daemon's one-line state: its process title, systemd's STATUS= and `status`'s first
line. Pure: the daemon passes what it knows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

__all__ = ["status_line"]


def status_line(
    *,
    running: int,
    queued: int,
    next_fires: Sequence[tuple[str, datetime]],
    now: datetime,
    lost: str | None = None,
    full: str | None = None,
    unwritten: int = 0,
) -> str:
    """e.g. "1 running · 2 queued · next backup 03:00"; what stopped it, when something did."""
    if lost is not None:
        return "stopped scheduling: " + lost.split(";", 1)[0]
    if full is not None:
        return f"paused: the disk is full ({unwritten} finished run(s) wait to be recorded)"
    parts = [f"{running} running"]
    if queued:
        parts.append(f"{queued} queued")
    if next_fires:
        name, at = next_fires[0]
        local = at.astimezone()
        clock = local.strftime("%H:%M" if at - now < timedelta(hours=20) else "%a %H:%M")
        parts.append(f"next {name} {clock}")
    else:
        parts.append("nothing scheduled")
    return " · ".join(parts)
