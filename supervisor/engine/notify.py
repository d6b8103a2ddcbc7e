"""Desktop notifications through notify-send (libnotify). Absent: logged, never an error.

What a notification says is decided elsewhere (`supervisor.engine.finish.notifications_for`); this
module turns a run's markdown into a short body (`preview`) and shows it (`send`).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence

from routines.safetext import one_line, visible
from routines.spec import OutputType, Routine

__all__ = [
    "NOT_INSTALLED",
    "OPEN",
    "URGENCIES",
    "actions_in_force",
    "argv",
    "escape_markup",
    "preview",
    "send",
    "unshown",
    "wants_notifications",
]

log = logging.getLogger("vinos.notify")

URGENCIES = ("low", "normal", "critical")  # notify-send's levels
# A "needs you" notification's one action: it opens the dashboard, where the request is shown
# whole and answered in the session. Never Approve or Deny on the notification itself: no
# one-click approval outside the dashboard's session (docs/actions.md).
OPEN = ("open", "Open the dashboard")
WAIT_SEC = 24 * 3600  # how long a notification's action is listened for (needs_you_timeout's)
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


def argv(title: str, body: str, urgency: str, *, actions: bool = False) -> list[str] | None:
    """The notify-send command line, or None when notify-send is not installed; `actions`:
    with the OPEN action and --wait, where this notify-send takes them (`actions_in_force`)."""
    exe = shutil.which("notify-send")
    if exe is None:
        return None
    if urgency not in URGENCIES:
        urgency = "normal"
    listen = actions and _takes_actions(exe)
    return [
        exe,
        "--app-name=vinos-routine",
        f"--urgency={urgency}",
        *([f"--action={OPEN[0]}={OPEN[1]}", "--wait"] if listen else []),
        "--",
        # Model and command text: control characters and escapes shown, never acted on.
        _cut(one_line(" ".join(title.split())), TITLE_CHARS),
        escape_markup(_cut(visible(body.strip()), BODY_CHARS)),
    ]


_TAKES: dict[str, bool] = {}


def _takes_actions(exe: str) -> bool:
    """Whether this notify-send has --action (libnotify >= 0.7.10), asked once per binary."""
    if exe not in _TAKES:
        try:
            done = subprocess.run(
                [exe, "--help"], capture_output=True, text=True, timeout=5, check=False
            )
            _TAKES[exe] = "--action" in done.stdout
        except (OSError, subprocess.SubprocessError):
            _TAKES[exe] = False
    return _TAKES[exe]


def actions_in_force() -> tuple[bool, str]:
    """Whether a "needs you" notification carries its Open action here, and why (doctor)."""
    exe = shutil.which("notify-send")
    if exe is None:
        return False, "no notify-send: no desktop notification at all"
    if not _takes_actions(exe):
        return False, (
            f"{exe} has no --action (libnotify < 0.7.10): a plain notification naming the "
            "commands that answer"
        )
    return True, (
        f'a "needs you" notification has "{OPEN[1]}" where the notification server shows '
        "actions (a plain one otherwise)"
    )


def send(
    title: str,
    body: str,
    urgency: str = "normal",
    on_open: Sequence[str] | None = None,
    open_env: Mapping[str, str] | None = None,
) -> bool:
    """Show a notification; False (and a log line) when it could not be shown. `on_open`:
    the command the OPEN action runs (the dashboard), listened for off the caller's thread."""
    cmd = argv(title, body, urgency, actions=on_open is not None)
    if cmd is None:
        log.info("notify-send not installed; notification: %s: %s", title, body)
        return False
    if on_open is not None and "--wait" in cmd:
        return _send_listening(cmd, list(on_open), open_env, title) is not None
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


def _send_listening(
    cmd: list[str], on_open: list[str], open_env: Mapping[str, str] | None, title: str
) -> threading.Thread | None:
    """notify-send --wait prints the action chosen (or nothing when the notification is
    closed); a thread waits for it, at most WAIT_SEC, and runs `on_open` for OPEN. The
    thread, or None when notify-send could not start."""
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except OSError as exc:
        log.warning("notification not shown (%s): %s", exc, title)
        return None

    def listen() -> None:
        try:
            chosen, _ = proc.communicate(timeout=WAIT_SEC)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return
        if chosen.decode(errors="replace").strip() == OPEN[0]:
            try:
                subprocess.Popen(
                    on_open,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    env=dict(open_env) if open_env is not None else None,
                )
            except OSError as exc:
                log.warning("the dashboard did not open (%s)", exc)

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    return listener
