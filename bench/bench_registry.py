"""Loading routine files: a registry scan of 1,000 files (target < 1 s), against reading the same
files' bytes and parsing them with tomllib in the same run; and the per-tick rescan of unchanged
files, against scandir + stat of the same directory."""

from __future__ import annotations

import os
import tempfile
import time
import tomllib
from pathlib import Path

from bench.common import Row, median_seconds
from routines.spec.paths import Paths
from routines.spec.registry import scan

TEMPLATE = """\
# {name}: a generated routine for the benchmark
[routine]
description = "Benchmark routine number {i}"
enabled = {enabled}

[schedule]
cron = "{minute} {hour} * * *"
timezone = "Europe/Berlin"
jitter = "2m"

[agent]
route = "auto"
system = \"\"\"
You summarise what changed since the last run. Be brief; use only what the tools return.
End with report_outcome.
\"\"\"
tools = [
  "read:~/notes/{name}/*.md",
  "shell:command -v gh >/dev/null && gh api /notifications | head -c 8000 || echo 'no gh'",
  "shell:git -C ~/code/project-{i} log --since=midnight --oneline 2>/dev/null | head -50",
]
memory = "persistent"

[agent.escalation]
max_escalations_per_run = 2

[output]
type = "brief"
title = "{name} · {{{{date}}}}"

[budget]
max_tokens_per_run = 20000
max_dollars_per_day = 0.25
on_exceed = "skip"
"""


def _make(root: Path, count: int) -> Paths:
    p = Paths(home=root / "home", system_dir=root / "system", runtime_dir=root / "run")
    p.routines_dir.mkdir(parents=True)
    p.system_dir.mkdir()
    for i in range(count):
        name = f"routine-{i:04d}"
        text = TEMPLATE.format(
            name=name, i=i, enabled=str(i % 2 == 0).lower(), minute=i % 60, hour=i % 24
        )
        (p.routines_dir / f"{name}.toml").write_text(text)
    return p


def _baseline(directory: Path) -> None:
    for path in sorted(directory.glob("*.toml")):
        tomllib.loads(path.read_bytes().decode())


def _stat_all(directory: Path) -> None:
    with os.scandir(directory) as it:
        for de in it:
            de.stat()


def run(quick: bool) -> list[Row]:
    count = 100 if quick else 1000
    repeat = 3 if quick else 5
    with tempfile.TemporaryDirectory(prefix="vinos-bench-registry-") as tmp:
        p = _make(Path(tmp), count)
        _baseline(p.routines_dir)  # warm the page cache for both sides alike
        cold = median_seconds(lambda: scan(p), repeat)
        base = median_seconds(lambda: _baseline(p.routines_dir), repeat)
        registry = scan(p)
        assert len(registry.routines()) == count, "benchmark routines must all be valid"
        t0 = time.perf_counter()
        for _ in range(repeat):
            registry = scan(p, registry)
        warm = (time.perf_counter() - t0) / repeat
        stat_base = median_seconds(lambda: _stat_all(p.routines_dir), repeat)
    return [
        Row(
            name=f"registry: load {count:,} routine files (cold scan)",
            value=cold * 1000,
            unit="ms",
            baseline=f"read + tomllib.loads: {base * 1000:.1f} ms",
            ratio=cold / base,
            target=f"< {count / 1000:g} s",
            met=cold < count / 1000,
        ),
        Row(
            name=f"registry: rescan {count:,} unchanged files (each tick)",
            value=warm * 1000,
            unit="ms",
            baseline=f"scandir + stat: {stat_base * 1000:.2f} ms",
            ratio=warm / stat_base,
        ),
    ]
