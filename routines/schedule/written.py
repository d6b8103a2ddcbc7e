"""The [schedule] table as a routine file writes it, and the two facts of a routine it
depends on (its kind, what a missed slot does): typed, unevaluated. routines.spec.routine
re-exports them (a routine holds them); `compile_schedule` evaluates them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Kind", "Missed", "ScheduleSpec"]


class Kind(StrEnum):
    AGENT = "agent"  # a model drives a tool loop
    COMMAND = "command"  # a shell string runs in the sandbox, no model


class Missed(StrEnum):
    CATCH_UP = "catch_up"  # one run stands in for all missed slots
    SKIP = "skip"  # one `missed` row with the count


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """[schedule] as written; `routines.schedule.compile_schedule` evaluates it."""

    cron: str | None = None
    oncalendar: str | None = None
    every: str | None = None
    once: str | None = None  # "2026-12-24 09:00": one run, then the routine turns itself off
    timezone: str = "UTC"
    jitter_sec: int = 0
    missed: Missed = Missed.CATCH_UP
    allow_frequent: bool = False

    @property
    def expression(self) -> str:
        """The expression in force, by the precedence oncalendar > cron > every > once
        (test_schedule_api.py::test_precedence_oncalendar_then_cron_then_every)."""
        return self.oncalendar or self.cron or self.every or self.once or ""

    @property
    def form(self) -> str:
        """Which key the expression in force came from."""
        if self.oncalendar:
            return "oncalendar"
        if self.cron:
            return "cron"
        if self.once and not self.every:
            return "once"
        return "every"
