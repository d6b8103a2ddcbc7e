"""Which outputs `brief` has shown: state/brief-seen.json, {"seen": {"ROUTINE/FILE.md": when}}.

An output of a routine with [output].open_on_login stays unseen until `brief` shows it (in
full, or through --open); `brief --unseen` lists those. The file is changed under a lock and
replaced atomically; entries for outputs older than KEEP_DAYS are dropped as it is written.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

__all__ = ["KEEP_DAYS", "UNSEEN_DAYS", "load_seen", "mark_seen", "seen_file", "unseen_count"]

KEEP_DAYS = 60
UNSEEN_DAYS = 7  # `brief --unseen` without --date, and the bar, look back this far


def seen_file(state_dir: Path) -> Path:
    return state_dir / "brief-seen.json"


def load_seen(state_dir: Path) -> set[str]:
    """The keys ("ROUTINE/FILE.md") of outputs shown before; empty when none or unreadable."""
    from routines.store import read_json

    data = read_json(seen_file(state_dir))
    seen = data.get("seen") if isinstance(data, dict) else None
    return set(seen) if isinstance(seen, dict) else set()


def _day_of(key: str) -> date | None:
    from routines.spec.outputs import output_day

    return output_day(key.rsplit("/", 1)[-1])


def mark_seen(state_dir: Path, keys: Iterable[str], now: datetime | None = None) -> None:
    """Record `keys` as shown (read, merge and replace under a lock: two `brief`s at once lose
    nothing)."""
    from routines.runs import slot_id
    from routines.store import read_json, write_json_atomic

    keys = list(keys)
    if not keys:
        return
    now = now or datetime.now(UTC)
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = state_dir / ".brief-seen.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = read_json(seen_file(state_dir))
        seen = data.get("seen") if isinstance(data, dict) else None
        merged: dict[str, str] = dict(seen) if isinstance(seen, dict) else {}
        stamp = slot_id(now)  # the instant to the second, as slot ids write it
        for key in keys:
            merged.setdefault(key, stamp)
        oldest = now.date() - timedelta(days=KEEP_DAYS)
        kept = {k: v for k, v in merged.items() if (_day_of(k) or now.date()) >= oldest}
        write_json_atomic(seen_file(state_dir), {"version": 1, "seen": dict(sorted(kept.items()))})
    finally:
        os.close(fd)


def unseen_count(state_dir: Path, routines: set[str], today: date) -> int:
    """How many outputs of `routines` (those with open_on_login) from the last UNSEEN_DAYS
    days no brief has shown: file names only, no ledger (for the bar, polled often)."""
    from routines.spec.outputs import output_files

    if not routines:
        return 0
    days = {today - timedelta(days=n) for n in range(UNSEEN_DAYS)}
    seen = load_seen(state_dir)
    return sum(
        1
        for routine, path, _, _ in output_files(state_dir, days)
        if routine in routines and f"{routine}/{path.name}" not in seen
    )
