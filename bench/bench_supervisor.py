"""The supervisor daemon: what it costs idle, and how late it starts a due run.
Every figure has a baseline from this run.

- Idle: resident memory (RSS) and CPU of a daemon with 100 and one with 10,000 enabled
  routines (none due), over the same 60 s window (10 s with VINOS_BENCH_QUICK), against a
  bare `python -c "import time; time.sleep(…)"`. Targets: under 40 MB and 80 MB, CPU under
  0.1%. The daemon's default 30 s tick is used, so a 10 s window may hold no tick at all.
  Also shown, without a target: the CPU of one forced rescan of the 10,000 files (`reload`),
  which the daemon otherwise spreads out to stay near 0.05% (supervisor/daemon.py).
- Due to start: 50 runs (10 quick) of a `* * * * *` command routine; the daemon's clock is
  stepped (its clock_offset_file, VINOS_DEBUG_TIMINGS) to 1.2 s before each minute, and the
  delay is the ledger's started_at (set when the worker process was spawned) minus the slot.
  p50 and p99 against a bare asyncio loop that sleeps until an instant and spawns `python -c pass`.
  Target p99 under 250 ms.
- `vinos-routine list` and `status` with the daemon up: bench/bench_cli.py.

Runs as an unprivileged user (the daemon refuses root): `make bench` arranges that.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

from bench.common import Row, debug_timings, p50_p99

REPO = Path(__file__).resolve().parent.parent
TARGET_RSS_MB = {100: 40.0, 10_000: 80.0}
TARGET_CPU_PCT = 0.1
TARGET_P99_MS = 250.0


def _routine(cron: str, run: str = "true", enabled: bool = True) -> str:
    return (
        f'[routine]\nkind = "command"\nenabled = {str(enabled).lower()}\n'
        f'[schedule]\ncron = "{cron}"\ntimezone = "UTC"\n[command]\nrun = "{run}"\n'
    )


class Home:
    """A VINOS_HOME with its own system and runtime dirs, and the env to use it."""

    def __init__(self, root: Path, name: str, pycache: Path) -> None:
        self.root = root / name
        self.routines = self.root / "home" / "routines"
        self.routines.mkdir(parents=True)
        (self.root / "system").mkdir()
        runtime = self.root / "run"
        runtime.mkdir(mode=0o700)
        self.clock_file = self.root / "clock-offset"
        self.clock_file.write_text("0")
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.env.update(
            VINOS_HOME=str(self.root / "home"),
            VINOS_SYSTEM_DIR=str(self.root / "system"),
            XDG_RUNTIME_DIR=str(runtime),
            PYTHONPATH=str(REPO),
            PYTHONPYCACHEPREFIX=str(pycache),
        )
        self.env.pop("ANTHROPIC_API_KEY", None)
        self.socket = runtime / "vinos-routine" / "control.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    def write(self, name: str, text: str) -> None:
        (self.routines / f"{name}.toml").write_text(text)

    def start(self, **env: str) -> int:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "daemon"],
            env={**self.env, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "daemon.log", "wb"),  # noqa: SIM115 - the child holds it
        )
        self.request("ping", timeout=300)
        return self.proc.pid

    def request(self, cmd: str, timeout: float = 60) -> object:
        from supervisor.cli.client import DaemonNotRunning, connect

        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                log = (self.root / "daemon.log").read_text(errors="replace")
                raise RuntimeError(f"the daemon exited {self.proc.returncode}:\n{log[-2000:]}")
            try:
                with connect(self.socket, timeout=timeout) as c:
                    return c.request(cmd)
            except (DaemonNotRunning, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)


def _far_day() -> tuple[int, int]:
    """A (day, month) half a year away: no routine of the idle daemons comes due."""
    far = datetime.now(UTC) + timedelta(days=180)
    return min(far.day, 28), far.month


def _cpu_seconds(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def _idle(root: Path, pycache: Path, window: float) -> list[Row]:
    day, month = _far_day()
    homes: dict[int, Home] = {}
    for count in (100, 10_000):
        home = Home(root, f"idle-{count}", pycache)
        for i in range(count):
            home.write(f"r{i:05d}", _routine(f"{i % 60} {(i // 60) % 24} {day} {month} *"))
        homes[count] = home
    baseline = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)"], env=homes[100].env
    )
    try:
        pids = {count: home.start() for count, home in homes.items()}
        time.sleep(2)  # past the start-up tick
        procs = {count: psutil.Process(pid) for count, pid in pids.items()}
        base = psutil.Process(baseline.pid)
        cpu0 = {count: _cpu_seconds(p) for count, p in procs.items()}
        base0 = _cpu_seconds(base)
        t0 = time.monotonic()
        peak = dict.fromkeys(procs, 0)
        while time.monotonic() - t0 < window:
            for count, p in procs.items():
                peak[count] = max(peak[count], p.memory_info().rss)
            time.sleep(min(1.0, window / 10))
        wall = time.monotonic() - t0
        cpu = {count: (_cpu_seconds(p) - cpu0[count]) / wall * 100 for count, p in procs.items()}
        base_cpu = (_cpu_seconds(base) - base0) / wall * 100
        base_rss = base.memory_info().rss / 1e6
        # One forced full rescan of the 10,000 files, as SIGHUP or `reload` makes.
        big = procs[10_000]
        before = _cpu_seconds(big)
        homes[10_000].request("reload", timeout=300)
        rescan_ms = (_cpu_seconds(big) - before) * 1000
    finally:
        for home in homes.values():
            home.stop()
        baseline.kill()
        baseline.wait()
    rows = []
    for count in (100, 10_000):
        rss = peak[count] / 1e6
        rows.append(
            Row(
                f"daemon RSS idle, {count:,} routines",
                rss,
                "MB",
                baseline=f"python -c sleep: {base_rss:.1f} MB",
                ratio=rss / base_rss,
                target=f"< {TARGET_RSS_MB[count]:.0f} MB",
                met=rss < TARGET_RSS_MB[count],
            )
        )
        rows.append(
            Row(
                f"daemon CPU idle, {count:,} routines, {wall:.0f} s",
                cpu[count],
                "%",
                baseline=f"python -c sleep: {base_cpu:.3f} %",
                target=f"< {TARGET_CPU_PCT} %",
                met=cpu[count] < TARGET_CPU_PCT,
            )
        )
    rows.append(
        Row(
            "daemon CPU of one full rescan (reload), 10,000 routines",
            rescan_ms,
            "ms",
            baseline="spread by the daemon to ~0.05 % between forced rescans",
        )
    )
    return rows


async def _bare_spawn_delays(n: int) -> list[float]:
    """A bare asyncio loop: sleep until an instant, spawn `python -c pass`; how late."""
    out = []
    for _ in range(n):
        due = time.time() + 0.3
        await asyncio.sleep(due - time.time())
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        out.append(time.time() - due)
        await proc.wait()
    return out


def _due_to_start(home: Home, runs: int) -> list[Row]:
    from routines.ledger import Ledger

    home.write("tick", _routine("* * * * *"))
    for i in range(9):
        home.write(f"idle{i}", _routine("0 6 * * *", enabled=False))
    home.start(
        VINOS_DEBUG_TIMINGS=debug_timings(clock_offset_file=home.clock_file, tick_max_sec=0.5)
    )
    delays: list[float] = []
    with Ledger(Path(home.env["VINOS_HOME"]) / "routines" / "state" / "ledger.db") as ledger:
        offset = 0.0
        for i in range(runs):
            now = datetime.now(UTC) + timedelta(seconds=offset)
            slot = datetime.fromtimestamp((int(now.timestamp()) // 60 + 1) * 60, UTC)
            offset += (slot - now).total_seconds() - 1.2  # the slot comes due in 1.2 s
            tmp = home.clock_file.with_suffix(".tmp")
            tmp.write_text(repr(offset))
            tmp.replace(home.clock_file)
            slot_id = slot.strftime("%Y-%m-%dT%H:%M:%SZ")
            deadline = time.monotonic() + 60
            while True:
                row = ledger._db.execute(
                    "SELECT status, started_at FROM runs WHERE routine = 'tick' AND slot = ?",
                    (slot_id,),
                ).fetchone()
                if row is not None and row["status"] not in ("queued", "running"):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"run {i} for slot {slot_id} did not finish")
                time.sleep(0.02)
            if row["status"] != "ok":
                raise RuntimeError(f"run {i} ended {row['status']}")
            started = datetime.fromisoformat(row["started_at"].replace("Z", "+00:00"))
            delays.append((started - slot).total_seconds())
    bare = asyncio.run(_bare_spawn_delays(runs))
    d50, d99 = p50_p99([d * 1000 for d in delays])
    b50, b99 = p50_p99([b * 1000 for b in bare])
    return [
        Row(
            f"due → worker spawned, p50 of {runs}",
            d50,
            "ms",
            baseline=f"asyncio sleep+spawn: {b50:.1f} ms",
            ratio=d50 / b50 if b50 > 0 else None,
        ),
        Row(
            f"due → worker spawned, p99 of {runs}",
            d99,
            "ms",
            baseline=f"asyncio sleep+spawn: {b99:.1f} ms",
            ratio=d99 / b99 if b99 > 0 else None,
            target=f"< {TARGET_P99_MS:.0f} ms",
            met=d99 < TARGET_P99_MS,
        ),
    ]


def run(quick: bool) -> list[Row]:
    if os.geteuid() == 0:
        raise RuntimeError("the daemon refuses root: run the benchmark as an unprivileged user")
    window = 10.0 if quick else 60.0
    runs = 10 if quick else 50
    with tempfile.TemporaryDirectory(prefix="vinos-bench-") as tmp:
        root = Path(tmp)
        pycache = root / "pycache"
        rows = _idle(root, pycache, window)
        home = Home(root, "delay", pycache)
        try:
            rows += _due_to_start(home, runs)
        finally:
            home.stop()
    return rows
