"""The daemon's one-line state: its process title, systemd's STATUS= and `status`'s first
line. Pure: the daemon passes what it knows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from supervisor.engine.health import Health, paused_phrase

__all__ = ["status_line"]


def status_line(
    *,
    running: int,
    queued: int,
    next_fires: Sequence[tuple[str, datetime]],
    now: datetime,
    health: Health = Health.OK,
    reason: str | None = None,
    unwritten: int = 0,
) -> str:
    """e.g. "1 running · 2 queued · next backup 03:00"; what stopped or paused it, when
    something did ("paused: the disk is full (…)")."""
    if health is Health.LOST:
        return "stopped scheduling: " + (reason or "its ledger was replaced").split(";", 1)[0]
    if health is not Health.OK:
        return f"paused: {paused_phrase(health)} ({unwritten} finished run(s) wait to be recorded)"
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
