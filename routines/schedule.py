"""Schedules: compile a [schedule] into something that yields slots.

PLACEHOLDER (cron only, through croniter) until the schedules issue lands the full
implementation: OnCalendar, plain language, descriptions, DST rules and jitter.
The public API below is the contract the rest of the project codes against.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from routines.spec import Kind, ScheduleSpec

__all__ = ["Schedule", "ScheduleError", "Slot", "compile_schedule"]


class ScheduleError(ValueError):
    """An expression that is refused; the message names the token and what to do."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One scheduled fire: the wall time in the routine's zone and the UTC instant."""

    local: datetime
    instant: datetime

    @property
    def id(self) -> str:
        """Stable across restarts and DST (a UTC instant, to the second)."""
        return self.instant.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Schedule:
    spec: ScheduleSpec
    description: str
    oncalendar: tuple[str, ...]

    def next_after(self, instant: datetime) -> Slot | None:
        """The first slot strictly after `instant` (an aware datetime)."""
        zone = ZoneInfo(self.spec.timezone)
        it = croniter(self.spec.expression, instant.astimezone(zone))
        local = it.get_next(datetime)
        return Slot(local, local.astimezone(ZoneInfo("UTC")))

    def slots_between(self, start: datetime, end: datetime, limit: int) -> list[Slot]:
        """Slots in (start, end], at most `limit` of them, oldest first."""
        out: list[Slot] = []
        cur = start
        while len(out) < limit:
            slot = self.next_after(cur)
            if slot is None or slot.instant > end:
                break
            out.append(slot)
            cur = slot.instant
        return out


def compile_schedule(spec: ScheduleSpec, kind: Kind = Kind.AGENT) -> Schedule:
    if spec.form != "cron" or spec.cron is None:
        raise ScheduleError("only cron is supported by the placeholder")
    if not croniter.is_valid(spec.cron):
        raise ScheduleError(f'invalid cron expression "{spec.cron}"')
    first = Schedule(spec, spec.cron, ())
    now = datetime.now(ZoneInfo("UTC"))
    a = first.next_after(now)
    b = first.next_after(a.instant) if a else None
    if (
        kind is Kind.AGENT
        and not spec.allow_frequent
        and a
        and b
        and b.instant - a.instant < timedelta(minutes=15)
    ):
        raise ScheduleError("fires less than 15 minutes apart; set allow_frequent = true")
    return first
