"""How quickly the CLI answers: `vinos-routine list` and `status` with 10
routines and the daemon up, through the launcher of a non-editable install in a throwaway venv
(bench/installed.py), against that venv's `python -c pass`: medians of interleaved halves.
Target at most 2.5x. All with compiled bytecode cached (PYTHONPYCACHEPREFIX in a temp dir), as
an installed package has it.

Runs as an unprivileged user (the daemon refuses root): `make bench` arranges that.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.bench_supervisor import Home
from bench.common import Row, median_seconds
from bench.installed import install

TARGET_CLI_RATIO = 2.5


def _routine(hour: int, enabled: bool) -> str:
    return (
        f'[routine]\nkind = "command"\nenabled = {str(enabled).lower()}\n'
        f'[schedule]\ncron = "0 {hour} * * *"\ntimezone = "UTC"\n[command]\nrun = "true"\n'
    )


def _cli_round_trips(home: Home, bin_dir: Path, repeat: int) -> list[Row]:
    """`list` and `status` through the installed launcher, against that venv's
    `python -c pass`, interleaved in halves so a drift in load hits all three alike."""
    env = {k: v for k, v in home.env.items() if k != "PYTHONPATH"}  # the installed copy

    def runner(cmd: list[str]) -> Callable[[], None]:
        def go() -> None:
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)

        return go

    launcher = str(bin_dir / "vinos-routine")
    bare = runner([str(bin_dir / "python"), "-c", "pass"])
    commands = {"list": runner([launcher, "list"]), "status": runner([launcher, "status"])}
    for go in (bare, *commands.values()):
        go()  # warm up: bytecode compiled and cached
    half = repeat // 2
    first = {name: median_seconds(go, half) for name, go in commands.items()}
    bare_s = (median_seconds(bare, half) + median_seconds(bare, half)) / 2
    rows = []
    for name, go in reversed(commands.items()):
        ms = (first[name] + median_seconds(go, half)) / 2 * 1000
        ratio = ms / (bare_s * 1000)
        rows.append(
            Row(
                f"vinos-routine {name} (10 routines, daemon up, installed)",
                ms,
                "ms",
                baseline=f"python -c pass: {bare_s * 1000:.1f} ms",
                ratio=ratio,
                target=f"<= {TARGET_CLI_RATIO}x",
                met=ratio <= TARGET_CLI_RATIO,
            )
        )
    return rows[::-1]


def run(quick: bool) -> list[Row]:
    if os.geteuid() == 0:
        raise RuntimeError("the daemon refuses root: run the benchmark as an unprivileged user")
    with tempfile.TemporaryDirectory(prefix="vinos-bench-cli-") as tmp:
        root = Path(tmp)
        bin_dir = install(root)
        home = Home(root, "cli", root / "pycache")
        for i in range(10):
            home.write(f"r{i}", _routine(6 + i, enabled=i % 3 != 0))
        home.start()
        try:
            return _cli_round_trips(home, bin_dir, 20 if quick else 60)
        finally:
            home.stop()
