"""Delivering a run's output: the markdown file written into the run's scratch dir, and the
webhook POST.

The supervisor moves the file into the state store (and copies it for type = "file",
notifies for type = "notification"); the worker only ever writes inside scratch_dir.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ipc.messages import EventKind
from routines.safetext import redact_url
from routines.spec import OutputType
from routines.spec.outputs import output_name
from routines.store import open_dir_beneath, write_atomic_at
from worker.context import RunContext

__all__ = [
    "WEBHOOK_TIMEOUT",
    "Delivery",
    "post_webhook",
    "render_markdown",
    "render_title",
    "write_and_post",
    "write_output",
]

WEBHOOK_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where a run's output went. `undelivered` (the file could not be written: a full or
    read-only state dir) is a delivery problem beside the run's `ok`, never a failure: the
    run did its work, so it is no strike (tests/supervisor/test_daemon_state_dir.py)."""

    output_file: str | None  # the file's name in scratch_dir; None when it was not written
    undelivered: str | None = None
    webhook_error: str | None = None  # the webhook refused it: the run failed

    @property
    def error(self) -> str | None:
        return self.webhook_error or self.undelivered


def write_and_post(run: RunContext, body: str) -> Delivery:
    """Render and write the output file; POST it for a webhook routine."""
    spec = run.routine.output
    title = render_title(spec.title, name=run.name, started=run.started)
    name = output_name(run.started)
    markdown = render_markdown(title, body)
    try:
        write_output(Path(run.job.state_dir), Path(run.job.scratch_dir), name, markdown)
    except (OSError, ValueError) as exc:  # a full or read-only state dir, a planted link
        why = getattr(exc, "strerror", None) or exc
        problem = f"output not delivered: could not write it into {run.job.scratch_dir}: {why}"
        run.channel.warn(problem)
        return Delivery(None, undelivered=problem)
    # Not named here: the supervisor stores it under a name of its own choosing (NAME-2.md
    # when a run of the same minute has NAME.md), and says that name once it is delivered
    # (tests/cli/test_cli_run_output.py).
    run.channel.event(EventKind.LOG, "output ready for delivery")
    if spec.type is not OutputType.WEBHOOK or not spec.url:
        return Delivery(name)
    error = post_webhook(
        spec.url,
        {
            "routine": run.name,
            "run_id": run.job.run_id,
            "started_at": run.job.started_at,
            "title": title,
            "markdown": markdown,
            "outcome": run.outcome,
            "summary": run.outcome_summary,
        },
    )
    if error:
        run.channel.warn(error)
    else:
        run.channel.event(EventKind.LOG, f"webhook delivered: {redact_url(spec.url)}")
    return Delivery(name, webhook_error=error)


def render_title(template: str, *, name: str, started: datetime) -> str:
    """`{{date}}` → 2026-07-25, `{{time}}` → 06:00, `{{name}}` → the routine's name."""
    return (
        template.replace("{{date}}", started.strftime("%Y-%m-%d"))
        .replace("{{time}}", started.strftime("%H:%M"))
        .replace("{{name}}", name)
    )


def render_markdown(title: str, body: str) -> str:
    title = " ".join(title.split())
    text = body.strip("\n")
    return f"# {title}\n\n{text}\n" if title else f"{text}\n"


def write_output(state_dir: Path, scratch_dir: Path, name: str, text: str) -> Path:
    """Write `name` inside scratch_dir (below state_dir) atomically, mode 0600, through
    directory fds opened with O_NOFOLLOW from state_dir down: no link is followed."""
    import os

    relative = str(scratch_dir.relative_to(state_dir))
    fd = open_dir_beneath(state_dir, relative, make=True)
    try:
        write_atomic_at(fd, name, text.encode("utf-8"), 0o600)
    finally:
        os.close(fd)
    return scratch_dir / name


def post_webhook(url: str, payload: dict[str, Any], timeout: float = WEBHOOK_TIMEOUT) -> str | None:
    """POST the output as JSON, once (never retried, no redirects followed); the error
    message, or None on 2xx."""
    from worker import connector, webclient

    # The URL is a credential (Slack, Discord and ntfy carry the token in it): only its
    # scheme and host reach an error, the ledger, a log line or the CLI.
    shown = redact_url(url)
    try:
        # The payload goes to the URL the user wrote and nowhere else: a 3xx is an answer.
        # A port of this machine must be held by us or root (the connector decides, as the
        # connection is made: tests/worker/test_worker_squatter.py's webhook chain).
        resp = webclient.shared().post_json(
            url,
            payload,
            timeout=timeout,
            redirects=webclient.Redirects.NONE,
            max_body=1 << 20,
            trust=connector.WEBHOOK,
        )
    except connector.Refused as exc:
        return str(exc)
    except webclient.TimedOut:
        return f"webhook {shown} did not answer within {timeout:.0f} s"
    except webclient.HttpError as exc:
        return f"webhook {shown} failed: {_scrub(str(exc), url)}"
    if not 200 <= resp.status < 300:
        return f"webhook {shown} answered HTTP {resp.status}"
    return None


def _scrub(text: str, url: str) -> str:
    """`text` without the URL or its path and query, wherever an error message quoted them."""
    _, _, rest = url.partition("://")
    _, slash, tail = rest.partition("/")
    for secret in (url, slash + tail if slash else "", rest):
        if len(secret) > 1:
            text = text.replace(secret, "…")
    return text
