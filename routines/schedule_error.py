"""The one error every schedule parser raises (cron, OnCalendar, plain language, translator)."""

from __future__ import annotations

__all__ = ["ScheduleError"]


class ScheduleError(ValueError):
    """An expression that is refused; the message names the token and what to do instead.

    The loader reports it as `[schedule].<cron|oncalendar|every>: <message>`.
    """
