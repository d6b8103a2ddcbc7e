"""A run paused for a person ("needs you"): how soon it goes on once answered, and what a
paused run costs while it waits. Every figure has a baseline from this run.

- Resume: a real daemon, real workers and the fake Ollama server on 127.0.0.1. A routine's
  run pauses at a proposed action; `vinos-routine approve ID --yes` runs the action and wakes
  the daemon. The delay is from the action's end (the proposal's `finished_at`) to the
  resumed run's `started_at` (set when its worker process was spawned), p50 over 10 runs
  (3 quick), against a fresh run's delay from its `run` request to its `started_at`.
- A paused run's footprint: its worker processes (target 0) and the bytes it keeps on disk
  for the answer (its conversation file; its request is one proposals row).

Runs as an unprivileged user (the daemon refuses root): `make bench` arranges that.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench.bench_supervisor import Home
from bench.common import Row
from tests.fakes import FakeOllama
from tests.fakes import fake_ollama as O

ROUTINE = """[routine]
description = "drafts replies"
[schedule]
cron = "0 6 1 1 *"
timezone = "UTC"
[agent]
route = "ollama"
system = "You draft replies."
[[agent.actions]]
name = "send-reply"
run = "cat"
"""

PROPOSE = O.tool_calls(
    ("propose_action", {"action": "send-reply", "input": "Hi Bob\n", "summary": "Reply to Bob"})
)


def _run(home: Home, name: str) -> dict[str, object]:
    from supervisor.cli.client import connect

    with connect(home.socket, timeout=120) as c:
        result: dict[str, object] = c.request("run", {"name": name})
    return result


def _started(home: Home, run_id: str) -> datetime:
    from routines.ledger import Ledger, from_iso

    with Ledger(home.root / "home" / "routines" / "state" / "ledger.db") as led:
        row = led.run(run_id)
    assert row is not None and row.started_at is not None, run_id
    return from_iso(row.started_at)


def _child(home: Home, parent: str) -> str | None:
    from routines.ledger import Ledger

    with Ledger(home.root / "home" / "routines" / "state" / "ledger.db") as led:
        kids = led.replies_to([parent])
    return kids[0].run_id if kids and kids[0].started_at else None


def run(quick: bool) -> list[Row]:
    import time

    from routines import proposals
    from routines.ledger import Ledger, from_iso

    n = 3 if quick else 10
    resumes: list[float] = []
    fresh: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, FakeOllama() as fake:
        home = Home(Path(tmp), "needs-you", Path(tmp) / "pycache")
        home.write("drafter", ROUTINE)
        home.write("fresh", ROUTINE.replace("drafts replies", "fresh runs"))
        home.start(OLLAMA_HOST=fake.url)
        ledger_path = home.root / "home" / "routines" / "state" / "ledger.db"
        try:
            workers = kept = 0
            for i in range(n):
                fake.add(PROPOSE, O.text("# Sent"))
                paused = str(_run(home, "drafter")["run_id"])
                if i == 0:
                    assert home.proc is not None
                    # The daemon's forkserver is its own, there before and after any run: not
                    # the paused run's.
                    daemon = psutil.Process(home.proc.pid)
                    forks = {
                        c.pid
                        for c in daemon.children()
                        if "forkserver" in " ".join(c.cmdline())  # its title
                    }
                    workers = len(
                        [c for c in daemon.children(recursive=True) if c.pid not in forks]
                    )
                    with Ledger(ledger_path) as led:
                        kept = len((led.conversation(paused) or "").encode())
                with Ledger(ledger_path) as led:
                    [p] = proposals.waiting(led)
                subprocess.run(
                    [sys.executable, "-m", "supervisor", "approve", str(p.id), "--yes"],
                    env=home.env,
                    check=True,
                    capture_output=True,
                )
                deadline = time.monotonic() + 60
                while (child := _child(home, paused)) is None:
                    assert time.monotonic() < deadline, "the paused run did not resume"
                    time.sleep(0.01)
                with Ledger(ledger_path) as led:
                    done = proposals.get(led, p.id)
                assert done is not None and done.finished_at is not None
                resumes.append((_started(home, child) - from_iso(done.finished_at)).total_seconds())
                while _run_status(ledger_path, child) in ("queued", "running"):
                    time.sleep(0.01)
            for _ in range(n):
                fake.add(O.text("# Fresh"))
                asked = datetime.now(UTC)
                ran = str(_run(home, "fresh")["run_id"])
                fresh.append((_started(home, ran) - asked).total_seconds())
        finally:
            home.stop()
    r, f = statistics.median(resumes) * 1000, statistics.median(fresh) * 1000
    return [
        Row(
            "needs you: resumed worker starts after the action, p50",
            r,
            "ms",
            f"a fresh run's worker after its `run` request: {f:.1f} ms",
            r / f if f else None,
        ),
        Row(
            "needs you: processes of a paused run", float(workers), "", target="0", met=not workers
        ),
        Row(
            "needs you: kept on disk for a paused run",
            kept / 1024,
            "KB",
            "its conversation's ledger row (its request: one proposals row)",
        ),
    ]


def _run_status(ledger_path: Path, run_id: str) -> str | None:
    from routines.ledger import Ledger

    with Ledger(ledger_path) as led:
        row = led.run(run_id)
    return str(row.status) if row is not None else None
