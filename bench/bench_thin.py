"""The CLI's reads: `list`, `status` and `history NAME` at 10, 1,000 and 10,000 routines, the
daemon up (`list` and `status` ask it for rows, supervisor/cli/reads.py, and render them) and
down (read from the files and the ledger),
through the launcher of a non-editable install (bench/installed.py), against that venv's
`python -c pass` measured in the same run, interleaved in halves.

Targets: `list` with 10 routines (daemon up) at most 2.5x `python -c pass`; `list` with
10,000 at most 300 ms; `history` of one routine with 10,000 at most 150 ms. And the daemon's
idle RSS after all those answers at most 5 MB above its own idle RSS after the first answer
of each verb (what answering loads once), measured in the same run; the row shows the idle
RSS before any answer too.

    python -m bench thin                 # VINOS_BENCH_THIN_SIZES=10,1000 to leave out 10,000
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.bench_supervisor import Home, _far_day
from bench.common import Row, median_seconds
from bench.installed import install

TARGET_LIST_10_RATIO = 2.5
TARGET_LIST_10000_MS = 300.0
TARGET_HISTORY_10000_MS = 150.0
TARGET_RSS_GROWTH_MB = 5.0


def _routine(i: int, day: int, month: int) -> str:
    # 1,440 distinct schedules, on a day half a year away: nothing comes due while measured.
    cron = f"{i % 60} {(i // 60) % 24} {day} {month} *"
    return (
        f'[routine]\nkind = "command"\nenabled = {str(i % 3 != 0).lower()}\n'
        f'[schedule]\ncron = "{cron}"\ntimezone = "UTC"\n[command]\nrun = "true"\n'
    )


def _history_rows(home: Home, name: str, runs: int) -> None:
    from routines.ledger import Ledger
    from routines.runs import Outcome, RunEnd, RunStatus, Trigger

    start = datetime.now(UTC) - timedelta(days=1)
    with Ledger(home.routines / "state" / "ledger.db") as led:
        for i in range(runs):
            at = start + timedelta(minutes=i)
            led.record_run(
                name, run_id=f"b{i}", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=at
            )
            end = RunEnd(status=RunStatus.OK, outcome=Outcome.DONE, dollars=0.01)
            led.finish_run(f"b{i}", now=at, end=end)


def _runner(cmd: list[str], env: dict[str, str]) -> Callable[[], None]:
    def go() -> None:
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)

    return go


def _measure(
    commands: dict[str, Callable[[], None]], bare: Callable[[], None], repeat: int
) -> tuple[dict[str, float], float]:
    """Medians in seconds, each command and the bare interpreter measured in two halves."""
    for go in (bare, *commands.values()):
        go()  # warm up: bytecode compiled and cached, page cache filled
    half = max(1, repeat // 2)
    first = {n: median_seconds(go, half) for n, go in commands.items()}
    bare_first = median_seconds(bare, half)
    second = {n: median_seconds(go, half) for n, go in reversed(commands.items())}
    bare_s = (bare_first + median_seconds(bare, half)) / 2
    return {n: (first[n] + second[n]) / 2 for n in commands}, bare_s


def _idle_rss_mb(pid: int) -> float:
    """The daemon's RSS once it is idle: sampled until two readings a second apart agree
    within 0.2 MB (start-up and the last answer's tail settle first), at most 30 s."""
    import psutil

    proc = psutil.Process(pid)
    last = float(proc.memory_info().rss) / 1e6
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = float(proc.memory_info().rss) / 1e6
        if abs(now - last) < 0.2:
            return now
        last = now
    return last


def _rss_row(size: int, idle: float, before: float, after: float, answers: int) -> Row:
    growth = after - before
    return Row(
        f"daemon RSS after answering list/status/history x{answers} ({size} routines)",
        growth,
        "MB added",
        baseline=(
            f"same daemon after each verb's first answer: {before:.1f} MB"
            f" (before any: {idle:.1f} MB, after all: {after:.1f} MB)"
        ),
        target=f"<= +{TARGET_RSS_GROWTH_MB:.0f} MB",
        met=growth <= TARGET_RSS_GROWTH_MB,
    )


def _target(size: int, verb: str, up: bool, ms: float, ratio: float) -> tuple[str, bool | None]:
    if verb == "list" and size == 10 and up:
        return f"<= {TARGET_LIST_10_RATIO}x", ratio <= TARGET_LIST_10_RATIO
    if verb == "list" and size == 10000:
        return f"<= {TARGET_LIST_10000_MS:.0f} ms", ms <= TARGET_LIST_10000_MS
    if verb == "history" and size == 10000:
        return f"<= {TARGET_HISTORY_10000_MS:.0f} ms", ms <= TARGET_HISTORY_10000_MS
    return "", None


def _size(root: Path, bin_dir: Path, size: int, quick: bool) -> list[Row]:
    home = Home(root, f"thin-{size}", root / "pycache")
    day, month = _far_day()
    for i in range(size):
        home.write(f"r{i:05d}", _routine(i, day, month))
    _history_rows(home, "r00001", 30)
    env = {k: v for k, v in home.env.items() if k != "PYTHONPATH"}  # the installed copy
    launcher = str(bin_dir / "vinos-routine")
    bare = _runner([str(bin_dir / "python"), "-c", "pass"], env)
    verbs = {
        "list": [launcher, "list"],
        "status": [launcher, "status"],
        "history": [launcher, "history", "r00001"],
    }
    commands = {v: _runner(cmd, env) for v, cmd in verbs.items()}
    repeat = (6 if quick else 20) if size < 10000 else (2 if quick else 6)
    rows = []
    for up in (True, False):
        pid = home.start() if up else None
        idle = before = 0.0
        if pid:
            # The first answer of each verb loads what answering needs, once (modules, the
            # ledger's pages): the growth is measured from there, the idle RSS is shown.
            idle = _idle_rss_mb(pid)
            for go in commands.values():
                go()
            before = _idle_rss_mb(pid)
        try:
            medians, bare_s = _measure(commands, bare, repeat)
            if pid:  # each verb answered once to warm up, then twice `repeat // 2` times
                answers = 1 + 2 * max(1, repeat // 2)
                rows.append(_rss_row(size, idle, before, _idle_rss_mb(pid), answers))
        finally:
            if up:
                home.stop()
        for verb, seconds in medians.items():
            ms, ratio = seconds * 1000, seconds / bare_s
            target, met = _target(size, verb, up, ms, ratio)
            rows.append(
                Row(
                    f"vinos-routine {verb} ({size} routines, daemon {'up' if up else 'down'})",
                    ms,
                    "ms",
                    baseline=f"python -c pass: {bare_s * 1000:.1f} ms",
                    ratio=ratio,
                    target=target,
                    met=met,
                )
            )
    return rows


def run(quick: bool) -> list[Row]:
    if os.geteuid() == 0:
        raise RuntimeError("the daemon refuses root: run the benchmark as an unprivileged user")
    wanted = os.environ.get("VINOS_BENCH_THIN_SIZES") or "10,1000,10000"
    sizes = [int(s) for s in wanted.split(",")]
    with tempfile.TemporaryDirectory(prefix="vinos-bench-thin-") as tmp:
        root = Path(tmp)
        bin_dir = install(root)
        rows: list[Row] = []
        for size in sizes:
            rows.extend(_size(root, bin_dir, size, quick))
        return rows
