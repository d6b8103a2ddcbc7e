"""What the state dir keeps, and deleting the rest: outputs, run logs and run conversations
older than `[ledger].keep_outputs_days`.

The state dir was writable from sandboxes in the first design, so nothing here walks it by
path: every directory is opened with O_NOFOLLOW relative to its parent's fd, every entry is
checked with lstat semantics, and a file is removed with unlinkat on that fd. A symlink is
never followed; a name that is not a plain file is left alone. Each routine keeps its newest
output and newest log whatever their age (`brief` and `logs` show them).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from routines.spec.outputs import OUTPUT_NAME

__all__ = [
    "CONVERSATION_NAME",
    "RUN_LOG_NAME",
    "Cutoffs",
    "cutoffs",
    "keep_days",
    "log_pruned",
    "prune_routine",
    "pruned_note",
    "routine_dirs",
]

# state/<name>/runs/<run-id>.jsonl, run ids 20261202T060012-day-brief-3f9a1c
# (supervisor/engine/jobs.py).
RUN_LOG_NAME = re.compile(r"^(\d{8}T\d{6})-[a-z0-9-]+\.jsonl$")
# state/<name>/runs/<run-id>.conversation.json, what `reply` continues (routines/conversation.py):
# kept as long as the run's log.
CONVERSATION_NAME = re.compile(r"^(\d{8}T\d{6})-[a-z0-9-]+\.conversation\.json$")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Cutoffs:
    outputs_before: date  # an output named for a day before this one is deleted
    logs_before: datetime  # a run log whose run started before this instant is deleted


def cutoffs(now: datetime, keep_days: int) -> Cutoffs:
    return Cutoffs(now.date() - timedelta(days=keep_days), now - timedelta(days=keep_days))


def _run_started(run_id: str) -> datetime | None:
    try:
        return datetime.strptime(run_id[:15], "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def log_pruned(run_id: str, keep_days: int, now: datetime) -> bool:
    """Whether run `run_id`'s log is past retention (for `logs --run`)."""
    started = _run_started(run_id)
    return started is not None and started < now - timedelta(days=keep_days)


def keep_days(config_file: Path) -> int:
    """`[ledger].keep_outputs_days` from config.toml (the default when it is invalid: the
    daemon refuses an invalid file, and then prunes nothing)."""
    from routines.spec.config import ConfigInvalid, LedgerSettings, load_config

    try:
        return load_config(config_file).ledger.keep_outputs_days
    except ConfigInvalid:
        return LedgerSettings().keep_outputs_days


def pruned_note(what: str, keep: int) -> str:
    return (
        f"{what} older than {keep} days were deleted "
        "(keep more with [ledger].keep_outputs_days in config.toml)"
    )


@contextlib.contextmanager
def _opendir(name: str, dir_fd: int | None = None) -> Iterator[int]:
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def routine_dirs(state_dir: str) -> list[str]:
    """The routines' directories under the state dir (no symlink, no dot dir, not shared)."""
    try:
        with _opendir(state_dir) as fd, os.scandir(fd) as entries:
            return sorted(
                e.name
                for e in entries
                if e.is_dir(follow_symlinks=False)
                and not e.name.startswith(".")
                and e.name != "shared"
            )
    except FileNotFoundError:
        return []


def _prune(dir_fd: int, pattern: re.Pattern[str], old: Callable[[re.Match[str]], bool]) -> int:
    """Unlink the plain files in `dir_fd` matching `pattern` that `old(match)` says are past
    retention, keeping the newest (by name, which sorts by time) whatever its age."""
    with os.scandir(dir_fd) as entries:
        names = sorted(
            e.name for e in entries if pattern.match(e.name) and e.is_file(follow_symlinks=False)
        )
    removed = 0
    for name in names[:-1]:
        m = pattern.match(name)
        if m and old(m):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
                removed += 1
    return removed


def prune_routine(state_dir: str, routine: str, cut: Cutoffs) -> int:
    """Delete `routine`'s outputs and run logs past `cut`; how many files went."""
    removed = 0
    try:
        with _opendir(state_dir) as top, _opendir(routine, top) as rd:
            removed += _prune(
                rd, OUTPUT_NAME, lambda m: date.fromisoformat(m.group(1)) < cut.outputs_before
            )
            with contextlib.suppress(FileNotFoundError), _opendir("runs", rd) as logs:

                def old_log(m: re.Match[str]) -> bool:
                    started = _run_started(m.group(1))
                    return started is not None and started < cut.logs_before

                removed += _prune(logs, RUN_LOG_NAME, old_log)
                removed += _prune(logs, CONVERSATION_NAME, old_log)
    except (FileNotFoundError, NotADirectoryError):
        pass  # removed meanwhile
    except OSError as exc:
        if exc.errno != errno.ELOOP:  # a symlink where a directory was: left alone
            raise
    return removed
