"""Worker start-up: from spawning `python -m worker` to its first request at a fake Ollama
server, against the floor of any Python client on the same HTTP stack: a bare `python -c`
that imports httpx2 and sends one request to the same fake, timed the same way (spawn to the
request's arrival), in the same run. Target: at most 1.3x.

Both run with bytecode cached (PYTHONPYCACHEPREFIX in a temp dir, filled by a warm-up run of
each), as an installed package has it: a checkout the benchmark user cannot write to would
otherwise make the worker compile its own modules on every start, which no install does.

The job is a local-only routine (route = "ollama", no tools, no memory): what a scheduled
local run pays before its first model call.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import Row
from ipc import Hello, Job, encode
from routines.runs import Trigger
from tests.fakes import FakeOllama
from tests.fakes import fake_ollama as O

REPO = Path(__file__).resolve().parent.parent
TARGET = 1.3
FLOOR = (
    "import sys, httpx2; "
    "httpx2.post(sys.argv[1] + '/api/chat', json={'model': 'llama3.2:3b', 'messages': []})"
)
TOML = """
[routine]
description = "bench"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "ollama"
system = "You write the user's morning brief."
"""


def _job(home: Path, url: str, i: int) -> Job:
    state = home / "routines" / "state" / "bench"
    scratch = state / ".scratch" / f"run-{i}"
    scratch.mkdir(parents=True, exist_ok=True)
    return Job(
        run_id=f"run-{i}",
        routine_name="bench",
        routine_path=str(home / "routines" / "bench.toml"),
        routine_toml=TOML,
        routine_origin="user",
        trigger=Trigger.MANUAL,
        slot=None,
        started_at="2026-07-25T06:00:00+00:00",
        max_tokens=None,
        dollars_left=None,
        memory="",
        vinos_home=str(home),
        state_dir=str(state),
        scratch_dir=str(scratch),
        memory_path=None,
        ollama_url=url,
    )


def _worker_to_first_request(home: Path, fake: FakeOllama, i: int, env: dict[str, str]) -> float:
    data = encode(Hello()) + encode(_job(home, fake.url, i))
    seen = len(fake.chats)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env=env,
    )
    proc.communicate(data, timeout=60)
    chats = fake.chats
    if len(chats) != seen + 1 or proc.returncode != 0:
        raise RuntimeError(
            f"worker run {i} did not make exactly one request (exit {proc.returncode})"
        )
    return chats[-1].at - t0


def _bare_httpx2(fake: FakeOllama, env: dict[str, str]) -> float:
    seen = len(fake.chats)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", FLOOR, fake.url], check=True, cwd=REPO, env=env)
    chats = fake.chats
    if len(chats) != seen + 1:
        raise RuntimeError("the bare httpx2 request did not arrive")
    return chats[-1].at - t0


def run(quick: bool) -> list[Row]:
    repeat = 5 if quick else 20
    with FakeOllama(default=O.text("Brief. " * 50)) as fake:
        row = start_against_floor(
            "Ollama",
            repeat,
            lambda home, i, env: _worker_to_first_request(home, fake, i, env),
            lambda env: _bare_httpx2(fake, env),
        )
    return [row]


def start_against_floor(
    route: str,
    repeat: int,
    worker: Callable[[Path, int, dict[str, str]], float],
    bare: Callable[[dict[str, str]], float],
    floor: str = "python -c 'import httpx2; httpx2.post(...)'",
) -> Row:
    """`worker(home, i, env)` (spawn to first request) against `bare(env)`, each warmed once
    then interleaved `repeat` times, so a noisy moment hits both alike: the row of one route."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "vinos"
        (home / "routines").mkdir(parents=True)
        cache = Path(tmp) / "pycache"
        env = {**os.environ, "VINOS_HOME": str(home), "PYTHONPYCACHEPREFIX": str(cache)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("ANTHROPIC_API_KEY", None)
        worker(home, 0, env)  # warm the page cache and bytecode
        bare(env)
        times: list[float] = []
        base: list[float] = []
        for i in range(1, repeat + 1):
            times.append(worker(home, i, env))
            base.append(bare(env))
    w_ms, b_ms = statistics.median(times) * 1000, statistics.median(base) * 1000
    ratio = w_ms / b_ms
    return Row(
        name=f"worker start to first {route} request (median of {repeat})",
        value=w_ms,
        unit="ms",
        baseline=f"{floor}: {b_ms:.1f} ms",
        ratio=ratio,
        target=f"<= {TARGET:g}x",
        met=ratio <= TARGET,
    )
