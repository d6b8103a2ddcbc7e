"""A typed `vinos-routine run NAME` with the daemon up and nothing due: from the CLI's start to
the run's first request at a fake Anthropic server, against `claude -p --bare` (pinned,
bench/claudecode.py) aimed at the same fake, interleaved, and the same daemon with its
forkserver off (every run spawned: what a typed run paid before the keep window).

Target: at most 1.0x `claude -p --bare`. The daemon's start counts as a use, so its forkserver
is up (supervisor/engine/forkserver.py KEEP_WARM_SEC); the run is forked, as a scheduled one is.
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

from bench import claudecode
from bench.bench_supervisor import Home
from bench.common import Row, debug_timings
from tests.fakes import FakeAnthropic
from tests.fakes import fake_anthropic as A

TARGET_VS_CLAUDE = 1.0
CLAUDE = "claude -p --bare"
TOML = """
[routine]
description = "bench"
enabled = false

[schedule]
cron = "0 6 1 1 *"
timezone = "UTC"

[agent]
route = "anthropic"
system = "You write the user's morning brief."
tools = []
"""


def _first_request(argv: list[str], env: dict[str, str], seen: Callable[[], int]) -> float:
    """Seconds from starting `argv` to the fake's next request; waits for it to exit."""
    before = seen()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while seen() == before:
        if time.monotonic() > deadline or proc.poll() not in (None, 0):
            proc.kill()
            err = proc.communicate()[1].decode(errors="replace")
            raise RuntimeError(f"{argv[:4]} sent no request: {err[-1000:]}")
        time.sleep(0.002)
    took = time.perf_counter() - t0
    proc.communicate(timeout=120)
    return took


def _daemon_runs(
    root: Path,
    url: str,
    seen: Callable[[], int],
    *,
    forks: bool,
    repeat: int,
    between: Callable[[], None],
) -> list[float]:
    """A daemon with its forkserver on or off; `repeat` typed runs, `between` after each."""
    home = Home(root, "forks" if forks else "spawned", root / "pycache")
    home.write("looker", TOML)
    keys = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-bench"}
    home.start(VINOS_DEBUG_TIMINGS=debug_timings(forkserver=forks), **keys)
    try:
        log = home.root / "daemon.log"
        deadline = time.monotonic() + 300
        while forks and "forkserver up" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon's forkserver did not come up: {log.read_text()}")
            time.sleep(0.1)
        argv = [sys.executable, "-m", "supervisor", "run", "looker"]
        env = {**home.env, **keys}
        out = []
        for _ in range(repeat):
            out.append(_first_request(argv, env, seen))
            between()
        return out
    finally:
        home.stop()


def run(quick: bool) -> list[Row]:
    repeat = 3 if quick else 10
    claude = claudecode.install()
    why = claude if isinstance(claude, str) else None
    peer: list[float] = []
    with (
        FakeAnthropic(default=A.text("Brief. " * 50)) as fake,
        tempfile.TemporaryDirectory(prefix="vinos-bench-typed-") as tmp,
        tempfile.TemporaryDirectory() as claude_home,
    ):

        def seen() -> int:
            return len(fake.messages)

        def claude_once() -> None:
            if isinstance(claude, str):
                return
            env = {**os.environ, **claudecode.ENV, "HOME": claude_home}
            env.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="sk-bench")
            peer.append(_first_request([str(claude), "-p", "--bare", "hi"], env, seen))

        root = Path(tmp)
        forked = _daemon_runs(root, fake.url, seen, forks=True, repeat=repeat, between=claude_once)
        spawned = _daemon_runs(
            root, fake.url, seen, forks=False, repeat=repeat, between=lambda: None
        )
    f_ms = statistics.median(forked) * 1000
    s_ms = statistics.median(spawned) * 1000
    c_ms = statistics.median(peer) * 1000 if peer else float("nan")
    claude_txt = f"{CLAUDE}: {c_ms:.0f} ms" if not why else f"{CLAUDE} not measured: {why}"
    return [
        Row(
            name=f"typed `run`, daemon up, nothing due: start → first request (median of {repeat})",
            value=f_ms,
            unit="ms",
            baseline=f"{claude_txt}; forkserver off (spawned) {s_ms:.0f} ms",
            ratio=None if why else f_ms / c_ms,
            target=f"<= {TARGET_VS_CLAUDE:g}x {CLAUDE}",
            met=None if why else f_ms <= TARGET_VS_CLAUDE * c_ms,
        ),
        Row(
            name=f"typed `run`, daemon up, forkserver off (spawned) (median of {repeat})",
            value=s_ms,
            unit="ms",
            baseline=claude_txt,
            ratio=None if why else s_ms / c_ms,
        ),
    ]
