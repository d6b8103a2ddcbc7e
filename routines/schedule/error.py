"""The one error every schedule parser raises (cron, OnCalendar, plain language, translator)."""

from __future__ import annotations

__all__ = ["ScheduleError", "never_fires"]


class ScheduleError(ValueError):
    """An expression that is refused; the message names the token and what to do instead.

    The loader reports it as `[schedule].<cron|oncalendar|every>: <message>`.
    """


def never_fires(expression: str) -> ScheduleError:
    """The refusal of a schedule no date matches, in the words `explain`, `translate` and the
    loader all use."""
    return ScheduleError(
        f'"{expression.strip()}" never fires: no date matches it (such as February 30)'
    )
