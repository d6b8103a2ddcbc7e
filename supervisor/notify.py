"""Desktop notifications through notify-send (libnotify). Absent: logged, never an error."""

from __future__ import annotations

import logging
import shutil
import subprocess

__all__ = ["send"]

log = logging.getLogger("vinos.notify")


def argv(title: str, body: str, urgency: str) -> list[str] | None:
    """The notify-send command line, or None when notify-send is not installed."""
    exe = shutil.which("notify-send")
    if exe is None:
        return None
    return [exe, "--app-name=vinos-routine", f"--urgency={urgency}", "--", title, body]


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
