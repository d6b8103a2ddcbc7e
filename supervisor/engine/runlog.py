"""A run's event log: state/<name>/runs/<run-id>.jsonl, one JSON object a line, appended and
flushed as things happen, so `logs` and `logs --follow` can read a run while it goes on."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from ipc import Event, Usage
from routines.store import open_beneath

__all__ = ["RunLog", "read_log"]


class RunLog:
    def __init__(self, path: Path, base: Path | None = None) -> None:
        """Append to `path`; with `base` (the routine's state dir, which older versions let
        its sandbox write), open it without following any symlink below `base`."""
        self.path = path
        self._fd: int | None = None
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        try:
            if base is not None:
                base.mkdir(parents=True, exist_ok=True)
                rel = str(path.relative_to(base))
                self._fd = open_beneath(base, rel, flags, 0o600, make_dirs=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except (OSError, ValueError):
            # A read-only or full state dir must not stop the run from being recorded in the
            # ledger; the run log is then simply absent.
            self._fd = None

    def write(self, kind: str, text: str, data: dict[str, Any] | None = None) -> None:
        if self._fd is None:
            return
        entry: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "kind": kind,
            "text": text,
        }
        if data:
            entry["data"] = data
        with contextlib.suppress(OSError):
            os.write(self._fd, orjson.dumps(entry) + b"\n")

    def event(self, event: Event) -> None:
        self.write(event.kind, event.text, event.data or None)

    def usage(self, u: Usage) -> None:
        self.write(
            "usage",
            f"tokens in {u.input} out {u.output} local {u.local_input}/{u.local_output} "
            f"${u.dollars:.4f}",
            {
                "input": u.input,
                "output": u.output,
                "local_input": u.local_input,
                "local_output": u.local_output,
                "dollars": u.dollars,
                "model": u.model,
            },
        )

    def stderr(self, line: str) -> None:
        self.write("stderr", line)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_log(path: Path) -> Iterator[dict[str, Any]]:
    """The entries of a run log; a torn last line (a crash mid-write) is skipped. Never
    through a symlink: `logs` must not print a file a link points at."""
    from routines.store import json_lines, read_regular

    data = read_regular(path)
    if data is not None:
        yield from json_lines(data)
