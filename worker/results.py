"""The Result of a run that did not succeed, built in one place for every kind of run: the
whole message is the error, its first line the summary."""

from __future__ import annotations

from msgspec.structs import replace

from ipc.messages import Result, RunStatus

__all__ = ["first_line", "run_failed"]

SUMMARY_LIMIT = 200  # characters of a one-line summary


def first_line(text: str, limit: int = SUMMARY_LIMIT) -> str:
    """The first non-blank line, without a markdown heading's `#`, cut at `limit`."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = line.lstrip("#").strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def run_failed(
    message: str, *, status: RunStatus = RunStatus.FAILED, base: Result | None = None
) -> Result:
    """`base` (its route, model, tool counts) ended as `status` (failed or timeout) because
    of `message`."""
    start = base or Result(status=status)
    return replace(start, status=status, summary=first_line(message), error=message)
