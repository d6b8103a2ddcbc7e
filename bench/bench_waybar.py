"""The waybar module's cost per hour, 10 routines, daemon up: the shipped config
(`status --waybar --follow`, one long-lived process the daemon pushes changes to) against the
polling config it replaces (`status --waybar` every 30 s): processes spawned per hour, and
CPU seconds per hour (the polling command's CPU per call times its calls an hour; the
follower's and the daemon's extra CPU over a window, scaled to an hour), in the same run.
"""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from bench.bench_supervisor import Home, _far_day
from bench.common import Row
from bench.installed import install

POLL_INTERVAL_SEC = 30  # the polling config's "interval"


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(quick: bool) -> list[Row]:
    if os.geteuid() == 0:
        raise RuntimeError("the daemon refuses root: run the benchmark as an unprivileged user")
    window = 20.0 if quick else 120.0
    calls = 5 if quick else 20
    with tempfile.TemporaryDirectory(prefix="vinos-bench-waybar-") as tmp:
        root = Path(tmp)
        bin_dir = install(root)
        home = Home(root, "waybar", root / "pycache")
        day, month = _far_day()
        for i in range(10):
            home.write(
                f"r{i}",
                f'[routine]\nkind = "command"\nenabled = true\n[schedule]\n'
                f'cron = "{i} 6 {day} {month} *"\ntimezone = "UTC"\n[command]\nrun = "true"\n',
            )
        env = {k: v for k, v in home.env.items() if k != "PYTHONPATH"}
        launcher = str(bin_dir / "vinos-routine")
        pid = home.start()
        try:
            daemon = psutil.Process(pid)
            warm = [launcher, "status", "--waybar"]
            subprocess.run(warm, env=env, stdout=subprocess.DEVNULL, check=True)
            before = _children_cpu()
            for _ in range(calls):
                subprocess.run(
                    [launcher, "status", "--waybar"], env=env, stdout=subprocess.DEVNULL, check=True
                )
            poll_cpu = (_children_cpu() - before) / calls * (3600 / POLL_INTERVAL_SEC)
            d0 = _cpu(daemon)
            time.sleep(window)
            idle_daemon = _cpu(daemon) - d0
            follower = subprocess.Popen(
                [launcher, "status", "--waybar", "--follow"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            try:
                assert follower.stdout is not None
                follower.stdout.readline()  # connected, first line in
                f = psutil.Process(follower.pid)
                f0, d0 = _cpu(f), _cpu(daemon)
                time.sleep(window)
                follow_cpu = (_cpu(f) - f0 + max(0.0, _cpu(daemon) - d0 - idle_daemon)) * (
                    3600 / window
                )
            finally:
                follower.kill()
                follower.wait(10)
        finally:
            home.stop()
    per_hour = 3600 // POLL_INTERVAL_SEC
    return [
        Row(
            "waybar: processes spawned per hour (status --waybar --follow)",
            0,
            "",
            baseline=f"polling every {POLL_INTERVAL_SEC} s: {per_hour} an hour",
            target="no process per update",
            met=True,
        ),
        Row(
            "waybar: CPU seconds per hour (follow: the follower + the daemon's extra)",
            follow_cpu,
            "s",
            baseline=f"polling every {POLL_INTERVAL_SEC} s: {poll_cpu:.1f} s",
            ratio=follow_cpu / poll_cpu if poll_cpu > 0 else None,
        ),
    ]
