"""Run memory: persistent (state/<name>/memory.md) and shared
(state/shared/memory.md); session memory keeps nothing.

The file is plain markdown the user may read, edit or delete. It holds at most CAP
characters: an append that would pass it trims the oldest ~TRIM_STEP characters, realigned
to the next newline, until it fits. Appends from concurrent runs are serialised with an
flock on `<file>.lock` and land by temp file + rename, so a reader never sees half a file
and two runs never lose each other's entries.
"""

from __future__ import annotations

import fcntl
import os
from datetime import datetime
from pathlib import Path

__all__ = [
    "CAP",
    "PREFIX",
    "TRIM_STEP",
    "append",
    "entry",
    "for_prompt",
    "summary_request",
    "trim",
]

CAP = 4096
TRIM_STEP = 500
READ_CAP = 4 * CAP + 4096  # bytes of the file read before an append
PREFIX = "Prior context from earlier runs"
SUMMARY_MAX_TOKENS = 200
_SUMMARY_INPUT_CHARS = 6000


def trim(text: str, cap: int = CAP, step: int = TRIM_STEP) -> str:
    """Drop the oldest ~`step` characters, up to the next newline, until `text` fits `cap`.

    Linear: the cut point moves forward over the text and the text is sliced once (a slice
    per step made a hand-grown 10 MB file cost seconds of CPU)."""
    start = 0
    while len(text) - start > cap:
        cut = text.find("\n", start + step)
        start = cut + 1 if cut != -1 else start + step
    return text[start:] if start else text


def for_prompt(text: str, cap: int = CAP) -> str:
    """The memory as prepended to the user turn: the newest `cap` characters at most,
    starting on a line boundary (the user may have grown the file by hand)."""
    text = text.strip("\n")
    if len(text) <= cap:
        return text
    tail = text[-cap:]
    nl = tail.find("\n")
    return tail[nl + 1 :] if nl != -1 else tail


def entry(routine: str, started: datetime, summary: str) -> str:
    """One journal entry: a heading naming the run, then the summary."""
    body = " ".join(summary.split())
    return f"## {started:%Y-%m-%d %H:%M} · {routine}\n{body}\n"


def append(path: Path, new_entry: str, cap: int = CAP) -> None:
    """Append an entry under the lock, trimming to `cap`, replacing the file atomically.

    Everything relative to an O_NOFOLLOW fd on the memory's directory, every open O_NOFOLLOW.
    """
    from routines.store import open_dir

    dfd = open_dir(path.parent, make=True)
    try:
        _append_at(dfd, path.name, new_entry, cap)
    finally:
        os.close(dfd)


def _append_at(dfd: int, name: str, new_entry: str, cap: int) -> None:
    from routines.store import read_regular_at, write_atomic_at

    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(name + ".lock", flags, 0o600, dir_fd=dfd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)

        # Never through a symlink: older versions let the sandbox write the state dir, and a
        # planted memory.md -> ~/.ssh/id_rsa must not end up in the journal (and so in a prompt).
        # The atomic write below then replaces such a link with a real file.
        # Capped: only the newest CAP characters survive the trim, and a hand-grown file of
        # any size must not be read whole (4 bytes a character at most, plus the new entry).
        data = read_regular_at(dfd, name, READ_CAP)
        current = data.decode("utf-8", errors="replace") if data else ""
        # Entries are separated by one blank line.
        current = current.rstrip("\n") + "\n\n" if current.strip() else ""
        write_atomic_at(dfd, name, trim(current + new_entry, cap).encode("utf-8"), 0o600)
    finally:
        os.close(fd)  # releases the flock


def summary_request(routine: str, outcome: str | None, output: str) -> tuple[str, str]:
    """(system, user) for the one cheap local call that writes the summary."""
    system = (
        "You keep a short journal of what the user's scheduled routines found and did. "
        "Write 2-3 plain sentences about this run: facts worth remembering next time. "
        "No preamble, no headings, no lists."
    )
    clipped = output if len(output) <= _SUMMARY_INPUT_CHARS else output[:_SUMMARY_INPUT_CHARS]
    user = f"Routine: {routine}\nOutcome: {outcome or 'not reported'}\nOutput:\n{clipped}"
    return system, user
