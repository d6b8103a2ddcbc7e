"""How the CLI shows things: aligned tables, colour only on a terminal (NO_COLOR honoured),
JSON for scripts, and times as people read them ("in 2h 13m (06:00)")."""

from __future__ import annotations

import os
import sys
import unicodedata
from datetime import datetime, timedelta

from routines.humanize import money, relative, tokens
from routines.safetext import one_line
from routines.safetext import visible as _visible

TYPE_CHECKING = False  # typing's own flag: `list` answered by the daemon loads no typing
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from typing import Any, TextIO

__all__ = [
    "ask_yes",
    "bar",
    "clock",
    "color",
    "die",
    "format_event",
    "interactive",
    "money",
    "print_json",
    "print_json_lines",
    "relative",
    "table",
    "table_columns",
    "tokens",
    "use_color",
    "visible",
    "when",
]

_CODES = {"red": "31", "green": "32", "yellow": "33", "blue": "34", "dim": "2", "bold": "1"}


def use_color(stream: TextIO | None = None) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org) or TERM=dumb."""
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    return stream.isatty()


def visible(text: str) -> str:
    """`text` safe to print on a terminal (see routines.safetext.visible)."""
    return _visible(text)


def die(message: str, code: int = 1) -> int:
    """Print an error (after what stdout holds, so a piped `2>&1` reads in order); the code."""
    sys.stdout.flush()
    print(f"vinos-routine: {message}", file=sys.stderr)
    return code


def color(text: str, name: str, enabled: bool) -> str:
    if not enabled or not text:
        return text
    return f"\033[{_CODES[name]}m{text}\033[0m"


def _visible_len(text: str) -> int:
    """Terminal columns `text` takes: colour codes take none, wide (CJK) characters two."""
    if text.isascii() and "\033" not in text:
        return len(text)  # no wide or combining character, no colour: half of `list`'s time
    out, i = 0, 0
    while i < len(text):
        if text[i] == "\033":
            i = text.index("m", i) + 1
            continue
        ch = text[i]
        if unicodedata.combining(ch):
            pass
        elif unicodedata.east_asian_width(ch) in ("W", "F"):
            out += 2
        else:
            out += 1
        i += 1
    return out


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    out: TextIO | None = None,
    right: Collection[int] = (),
) -> None:
    """Print rows under headers, columns aligned (colour codes do not count as width);
    the columns numbered in `right` (numbers) are aligned to the right."""
    columns = [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in headers]
    table_columns(headers, columns, out, right)


def table_columns(
    headers: Sequence[str],
    columns: Sequence[Sequence[str]],
    out: TextIO | None = None,
    right: Collection[int] = (),
) -> None:
    """`table` from its columns (each as long as the others): a column is padded as a whole,
    each distinct cell measured once (10,000 routines' `list` shares most of its cells)."""
    out = out or sys.stdout
    padded = [
        _padded([h, *col], i in right)
        for i, (h, col) in enumerate(zip(headers, columns, strict=True))
    ]
    out.write("".join("  ".join(parts).rstrip() + "\n" for parts in zip(*padded, strict=True)))


def _padded(cells: list[str], right: bool) -> list[str]:
    """The cells of one column padded with spaces to its widest."""
    lengths = {c: _visible_len(c) for c in set(cells)}
    width = max(lengths.values())
    pads = {c: " " * (width - n) for c, n in lengths.items()}
    if right:
        return [pads[c] + c for c in cells]
    return [c + pads[c] for c in cells]


def print_json(value: Any) -> None:
    import orjson  # only for --json: it pulls in uuid and platform, ~5 ms on every command

    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()


def print_json_lines(values: Sequence[Any]) -> None:
    import orjson

    for value in values:
        sys.stdout.buffer.write(orjson.dumps(value) + b"\n")
    sys.stdout.flush()


_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(value: float, top: float, width: int, unicode: bool = True) -> str:
    """A horizontal bar `width` cells long at `top`, in eighths of a cell; a non-zero value
    always shows at least a sliver."""
    if top <= 0 or value <= 0:
        return ""
    eighths = max(1, round(min(value / top, 1.0) * width * 8))
    if not unicode:
        return "#" * max(1, round(eighths / 8))
    full, part = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[part] if part else "")


def when(instant: datetime, now: datetime) -> str:
    """ "in 2h 13m (06:00)" for the future, "3h ago (14:02)" for the past; local wall time,
    with the date when it is not today."""
    local = instant.astimezone()
    today = now.astimezone().date()
    clock = local.strftime("%H:%M") if local.date() == today else local.strftime("%a %d %b %H:%M")
    delta = instant - now
    rel = relative(delta)
    return f"in {rel} ({clock})" if delta.total_seconds() >= 0 else f"{rel} ({clock})"


def clock(instant: datetime, now: datetime) -> str:
    """Local wall time, short, for a bar: "06:00" within the next 24 hours (tonight or
    tomorrow morning reads right), "Tue 06:00" within a week, else "2 Dec 06:00"."""
    local = instant.astimezone()
    ahead = instant - now
    if timedelta(0) <= ahead < timedelta(hours=24):
        return local.strftime("%H:%M")
    if timedelta(0) <= ahead < timedelta(days=7):
        return local.strftime("%a %H:%M")
    return f"{local.day} {local.strftime('%b %H:%M')}"


def interactive() -> bool:
    """A person is at a terminal: stdin and stdout are both ttys."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def ask_yes(question: str, default: bool = True) -> bool:
    """Ask on the terminal; Enter takes the default, end of input means no."""
    hint = "[Y/n]" if default else "[y/N]"
    while True:
        print(f"{question} {hint} ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            print(file=sys.stderr)
            return False
        answer = line.strip().lower()
        if not answer:
            return default
        if answer in ("y", "yes"):
            return True
        if answer in ("n", "no"):
            return False


_EVENT_STYLE = {
    "model_call": ("→", "blue"),
    "model_reply": ("←", "blue"),
    "model_text": ("…", "dim"),
    "tool_call": ("⚙", "bold"),
    "tool_result": (" ", "dim"),
    "tool_refused": ("✗", "red"),
    "escalated": ("⇧", "yellow"),
    "warn": ("!", "yellow"),
    "status": ("•", "green"),
    "log": ("·", "dim"),
    "copy_back": ("⇣", "dim"),
    "stderr": (" ", "dim"),
    "usage": ("$", "dim"),
    "start": ("▶", "green"),
    "end": ("■", "green"),
}


def _red(status: str) -> bool:
    """A run that ended one of these ways is shown red (by its status, never by words in its
    text: an ok run whose summary says "no failed logins" stays green). routines.runs is
    imported here, not at the top: `list` answered by the daemon does without it (its
    dataclasses and enum, ~5 ms)."""
    from routines.runs import STRIKES, RunStatus

    return status in STRIKES or status == RunStatus.INTERRUPTED


def format_event(
    kind: str, text: str, enabled: bool, ts: str | None = None, status: object = None
) -> str:
    """One line of a run as `run` and `logs` print it; `status` is the event data's."""
    mark, name = _EVENT_STYLE.get(kind, ("·", "dim"))
    if kind in ("status", "end") and isinstance(status, str) and _red(status):
        name = "red"
    stamp = ""
    if ts:
        stamp = color(one_line(str(ts)[11:19]), "dim", enabled) + " "
    # One line whatever the text holds: a newline in a refused command is shown as \n, not
    # obeyed, so it cannot forge a line of `run` or `logs`.
    return f"{stamp}{color(mark, name, enabled)} {one_line(str(text))}"
