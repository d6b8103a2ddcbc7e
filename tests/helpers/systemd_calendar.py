"""`systemd-analyze calendar` as the oracle for OnCalendar and the cron translator.

The tests FAIL (never skip) when it is missing: it is the only independent judge of what
systemd means by an expression. Debian/Ubuntu and Arch ship it in the `systemd` package;
`make test` run as root installs it (scripts/system-deps.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from routines.schedule.pattern import Pattern

__all__ = [
    "Calendar",
    "Job",
    "analyze",
    "analyze_jobs",
    "is_transition_day",
    "job_key",
    "load_golden",
    "require_systemd_analyze",
    "save_golden",
    "systemd_model",
    "transitions",
]


def require_systemd_analyze() -> str:
    path = shutil.which("systemd-analyze") or (
        "/usr/bin/systemd-analyze" if os.path.exists("/usr/bin/systemd-analyze") else None
    )
    if path is None:
        pytest.fail(
            "systemd-analyze is missing; it is the oracle for OnCalendar and the translator. "
            "Install the `systemd` package (apt-get install systemd, or pacman -S systemd); "
            "`make test` as root does it through scripts/system-deps.sh"
        )
    return path


@dataclass(frozen=True)
class Calendar:
    """What systemd-analyze said about one expression."""

    expression: str
    normalized: str | None  # None when systemd refused the expression
    elapses: tuple[datetime, ...]  # aware UTC, oldest first
    stderr: str


def _stamp(line: str) -> datetime:
    # "Sun 2025-11-02 04:30:00 UTC"
    _, day, clock, _zone = line.split()
    return datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=UTC)


def analyze(expression: str, zone: str, base: datetime, iterations: int = 20) -> Calendar:
    """One `systemd-analyze calendar` run with TZ=zone from `base` (aware)."""
    exe = require_systemd_analyze()
    proc = subprocess.run(
        [
            exe,
            "calendar",
            f"--iterations={iterations}",
            f"--base-time=@{int(base.timestamp())}",
            expression,
        ],
        capture_output=True,
        text=True,
        env={"TZ": zone, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "SYSTEMD_PAGER": ""},
        timeout=60,
        check=False,
    )
    normalized = None
    in_utc: list[datetime] = []
    local: list[datetime] = []
    for line in proc.stdout.splitlines():
        key, _, value = line.strip().partition(": ")
        if key == "Normalized form":
            normalized = value.strip()
        elif key == "(in UTC)":
            in_utc.append(_stamp(value))
        elif (key == "Next elapse" or key.startswith("Iter. #")) and value.endswith(" UTC"):
            local.append(_stamp(value))
    elapses = in_utc or local  # with TZ=UTC there are no "(in UTC)" lines
    return Calendar(expression, normalized, tuple(elapses), proc.stderr)


# One systemd-analyze question: (expression, TZ, base time, iterations).
Job = tuple[str, str, datetime, int]


def job_key(job: Job) -> str:
    expression, zone, base, iterations = job
    return f"{expression}\t{zone}\t{int(base.timestamp())}\t{iterations}"


def save_golden(path: Path, answers: Mapping[Job, Calendar]) -> None:
    """systemd-analyze's answers as a golden file (sorted, one object per job)."""
    rows = {
        job_key(job): {
            "normalized": cal.normalized,
            "elapses": [int(e.timestamp()) for e in cal.elapses],
            "stderr": cal.stderr,
        }
        for job, cal in answers.items()
    }
    lines = [f"{json.dumps(k)}: {json.dumps(rows[k])}" for k in sorted(rows)]
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # one job a line: readable diffs


def load_golden(path: Path) -> dict[str, Calendar]:
    rows = json.loads(path.read_text())
    return {
        key: Calendar(
            key.split("\t", 1)[0],
            row["normalized"],
            tuple(datetime.fromtimestamp(e, UTC) for e in row["elapses"]),
            row["stderr"],
        )
        for key, row in rows.items()
    }


def analyze_jobs(jobs: Iterable[Job]) -> dict[Job, Calendar]:
    """Several runs at once, each with its own iteration count."""
    jobs = list(jobs)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda j: analyze(j[0], j[1], j[2], j[3]), jobs))
    return dict(zip(jobs, results, strict=True))


def systemd_model(pattern: Pattern, zone: ZoneInfo, base: datetime, n: int) -> list[datetime]:
    """systemd's own DST behaviour applied to our pattern, for a base outside a repeated hour.

    systemd walks wall-clock times in order: a time in a spring-forward gap does not happen,
    and a time in a repeated hour happens once, in the first pass. (From a base inside the
    second pass it would use the second pass; the corpus does not start there.)
    """
    out: list[datetime] = []
    t = base.astimezone(UTC)
    wall = t.astimezone(zone).replace(tzinfo=None, fold=0)
    while len(out) < n:
        got = pattern.next_wall(wall)
        if got is None:
            break
        wall = got
        first = got.replace(tzinfo=zone).utcoffset()
        second = got.replace(tzinfo=zone, fold=1).utcoffset()
        assert first is not None and second is not None
        if first < second:
            continue  # in the gap
        instant = (got - first).replace(tzinfo=UTC)
        if instant > t:
            out.append(instant)
            t = instant
    return out


def transitions(zone: str, year: int) -> list[datetime]:
    """The UTC instants in `year` at which `zone` changes its UTC offset."""
    tz = ZoneInfo(zone)
    out = []
    t = datetime(year, 1, 1, tzinfo=UTC)
    end = datetime(year + 1, 1, 1, tzinfo=UTC)
    step = timedelta(hours=6)
    while t < end:
        a, b = t.astimezone(tz).utcoffset(), (t + step).astimezone(tz).utcoffset()
        if a != b:
            lo, hi = t, t + step
            while hi - lo > timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(tz).utcoffset() == a:
                    lo = mid
                else:
                    hi = mid
            out.append(hi.replace(microsecond=0))
        t += step
    return out


def is_transition_day(zone: ZoneInfo, instant: datetime) -> bool:
    """Whether the local date of `instant` has a UTC-offset change in it."""
    d: date = instant.astimezone(zone).date()
    start = datetime(d.year, d.month, d.day, tzinfo=zone)
    end = start + timedelta(days=1)  # wall-clock arithmetic: the next local midnight
    return start.utcoffset() != end.utcoffset()
