"""A run's output file name, state/<name>/YYYY-MM-DD-HHMM[-N].md, in one place.

The worker names the file for the run's start in the routine's zone (`output_name`); the
supervisor adds `-2`, `-3`, … when two runs of one minute collide (routines/store.py
`deliver_output`); `brief`, `status --waybar`, retention and [output].path read the day back
(`OUTPUT_NAME`, `output_day`). `output_files` lists them without following a link.
"""

from __future__ import annotations

import os
import re
from datetime import date, datetime
from pathlib import Path

__all__ = ["OUTPUT_NAME", "output_day", "output_files", "output_name"]

# Group 1 is the day. Anything else in a routine's dir (memory.md, runs/) does not match.
OUTPUT_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})-\d{4}(?:-\d+)?\.md$")

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def output_name(started: datetime) -> str:
    """YYYY-MM-DD-HHMM.md, in the routine's zone (`started` carries its offset)."""
    return started.strftime("%Y-%m-%d-%H%M.md")


def output_day(name: str) -> date | None:
    """The day an output file is named for; None when `name` is not an output's name."""
    m = OUTPUT_NAME.match(name)
    return date.fromisoformat(m.group(1)) if m else None


def output_files(state_dir: Path, days: set[date]) -> list[tuple[str, Path, date, float]]:
    """(routine, path, day, mtime) of the output files of `days`: regular files only, found
    through directory fds opened with O_NOFOLLOW, never following a link."""
    found: list[tuple[str, Path, date, float]] = []
    try:
        root = os.open(state_dir, _DIR)
    except OSError:
        return found
    try:
        with os.scandir(root) as entries:
            names = [
                d.name for d in entries if d.is_dir(follow_symlinks=False) and d.name != "shared"
            ]
        for name in names:
            if not name.startswith("."):
                found += _outputs_in(root, name, state_dir / name, days)
    finally:
        os.close(root)
    return found


def _outputs_in(
    root: int, name: str, where: Path, days: set[date]
) -> list[tuple[str, Path, date, float]]:
    found: list[tuple[str, Path, date, float]] = []
    try:
        fd = os.open(name, _DIR, dir_fd=root)
    except OSError:
        return found
    try:
        with os.scandir(fd) as files:
            for f in files:
                day = output_day(f.name)
                if day is None or day not in days or not f.is_file(follow_symlinks=False):
                    continue
                mtime = f.stat(follow_symlinks=False).st_mtime
                found.append((name, where / f.name, day, mtime))
    finally:
        os.close(fd)
    return found
