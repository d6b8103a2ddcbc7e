"""Reading what a sandbox could have written (run logs, outputs) without following links.

A routine's state dir is writable from its sandbox, so every open below it goes through
routines.store.read_beneath (O_NOFOLLOW at each step); sizes are capped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from routines.store import json_lines, read_beneath

__all__ = ["NAME", "RUN_ID", "read_beneath", "read_run_log"]

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
MAX_LOG = 4 << 20
MAX_OUTPUT = 1 << 20


def read_run_log(state_dir: Path, run_id: str) -> list[dict[str, Any]] | None:
    """The entries of state/NAME/runs/RUN.jsonl (a torn last line skipped); None if absent."""
    if not RUN_ID.match(run_id):
        return None
    data = read_beneath(state_dir, f"runs/{run_id}.jsonl", MAX_LOG)
    if data is None:
        return None
    return list(json_lines(data))
