"""How the CLI shows things: aligned tables, colour only on a terminal (NO_COLOR honoured),
JSON for scripts, and times as people read them ("in 2h 13m (06:00)")."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TextIO

import orjson

__all__ = [
    "color",
    "print_json",
    "print_json_lines",
    "relative",
    "table",
    "use_color",
    "when",
]

_CODES = {"red": "31", "green": "32", "yellow": "33", "blue": "34", "dim": "2", "bold": "1"}


def use_color(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    return stream.isatty()


def color(text: str, name: str, enabled: bool) -> str:
    if not enabled or not text:
        return text
    return f"\033[{_CODES[name]}m{text}\033[0m"


def _visible_len(text: str) -> int:
    out, i = 0, 0
    while i < len(text):
        if text[i] == "\033":
            i = text.index("m", i) + 1
            continue
        out += 1
        i += 1
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO | None = None) -> None:
    """Print rows under headers, columns aligned (colour codes do not count as width)."""
    out = out or sys.stdout
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], _visible_len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [c + " " * (w - _visible_len(c)) for c, w in zip(cells, widths, strict=True)]
        return "  ".join(parts).rstrip()

    print(line(headers), file=out)
    for row in rows:
        print(line(row), file=out)


def print_json(value: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()


def print_json_lines(values: Sequence[Any]) -> None:
    for value in values:
        sys.stdout.buffer.write(orjson.dumps(value) + b"\n")
    sys.stdout.flush()


def relative(delta: timedelta) -> str:
    """A duration as "2h 13m", "45s", "3d 4h"; negative durations read "… ago"."""
    seconds = int(delta.total_seconds())
    ago = seconds < 0
    seconds = abs(seconds)
    days, rem = divmod(seconds, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        text = f"{days}d {hours}h" if hours else f"{days}d"
    elif hours:
        text = f"{hours}h {minutes}m" if minutes else f"{hours}h"
    elif minutes:
        text = f"{minutes}m"
    else:
        text = f"{secs}s"
    return f"{text} ago" if ago else text


def when(instant: datetime, now: datetime) -> str:
    """ "in 2h 13m (06:00)" for the future, "3h ago (14:02)" for the past; local wall time,
    with the date when it is not today."""
    local = instant.astimezone()
    today = now.astimezone().date()
    clock = local.strftime("%H:%M") if local.date() == today else local.strftime("%a %d %b %H:%M")
    delta = instant - now
    rel = relative(delta)
    return f"in {rel} ({clock})" if delta.total_seconds() >= 0 else f"{rel} ({clock})"


_EVENT_STYLE = {
    "model_call": ("→", "blue"),
    "model_reply": ("←", "blue"),
    "tool_call": ("⚙", "bold"),
    "tool_result": (" ", "dim"),
    "tool_refused": ("✗", "red"),
    "escalated": ("⇧", "yellow"),
    "warn": ("!", "yellow"),
    "status": ("•", "green"),
    "log": ("·", "dim"),
    "stderr": (" ", "dim"),
    "usage": ("$", "dim"),
    "start": ("▶", "green"),
    "end": ("■", "green"),
}


def format_event(kind: str, text: str, enabled: bool, ts: str | None = None) -> str:
    """One line of a run as `run` and `logs` print it."""
    mark, name = _EVENT_STYLE.get(kind, ("·", "dim"))
    if kind in ("status", "end") and any(w in text for w in ("failed", "timeout", "interrupted")):
        name = "red"
    stamp = ""
    if ts:
        stamp = color(ts[11:19], "dim", enabled) + " "
    return f"{stamp}{color(mark, name, enabled)} {text}"
