"""Desktop notifications through notify-send (libnotify). Absent: logged, never an error.

What a notification says is decided elsewhere (`supervisor.engine.finish.notifications_for`); this
module turns a run's markdown into a short body (`preview`) and shows it (`send`).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess

from routines.safetext import one_line, visible
from routines.spec import OutputType, Routine

__all__ = [
    "NOT_INSTALLED",
    "URGENCIES",
    "argv",
    "escape_markup",
    "preview",
    "send",
    "unshown",
    "wants_notifications",
]

log = logging.getLogger("vinos.notify")

URGENCIES = ("low", "normal", "critical")  # notify-send's levels
TITLE_CHARS = 120
BODY_CHARS = 600

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+")
_EMPHASIS = re.compile(r"(\*\*|__)(.+?)\1")


# Said once by `run`, `logs` (a line in the run's log), `validate` and `status` when a routine
# asks for notifications and none can show (tests/cli/test_cli_notify.py).
NOT_INSTALLED = (
    "notify-send is not installed, so no desktop notification shows (Debian: sudo apt-get "
    "install libnotify-bin; Arch: sudo pacman -S libnotify)"
)


def wants_notifications(routine: Routine) -> bool:
    """`notify = true` or `type = "notification"`: a finished run shows on the desktop."""
    return routine.output.notify or routine.output.type is OutputType.NOTIFICATION


def unshown(routine: Routine) -> str | None:
    """Why `routine`'s notifications will not show on this machine, or None."""
    if wants_notifications(routine) and shutil.which("notify-send") is None:
        return f"{routine.name} asks for desktop notifications, but {NOT_INSTALLED}"
    return None


def preview(markdown: str, lines: int = 4, chars: int = 300, skip_title: bool = True) -> str:
    """The first lines of an output as a notification body: blank lines dropped, the output's
    own `# title` line skipped (the notification has a title), heading marks and bold removed,
    cut at `chars` with an ellipsis."""
    kept: list[str] = []
    for i, raw in enumerate(markdown.strip().splitlines()):
        line = raw.rstrip()
        if not line.strip():
            continue
        if i == 0 and skip_title and line.startswith("# "):
            continue
        line = _EMPHASIS.sub(r"\2", _HEADING.sub("", line))
        kept.append(line)
        if len(kept) == lines:
            break
    body = "\n".join(kept)
    return body if len(body) <= chars else body[: chars - 1].rstrip() + "…"


def escape_markup(text: str) -> str:
    """Notification servers (mako, dunst, GNOME) read the body as a subset of HTML: an output
    with `<` or `&` in it would show wrongly or not at all."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def argv(title: str, body: str, urgency: str) -> list[str] | None:
    """The notify-send command line, or None when notify-send is not installed."""
    exe = shutil.which("notify-send")
    if exe is None:
        return None
    if urgency not in URGENCIES:
        urgency = "normal"
    return [
        exe,
        "--app-name=vinos-routine",
        f"--urgency={urgency}",
        "--",
        # Model and command text: control characters and escapes shown, never acted on.
        _cut(one_line(" ".join(title.split())), TITLE_CHARS),
        escape_markup(_cut(visible(body.strip()), BODY_CHARS)),
    ]


def send(title: str, body: str, urgency: str = "normal") -> bool:
    """Show a notification; False (and a log line) when it could not be shown."""
    cmd = argv(title, body, urgency)
    if cmd is None:
        log.info("notify-send not installed; notification: %s: %s", title, body)
        return False
    try:
        subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("notification not shown (%s): %s: %s", exc, title, body)
        return False
    return True
