"""The run's output: markdown written into the run's scratch dir, and the webhook POST.

The supervisor moves the file into the state store (and copies it for type = "file",
notifies for type = "notification"); the worker only ever writes inside scratch_dir.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from routines.store import write_atomic

__all__ = [
    "WEBHOOK_TIMEOUT",
    "output_name",
    "post_webhook",
    "render_markdown",
    "render_title",
    "write_output",
]

WEBHOOK_TIMEOUT = 10.0


def render_title(template: str, *, name: str, started: datetime) -> str:
    """`{{date}}` → 2026-07-25, `{{time}}` → 06:00, `{{name}}` → the routine's name."""
    return (
        template.replace("{{date}}", started.strftime("%Y-%m-%d"))
        .replace("{{time}}", started.strftime("%H:%M"))
        .replace("{{name}}", name)
    )


def output_name(started: datetime) -> str:
    """YYYY-MM-DD-HHMM.md, in the routine's zone (`started` carries its offset)."""
    return started.strftime("%Y-%m-%d-%H%M.md")


def render_markdown(title: str, body: str) -> str:
    title = " ".join(title.split())
    text = body.strip("\n")
    return f"# {title}\n\n{text}\n" if title else f"{text}\n"


def write_output(scratch_dir: Path, name: str, text: str) -> Path:
    """Write `name` inside scratch_dir atomically (temp file + rename), mode 0600."""
    scratch_dir.mkdir(parents=True, exist_ok=True)
    target = scratch_dir / name
    write_atomic(target, text.encode("utf-8"), 0o600)
    return target


def post_webhook(url: str, payload: dict[str, Any], timeout: float = WEBHOOK_TIMEOUT) -> str | None:
    """POST the output as JSON, once (never retried, no redirects followed); the error
    message, or None on 2xx."""
    from worker import webclient

    try:
        # The payload goes to the URL the user wrote and nowhere else: a 3xx is an answer.
        resp = webclient.shared().post_json(
            url, payload, timeout=timeout, redirects=webclient.Redirects.NONE, max_body=1 << 20
        )
    except webclient.TimedOut:
        return f"webhook {url} did not answer within {timeout:.0f} s"
    except webclient.HttpError as exc:
        return f"webhook {url} failed: {exc}"
    if not 200 <= resp.status < 300:
        return f"webhook {url} answered HTTP {resp.status}"
    return None
