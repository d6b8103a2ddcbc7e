"""Delivering a run's output: the markdown file in scratch_dir, and the webhook POST."""

from __future__ import annotations

from pathlib import Path

from ipc.messages import EventKind
from routines.safetext import redact_url
from routines.spec import OutputType
from worker.context import RunContext
from worker.output import output_name, post_webhook, render_markdown, render_title, write_output

__all__ = ["write_and_post"]


def write_and_post(run: RunContext, body: str) -> tuple[str | None, str | None]:
    """Render and write the output file; POST it for a webhook routine. Returns the file's
    name in scratch_dir (None when it could not be written) and the error, if any."""
    spec = run.routine.output
    title = render_title(spec.title, name=run.name, started=run.started)
    name = output_name(run.started)
    markdown = render_markdown(title, body)
    try:
        write_output(Path(run.job.state_dir), Path(run.job.scratch_dir), name, markdown)
    except (
        OSError,
        ValueError,
    ) as exc:  # a full or read-only state dir, a planted link: the run failed, it did not crash
        why = getattr(exc, "strerror", None) or exc
        return None, f"could not write the output into {run.job.scratch_dir}: {why}"
    run.channel.event(EventKind.LOG, f"output written: {name}", output_file=name)
    if spec.type is not OutputType.WEBHOOK or not spec.url:
        return name, None
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
    return name, error
