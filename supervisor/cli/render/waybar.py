"""The waybar custom-module JSON (`vinos-routine status --waybar`), decided from the lines
`list` shows. Pure: routine lines, today's total and the time in; a dict out.

class:  the read model's health of the routines (routines/query/health.py: critical, warning
        or ok), or attention when actions proposed by routines wait for your decision
        (`vinos-routine pending`) or a run waits for you, and nothing is critical.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from routines.query import RoutineRow
from routines.query.health import HealthState, RoutinesHealth, routines_health

__all__ = ["ICON", "bar_parts", "tooltip_lines", "waybar_json"]

ICON = "󰚩"  # nf-md-robot (Nerd Fonts), as in the spec's "󰚩 3 routines · next 06:00"


def _escape(text: str) -> str:
    """waybar renders text and tooltip as Pango markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _routine_line(ln: RoutineRow, now: datetime) -> str:
    from supervisor.cli.present import clock, money

    if ln.kind == "?":
        return f"{ln.name}: invalid file"
    if ln.running:
        state = "running"
    elif ln.queued:
        state = "queued"
    else:
        state = "on" if ln.enabled else "off"
    parts = [f"{ln.name}: {state}"]
    if ln.enabled and ln.next_run is not None:
        parts.append(f"next {clock(ln.next_run, now)}")
    if ln.last_status:
        last = ln.last_status + (f" ({ln.last_outcome})" if ln.last_outcome else "")
        parts.append(f"last {last}")
    spent = money(ln.today_dollars)
    if ln.max_dollars_per_day is not None:
        spent += f" of {money(ln.max_dollars_per_day)}"
    if ln.today_dollars or ln.enabled:
        parts.append(f"{spent} today")
    return " · ".join(parts)


def bar_parts(
    lines: list[RoutineRow], today_dollars: float, now: datetime, unseen: int, pending: int
) -> list[str]:
    """The bar's text, in parts joined by " · ": how many routines are on, what waits,
    what runs or comes next, and today's cost."""
    from supervisor.cli.present import clock, money

    on = [ln for ln in lines if ln.enabled]
    parts = [f"{ICON} {len(on)} routine{'' if len(on) == 1 else 's'}"]
    running = [ln.name for ln in lines if ln.running]
    upcoming = sorted((ln.next_run, ln.name) for ln in on if ln.next_run is not None)
    needs = sum(1 for ln in lines if ln.needs_you)
    if needs:  # runs paused for you: their requests are among the pending ones
        parts.append(f"{needs} needs you")
    if pending > needs:
        parts.append(f"{pending - needs} pending")
    if unseen:
        parts.append(f"{unseen} new")
    if running:
        parts.append(f"running {', '.join(running)}")
    elif upcoming:
        parts.append(f"next {clock(upcoming[0][0], now)}")
    parts.append(f"today {money(today_dollars)}")
    return parts


def tooltip_lines(
    lines: list[RoutineRow], h: RoutinesHealth, now: datetime, unseen: int, pending: int
) -> list[str]:
    """The tooltip: what waits for a decision, the health's reasons, the outputs to read,
    then a line per routine (the ones on first)."""
    tooltip = list(h.reasons)
    if pending:
        what = "1 action waits" if pending == 1 else f"{pending} actions wait"
        tooltip.insert(0, f"{what} for your decision: vinos-routine pending")
    if h.needs_you:
        tooltip.insert(0, f"needs you (paused until you answer): {', '.join(h.needs_you)}")
    if unseen:
        tooltip.append(f"{unseen} new output{'s' if unseen != 1 else ''} to read: click")
    if tooltip:
        tooltip.append("")
    ordered = sorted(lines, key=lambda ln: (not ln.enabled, ln.name))  # the ones on first
    return tooltip + ([_routine_line(ln, now) for ln in ordered] or ["no routines yet"])


def waybar_json(
    lines: list[RoutineRow],
    today_dollars: float,
    now: datetime,
    unseen: int = 0,
    pending: int = 0,
) -> dict[str, Any]:
    """{"text", "tooltip", "class", "alt", "percentage"} for waybar's `return-type: json`;
    `unseen`: outputs waiting to be read (open_on_login, not shown by a brief yet);
    `pending`: proposed actions waiting for a decision."""
    h = routines_health(lines)
    waits = pending or h.needs_you
    state = "attention" if waits and h.state != HealthState.CRITICAL else h.state.value
    return {
        "text": _escape(" · ".join(bar_parts(lines, today_dollars, now, unseen, pending))),
        "tooltip": _escape("\n".join(tooltip_lines(lines, h, now, unseen, pending))),
        "class": state,
        "alt": state,
        "percentage": min(100, round(h.budget_share * 100)),
    }


def waybar_error(message: str) -> dict[str, Any]:
    """Shown instead when the status cannot be read: the bar says so rather than vanishing."""
    return {
        "text": f"{ICON} error",
        "tooltip": _escape(f"vinos-routine status failed: {message}"),
        "class": "critical",
        "alt": "critical",
        "percentage": 0,
    }
