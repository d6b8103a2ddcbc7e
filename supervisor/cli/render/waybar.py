"""The waybar custom-module JSON (`vinos-routine status --waybar`), decided from the lines
`list` shows. Pure: routine lines, today's total and the time in; a dict out.

class:  critical  a routine's last run failed or timed out, or a routine was disabled
                  automatically (three failures in a row)
        attention actions proposed by routines wait for your decision (`vinos-routine pending`)
        warning   a routine is at >= 80% of its daily budget, its last outcome is
                  needs-attention, or its file is invalid
        ok        otherwise
Only routines that are on count, except auto-disabled ones (which are off because of it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from routines.query import RoutineRow
from routines.runs import Outcome, counts_as_strike

__all__ = ["ICON", "WARN_SHARE", "bar_parts", "health", "tooltip_lines", "waybar_json"]

ICON = "󰚩"  # nf-md-robot (Nerd Fonts), as in the spec's "󰚩 3 routines · next 06:00"
WARN_SHARE = 0.8  # of a daily budget spent: warning


@dataclass(frozen=True, slots=True)
class Health:
    state: str  # ok | warning | critical
    reasons: tuple[str, ...]  # worst first, one line each


def _budget_share(line: RoutineRow) -> float | None:
    cap = line.max_dollars_per_day
    if cap is None or cap <= 0:
        return None
    return line.today_dollars / cap


def health(lines: list[RoutineRow]) -> Health:
    critical: list[str] = []
    warning: list[str] = []
    for ln in lines:
        if ln.disabled_reason:
            critical.append(f"{ln.name} was turned off: {ln.disabled_reason}")
            continue
        if ln.errors:
            warning.append(f"{ln.name}: file invalid ({len(ln.errors)} error(s))")
        if not ln.enabled:
            continue
        if counts_as_strike(ln.last_status):
            critical.append(f"{ln.name}: last run {ln.last_status}")
        share = _budget_share(ln)
        # 1e-9: $0.16 of $0.20 is 80%, though 0.16 / 0.2 is 0.7999… in floating point.
        if share is not None and share >= WARN_SHARE - 1e-9:
            warning.append(f"{ln.name}: {share * 100:.0f}% of its daily budget spent")
        if ln.last_outcome == Outcome.NEEDS_ATTENTION:
            warning.append(f"{ln.name}: needs your attention")
    if critical:
        return Health("critical", tuple(critical + warning))
    if warning:
        return Health("warning", tuple(warning))
    return Health("ok", ())


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
    lines: list[RoutineRow], h: Health, now: datetime, unseen: int, pending: int
) -> list[str]:
    """The tooltip: what waits for a decision, the health's reasons, the outputs to read,
    then a line per routine (the ones on first)."""
    tooltip = list(h.reasons)
    if pending:
        what = "1 action waits" if pending == 1 else f"{pending} actions wait"
        tooltip.insert(0, f"{what} for your decision: vinos-routine pending")
    paused = [ln.name for ln in lines if ln.needs_you]
    if paused:
        tooltip.insert(0, f"needs you (paused until you answer): {', '.join(paused)}")
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
    h = health(lines)
    shares = [s for s in (_budget_share(ln) for ln in lines if ln.enabled) if s is not None]
    waits = pending or any(ln.needs_you for ln in lines)
    state = "attention" if waits and h.state != "critical" else h.state
    return {
        "text": _escape(" · ".join(bar_parts(lines, today_dollars, now, unseen, pending))),
        "tooltip": _escape("\n".join(tooltip_lines(lines, h, now, unseen, pending))),
        "class": state,
        "alt": state,
        "percentage": min(100, round(max(shares, default=0.0) * 100)),
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
