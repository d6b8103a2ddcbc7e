"""Due → the command running in its sandbox, for a command routine (`date +%s.%N`, whose
output is the run's output file): p50 and p99 over runs driven by the daemon's fake clock
(its forkserver up, as it is while a routine is due each minute), against, in the same run:

- the same daemon with its forkserver off (every worker spawned), measured after it;

- a systemd user timer with AccuracySec=1us under the real user manager (`systemd-run --user
  --on-calendar`, a transient timer per run, its service writing `date +%s.%N`), one timer
  between two daemon runs, when a manager answers (`make bench` starts one as root:
  scripts/user-manager.sh; else the row says it was not measured);
- a bare asyncio loop that sleeps until an instant and starts the same command under bwrap.

Targets: p50 <= 150 ms, p99 <= 400 ms.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.bench_supervisor import Home
from bench.common import Row, debug_timings, p50_p99

TARGET_P50_MS = 150.0
TARGET_P99_MS = 400.0
BWRAP = ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent"]
_STAMP = re.compile(rb"\b(\d{10}\.\d{6,9})\b")


def _routine() -> str:
    return (
        '[routine]\nkind = "command"\nenabled = true\n'
        '[schedule]\ncron = "* * * * *"\ntimezone = "UTC"\n'
        '[command]\nrun = "date +%s.%N"\n'
    )


def _stamps(state: Path) -> set[float]:
    out: set[float] = set()
    for f in state.rglob("*.md"):
        out |= {float(m) for m in _STAMP.findall(f.read_bytes())}
    return out


async def _bare(n: int) -> list[float]:
    out = []
    for _ in range(n):
        due = time.time() + 0.3
        await asyncio.sleep(due - time.time())
        proc = await asyncio.create_subprocess_exec(
            *BWRAP, "date", "+%s.%N", stdout=asyncio.subprocess.PIPE
        )
        stdout, _ = await proc.communicate()
        out.append(float(stdout) - due)
    return out


def user_manager() -> dict[str, str] | None:
    """The environment that reaches this user's systemd manager, or None when none answers."""
    if shutil.which("systemd-run") is None:
        return None
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime}
    try:
        state = subprocess.run(
            ["systemctl", "--user", "is-system-running"],
            env=env,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return env if state in ("running", "degraded") else None


class Timer:
    """One transient systemd user timer per call, AccuracySec=1us, due at the next whole
    second at least 1.5 s away; returns how late its service wrote `date +%s.%N`."""

    def __init__(self, env: dict[str, str], out: Path) -> None:
        self.env = env
        self.out = out
        self.n = 0

    def __call__(self) -> float:
        self.n += 1
        stamp = self.out / f"timer-{self.n}"
        due = int(time.time() + 1.5) + 1
        when = datetime.fromtimestamp(due, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        unit = f"vinos-bench-{os.getpid()}-{self.n}"
        subprocess.run(
            [
                "systemd-run",
                "--user",
                "--quiet",
                f"--unit={unit}",
                f"--on-calendar={when}",
                "--timer-property=AccuracySec=1us",
                "/bin/sh",
                "-c",
                f"date +%s.%N > {stamp}.tmp && mv {stamp}.tmp {stamp}",
            ],
            env=self.env,
            check=True,
            timeout=30,
        )
        deadline = time.monotonic() + 30
        while not stamp.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the systemd timer {unit} did not run")
            time.sleep(0.02)
        return float(stamp.read_text()) - due


def _daemon(
    home: Home, runs: int, between: Callable[[], None] = lambda: None, forks: bool = True
) -> list[float]:
    home.write("tick", _routine())
    home.start(
        VINOS_DEBUG_TIMINGS=debug_timings(
            clock_offset_file=home.clock_file, tick_max_sec=0.5, forkserver=forks
        ),
    )
    state = Path(home.env["VINOS_HOME"]) / "routines" / "state" / "tick"
    # The steady state of a routine due each minute: its forkserver up (the first start
    # compiles the SDK's bytecode into the fresh cache, which an install ships compiled).
    log = home.root / "daemon.log"
    deadline = time.monotonic() + 300
    while forks and "forkserver up" not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon's forkserver did not come up: {log.read_text()}")
        time.sleep(0.1)
    delays: list[float] = []
    offset = 0.0
    seen = _stamps(state)
    for i in range(runs):
        now = datetime.now(UTC) + timedelta(seconds=offset)
        slot = datetime.fromtimestamp((int(now.timestamp()) // 60 + 1) * 60, UTC)
        offset += (slot - now).total_seconds() - 1.2  # the slot comes due in 1.2 s
        tmp = home.clock_file.with_suffix(".tmp")
        tmp.write_text(repr(offset))
        tmp.replace(home.clock_file)
        due_real = slot.timestamp() - offset  # the slot's instant on the real clock
        deadline = time.monotonic() + 60
        while not (new := _stamps(state) - seen):
            if time.monotonic() > deadline:
                raise RuntimeError(f"run {i}: the command did not write its stamp")
            time.sleep(0.05)
        seen |= new
        delays.append(max(new) - due_real)
        between()  # the peer's measurement, interleaved
    return delays


def run(quick: bool) -> list[Row]:
    if os.geteuid() == 0:
        raise RuntimeError("the daemon refuses root: run the benchmark as an unprivileged user")
    runs = 10 if quick else 40
    with tempfile.TemporaryDirectory(prefix="vinos-bench-cmd-") as tmp:
        root = Path(tmp)
        home = Home(root, "command", root / "pycache")
        manager = user_manager()
        timer = Timer(manager, root) if manager is not None else None
        timed: list[float] = []
        try:
            delays = _daemon(home, runs, (lambda: timed.append(timer())) if timer else lambda: None)
        finally:
            home.stop()
        plain = Home(root, "spawned", root / "pycache")  # the same, every worker spawned
        try:
            spawned = _daemon(plain, runs, forks=False)
        finally:
            plain.stop()
    bare = asyncio.run(_bare(runs))
    s50, s99 = p50_p99([d * 1000 for d in spawned])
    d50, d99 = p50_p99([d * 1000 for d in delays])
    b50, b99 = p50_p99([b * 1000 for b in bare])
    if timed:
        t50, t99 = p50_p99([t * 1000 for t in timed])
        peer50 = f"; systemd user timer (AccuracySec=1us) {t50:.1f} ms"
        peer99 = f"; systemd user timer (AccuracySec=1us) {t99:.1f} ms"
    else:
        peer50 = peer99 = "; no systemd user manager answered: the timer not measured"
    rows = []
    if timed:
        rows = [
            Row(
                f"systemd user timer, AccuracySec=1us: due → date runs, p{p} of {runs}",
                v,
                "ms",
                baseline=f"vinos-routine command routine: {d:.1f} ms",
                ratio=d / v if v > 0 else None,
            )
            for p, v, d in ((50, t50, d50), (99, t99, d99))
        ]
    ours = [
        Row(
            f"due → command running (command routine), p50 of {runs}",
            d50,
            "ms",
            baseline=f"spawned {s50:.0f} ms; asyncio sleep + bwrap date {b50:.1f} ms{peer50}",
            ratio=d50 / b50 if b50 > 0 else None,
            target=f"<= {TARGET_P50_MS:.0f} ms",
            met=d50 <= TARGET_P50_MS,
        ),
        Row(
            f"due → command running (command routine), p99 of {runs}",
            d99,
            "ms",
            baseline=f"spawned {s99:.0f} ms; asyncio sleep + bwrap date {b99:.1f} ms{peer99}",
            ratio=d99 / b99 if b99 > 0 else None,
            target=f"<= {TARGET_P99_MS:.0f} ms",
            met=d99 <= TARGET_P99_MS,
        ),
    ]
    return [*rows, *ours]
