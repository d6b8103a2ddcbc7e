"""Reading what a sandbox could have written (run logs, outputs) without following links.

A routine's state dir is writable from its sandbox, so every open below it goes through
routines.store.open_beneath (O_NOFOLLOW at each step); sizes are capped.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import orjson

from routines.store import open_beneath

__all__ = ["NAME", "RUN_ID", "read_beneath", "read_run_log"]

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
MAX_LOG = 4 << 20
MAX_OUTPUT = 1 << 20


def read_beneath(base: Path, relative: str, limit: int) -> bytes | None:
    """Up to `limit` bytes of the regular file base/relative; None when it is missing, a
    symlink anywhere below `base`, or not a regular file."""
    try:
        fd = open_beneath(base, relative, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while size < limit and (chunk := os.read(fd, min(1 << 16, limit - size))):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_run_log(state_dir: Path, run_id: str) -> list[dict[str, Any]] | None:
    """The entries of state/NAME/runs/RUN.jsonl (a torn last line skipped); None if absent."""
    if not RUN_ID.match(run_id):
        return None
    data = read_beneath(state_dir, f"runs/{run_id}.jsonl", MAX_LOG)
    if data is None:
        return None
    entries = []
    for line in data.splitlines():
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries
