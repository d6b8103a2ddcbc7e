"""Runs started by events, against a time slot's due → spawn in the same run:

- after: from an upstream run's end (its ledger finished_at) to its follower's worker spawned
  (the follower's started_at), p50 and p99 over 50 upstream runs (10 quick); the baseline is
  the upstream's own slot due → spawn, measured on the same daemon at the same time;
- watch: from a file's close-write to the run's worker spawned, p50 of 10 (5 quick); it
  includes the 0.5 s debounce (supervisor/engine/filewatch.py DEBOUNCE_SEC);
- gate: a gated `nothing-to-do` agent run's wall time and tokens against the same routine's
  run without its gate, which calls the model (the fake Anthropic server of tests/fakes).

Runs as an unprivileged user (the daemon refuses root): `make bench` arranges that.
"""

from __future__ import annotations

import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.bench_supervisor import Home
from bench.common import Row, debug_timings, p50_p99

UP = (
    '[routine]\nkind = "command"\nenabled = true\n'
    '[schedule]\ncron = "* * * * *"\ntimezone = "UTC"\n[command]\nrun = "true"\n'
)
DOWN = (
    '[routine]\nkind = "command"\nenabled = true\n[trigger]\nafter = ["up"]\n'
    '[command]\nrun = "true"\n'
)
WATCHER = (
    '[routine]\nkind = "command"\nenabled = true\n[trigger]\nwatch = ["~/drop/*.txt"]\n'
    '[command]\nrun = "true"\nhome = ["~/drop"]\n'
)
AGENT = """[routine]
enabled = true
[trigger]
fire = true
{gate}
[agent]
route = "anthropic"
system = "Report."
"""


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _wait(ledger: Any, sql: str, args: tuple[object, ...], what: str) -> Any:
    deadline = time.monotonic() + 60
    while True:
        row = ledger._db.execute(sql, args).fetchone()
        if row is not None and row["status"] not in ("queued", "running"):
            return row
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not finish")
        time.sleep(0.02)


