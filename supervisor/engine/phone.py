"""The optional push to the person's phone through ntfy ([notify.ntfy] in config.toml): when a
run pauses as "needs you" and when such a pause expires.

The daemon never imports httpx2 or the worker (test_daemon_agent.py, lint-imports), so it starts
`python -P -m worker.ntfy`, which sends through the worker's one connector, and hands it the
push on stdin (never argv: /proc/PID/cmdline is readable by every local user). What the push
says is decided here (`push_of`, pure): a title naming the routine, a fixed line, and a link
to the dashboard when config.toml names one ([notify.ntfy].dashboard_url); never the
request's content, never an approval (answering still needs the dashboard's session or the
CLI). Fire and forget: a thread waits for the process, bounded by a timeout; a failure is
one log line; the daemon's loop never waits (tests/supervisor/test_phone.py).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from typing import Any

import orjson

from routines.spec.config import NtfySettings
from routines.spec.paths import Paths
from supervisor.engine.finish import Notification

__all__ = ["EXPIRED", "WAITING", "WAIT_SEC", "argv", "push_of", "send", "start"]

log = logging.getLogger("vinos.phone")

WAIT_SEC = 20.0  # worker.ntfy's own request deadline is 10 s; then the process is killed
WAITING = "A run is waiting for you. Open the dashboard to answer."
EXPIRED = "Nobody answered its paused run in time; nothing ran."


def argv() -> list[str]:
    return [sys.executable, "-P", "-m", "worker.ntfy"]


def push_of(note: Notification, settings: NtfySettings, paths: Paths) -> dict[str, Any] | None:
    """worker.ntfy's input for `note` (pure), or None when it goes to no phone. It carries
    `note.phone` (the routine's name and what happened) and the dashboard's link only."""
    if note.phone is None:
        return None
    expired = note.phone_kind == "expired"
    return {
        "url": settings.url,
        "title": note.phone,
        "message": EXPIRED if expired else WAITING,
        "tags": "hourglass" if expired else "bell",
        "click": settings.dashboard_url,
        "token_file": str(paths.ntfy_token_file),
    }


def send(push: dict[str, Any], command: list[str] | None = None) -> bool:
    """Run worker.ntfy for `push` and wait for it (in a thread of its own: `start`); True
    when it was sent, else one warning saying why."""
    from supervisor.engine.spawn import worker_env  # the daemon has it loaded: one place knows

    try:
        done = subprocess.run(
            command or argv(),
            env=worker_env(),  # a PYTHONPATH that imports this very code, as a worker's
            input=orjson.dumps(push),
            capture_output=True,
            timeout=WAIT_SEC,
            check=False,
        )
    except subprocess.TimeoutExpired:
        log.warning("the ntfy push was not sent: no answer within %.0f s", WAIT_SEC)
        return False
    except OSError as exc:
        log.warning("the ntfy push was not sent: cannot start worker.ntfy: %s", exc.strerror)
        return False
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        log.warning("the ntfy push was not sent: %s", lines[-1] if lines else done.returncode)
        return False
    return True


def start(
    note: Notification, settings: NtfySettings | None, paths: Paths
) -> threading.Thread | None:
    """Send `note`'s push, if it has one and a topic is configured, without waiting."""
    if settings is None:
        return None
    push = push_of(note, settings, paths)
    if push is None:
        return None
    thread = threading.Thread(target=send, args=(push,), name="ntfy", daemon=True)
    thread.start()
    return thread