def _after(home: Home, runs: int) -> list[Row]:
    from routines.ledger import Ledger

    home.write("up", UP)
    home.write("down", DOWN)
    home.start(
        VINOS_DEBUG_TIMINGS=debug_timings(clock_offset_file=home.clock_file, tick_max_sec=0.5)
    )
    follow: list[float] = []
    due: list[float] = []
    with Ledger(Path(home.env["VINOS_HOME"]) / "routines" / "state" / "ledger.db") as ledger:
        offset = 0.0
        for i in range(runs):
            now = datetime.now(UTC) + timedelta(seconds=offset)
            slot = datetime.fromtimestamp((int(now.timestamp()) // 60 + 1) * 60, UTC)
            offset += (slot - now).total_seconds() - 1.2  # the slot comes due in 1.2 s
            tmp = home.clock_file.with_suffix(".tmp")
            tmp.write_text(repr(offset))
            tmp.replace(home.clock_file)
            sid = slot.strftime("%Y-%m-%dT%H:%M:%SZ")
            up = _wait(
                ledger,
                "SELECT run_id, status, started_at, finished_at FROM runs "
                "WHERE routine = 'up' AND slot = ?",
                (sid,),
                f"upstream run {i}",
            )
            down = _wait(
                ledger,
                "SELECT status, started_at FROM runs WHERE routine = 'down' AND slot = ?",
                (f"after:{up['run_id']}",),
                f"follower run {i}",
            )
            due.append((_at(up["started_at"]) - slot).total_seconds())
            follow.append((_at(down["started_at"]) - _at(up["finished_at"])).total_seconds())
    f50, f99 = p50_p99([d * 1000 for d in follow])
    d50, d99 = p50_p99([d * 1000 for d in due])
    return [
        Row(f"upstream end → follower spawned, p50 of {runs}", f50, "ms",
            baseline=f"slot due → spawned: {d50:.0f} ms", ratio=f50 / d50 if d50 else None),
        Row(f"upstream end → follower spawned, p99 of {runs}", f99, "ms",
            baseline=f"slot due → spawned: {d99:.0f} ms", ratio=f99 / d99 if d99 else None),
    ]  # fmt: skip


def _watch(home: Home, writes: int) -> list[Row]:
    from routines.ledger import Ledger

    drop = Path(home.env["HOME"]) / "drop"
    drop.mkdir(exist_ok=True)
    home.write("watcher", WATCHER)
    home.request("reload")
    delays: list[float] = []
    offset = float(home.clock_file.read_text())  # the daemon's clock, stepped by `_after`
    with Ledger(Path(home.env["VINOS_HOME"]) / "routines" / "state" / "ledger.db") as ledger:
        for i in range(writes):
            path = drop / f"f{i}.txt"
            with path.open("w") as f:
                f.write("x")
            closed = time.time() + offset
            row = _wait(
                ledger,
                "SELECT status, started_at FROM runs WHERE routine = 'watcher' "
                "AND detail LIKE ? ORDER BY id DESC",
                (f"watch: {path} changed%",),
                f"the run of write {i}",
            )
            delays.append(_at(row["started_at"]).timestamp() - closed)
    w50, _ = p50_p99([d * 1000 for d in delays])
    return [Row(f"file close-write → run spawned, p50 of {writes}", w50, "ms",
                baseline="includes the 500 ms debounce")]  # fmt: skip


def _gate(root: Path, pycache: Path) -> list[Row]:
    from routines.ledger import Ledger
    from tests.fakes import FakeAnthropic
    from tests.fakes import fake_anthropic as A

    out: dict[str, tuple[float, int]] = {}
    with FakeAnthropic(default=A.text("Brief. " * 50)) as fake:
        home = Home(root, "gate", pycache)
        home.env.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="sk-ant-bench-000000")
        home.write("gated", AGENT.format(gate='[gate]\nrun = "echo nothing; exit 1"'))
        home.write("plain", AGENT.format(gate=""))
        home.start()
        try:
            from supervisor.cli.client import connect

            ledger_path = Path(home.env["VINOS_HOME"]) / "routines" / "state" / "ledger.db"
            with Ledger(ledger_path) as ledger:
                for name in ("gated", "plain"):
                    with connect(home.socket, timeout=60) as c:
                        c.request("fire", {"name": name})
                    row = _wait(
                        ledger,
                        "SELECT status, started_at, finished_at, input_tokens + output_tokens "
                        "AS tokens FROM runs WHERE routine = ?",
                        (name,),
                        f"the {name} run",
                    )
                    wall = (_at(row["finished_at"]) - _at(row["started_at"])).total_seconds()
                    out[name] = (wall * 1000, int(row["tokens"]))
        finally:
            home.stop()
    (gw, gt), (pw, pt) = out["gated"], out["plain"]
    return [
        Row("gated nothing-to-do run: wall time", gw, "ms",
            baseline=f"the same run without its gate: {pw:.0f} ms", ratio=gw / pw if pw else None),
        Row("gated nothing-to-do run: tokens", gt, "tokens",
            baseline=f"the same run without its gate: {pt} tokens"),
    ]  # fmt: skip


def run(quick: bool) -> list[Row]:
    if os.geteuid() == 0:
        raise RuntimeError("the daemon refuses root: run the benchmark as an unprivileged user")
    runs = 10 if quick else 50
    with tempfile.TemporaryDirectory(prefix="vinos-bench-") as tmp:
        root = Path(tmp)
        pycache = root / "pycache"
        home = Home(root, "triggers", pycache)
        home.env["HOME"] = str(root / "home-dir")
        Path(home.env["HOME"]).mkdir()
        try:
            rows = _after(home, runs)
            rows += _watch(home, 5 if quick else 10)
        finally:
            home.stop()
        rows += _gate(root, pycache)
    return rows
