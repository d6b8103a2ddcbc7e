"""`vinos-routine sandbox NAME -- true` and a shell call inside a run, against bare bubblewrap
(`bwrap --ro-bind / / true`), medians interleaved in the same run.

Targets: `sandbox NAME -- true` at most 20x bare bwrap once the host's answers are kept
(sandbox/hostcache.py: the first call of a boot probes, as `first call` shows); a shell call
inside a run (`run_shell`, as the worker calls it) at most 10 ms over bare bwrap. `--argv`,
which only prints the command, is measured beside them (no target of its own: it is the
start without the call). `daemon up` is the same call handed to a daemon's warm forkserver
(supervisor/control/sandboxsock.py), interleaved with its own bare bwrap.

Every interpreter here reads compiled bytecode from one cache (PYTHONPYCACHEPREFIX), as an
installed package does: a tree the bench's user cannot write would otherwise be compiled
again at each call.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.bench_supervisor import Home
from bench.common import Row, debug_timings, median_seconds

TARGET_CLI_RATIO = 20.0
TARGET_CALL_ADDED_MS = 10.0
BWRAP = "/usr/bin/bwrap"

ROUTINE = """\
[routine]
kind = "command"
enabled = false
[schedule]
cron = "0 6 * * *"
timezone = "UTC"
[command]
run = "true"
"""


def run(quick: bool) -> list[Row]:
    import sandbox

    refusal = sandbox.refuse_if_root()
    if refusal is not None:
        raise RuntimeError(refusal)
    repeat = 6 if quick else 40
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="vinos-bench-sbx-") as tmp:
        home = Path(tmp) / "vinos"
        (home / "routines").mkdir(parents=True)
        (home / "routines" / "probe.toml").write_text(ROUTINE)
        runtime = Path(tmp) / "run"
        runtime.mkdir(mode=0o700)
        env = {
            **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
            "VINOS_HOME": str(home),
            "VINOS_SYSTEM_DIR": str(Path(tmp) / "system"),
            # The login session's runtime dir, where the host's answers are kept this boot.
            "XDG_RUNTIME_DIR": str(runtime),
            "PYTHONPATH": str(root),
            "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache"),
        }
        cli = [sys.executable, "-m", "supervisor", "sandbox", "probe", "--", "true"]
        show = [sys.executable, "-m", "supervisor", "sandbox", "probe", "--argv", "--", "true"]

        def call(argv: list[str]) -> None:
            subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, check=True)

        def bare() -> None:
            call([BWRAP, "--ro-bind", "/", "/", "true"])

        t0 = time.perf_counter()
        call(cli)  # the boot's first call: it probes, and keeps the answers
        first = time.perf_counter() - t0
        half = max(1, repeat // 2)
        c1, b1 = median_seconds(lambda: call(cli), half), median_seconds(bare, half)
        a1 = median_seconds(lambda: call(show), half)
        b2, c2 = median_seconds(bare, half), median_seconds(lambda: call(cli), half)
        a2 = median_seconds(lambda: call(show), half)
        inside, bare_inside = _in_run(Path(tmp), repeat)
        warm, bare_warm, empty = _daemon_up(Path(tmp), repeat, bare)
    bare_ms = (b1 + b2) / 2 * 1000
    cli_ms = (c1 + c2) / 2 * 1000
    argv_ms = (a1 + a2) / 2 * 1000
    ratio = cli_ms / bare_ms if bare_ms else float("nan")
    added = inside - bare_inside
    return [
        Row(
            name=f"`vinos-routine sandbox NAME -- true` (median of {repeat})",
            value=cli_ms,
            unit="ms",
            baseline=f"bwrap --ro-bind / / true: {bare_ms:.2f} ms",
            ratio=ratio,
            target=f"<= {TARGET_CLI_RATIO:g}x",
            met=ratio <= TARGET_CLI_RATIO,
        ),
        Row(
            name=f"`vinos-routine sandbox NAME -- true`, daemon up (median of {repeat})",
            value=warm,
            unit="ms",
            baseline=f"bwrap --ro-bind / / true: {bare_warm:.2f} ms",
            ratio=warm / bare_warm if bare_warm else None,
            target=f"<= {TARGET_CLI_RATIO:g}x",
            met=warm / bare_warm <= TARGET_CLI_RATIO if bare_warm else None,
        ),
        Row(
            name="`vinos-routine sandbox NAME -- true`, daemon up, against the interpreter",
            value=warm,
            unit="ms",
            baseline=f"python -c pass, same environment: {empty:.1f} ms",
            ratio=warm / empty if empty else None,
        ),
        Row(
            name=f"`vinos-routine sandbox NAME --argv -- true`, printed only (median of {repeat})",
            value=argv_ms,
            unit="ms",
            baseline=f"bwrap --ro-bind / / true: {bare_ms:.2f} ms",
            ratio=argv_ms / bare_ms if bare_ms else None,
        ),
        Row(
            name="`vinos-routine sandbox NAME -- true`, the boot's first call (probes)",
            value=first * 1000,
            unit="ms",
            baseline=f"bwrap --ro-bind / / true: {bare_ms:.2f} ms",
            ratio=first * 1000 / bare_ms if bare_ms else None,
        ),
        Row(
            name=f"shell call inside a run, `true` (median of {repeat})",
            value=inside,
            unit="ms",
            baseline=f"bwrap --ro-bind / / true: {bare_inside:.2f} ms",
            ratio=inside / bare_inside if bare_inside else None,
            target=f"<= {TARGET_CALL_ADDED_MS:g} ms over bare bwrap",
            met=added <= TARGET_CALL_ADDED_MS,
        ),
    ]


def _daemon_up(tmp: Path, repeat: int, bare: Callable[[], None]) -> tuple[float, float, float]:
    """(`sandbox probe -- true` ms with a daemon and its forkserver up, bare bwrap ms, and
    `python -c pass` ms in the same environment: the client's own floor)."""
    home = Home(tmp, "daemon", tmp / "pycache")
    home.write("probe", ROUTINE)
    home.start(VINOS_DEBUG_TIMINGS=debug_timings(forkserver=True))
    try:
        log = home.root / "daemon.log"
        deadline = time.monotonic() + 300
        while "forkserver up" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon's forkserver did not come up: {log.read_text()}")
            time.sleep(0.1)
        argv = [sys.executable, "-m", "supervisor", "sandbox", "probe", "--", "true"]

        def call() -> None:
            subprocess.run(
                argv, env=home.env, stdin=subprocess.DEVNULL, capture_output=True, check=True
            )

        call()
        if "sandbox probe: forked" not in log.read_text(errors="replace"):
            raise RuntimeError(f"the call did not go through the daemon: {log.read_text()}")

        def empty() -> None:
            subprocess.run([sys.executable, "-c", "pass"], env=home.env, check=True)

        half = max(1, repeat // 2)
        c1, b1, p1 = (median_seconds(f, half) for f in (call, bare, empty))
        p2, b2, c2 = (median_seconds(f, half) for f in (empty, bare, call))
        return (c1 + c2) / 2 * 1000, (b1 + b2) / 2 * 1000, (p1 + p2) / 2 * 1000
    finally:
        home.stop()


def _in_run(tmp: Path, repeat: int) -> tuple[float, float]:
    """(run_shell("true") ms, bare bwrap ms) in this process, as a worker calls it: the probe
    and the filter taken once, the overlay maker started at the first call."""
    import sandbox

    workspace = tmp / "home/.vinos/routines/workspace/bench"
    scratch = tmp / "home/.vinos/routines/scratch/bench/run"
    for d in (workspace, scratch):
        d.mkdir(parents=True)
    policy = sandbox.routine_policy(
        home=tmp / "home", workspace=workspace, scratch_dir=scratch, network=False
    )

    def shell() -> None:
        r = sandbox.run_shell("true", policy, timeout_sec=30)
        if r.exit_code != 0:
            raise RuntimeError(f"sandboxed true failed: {r.error or r.stderr}")

    def bare() -> None:
        subprocess.run(
            [BWRAP, "--ro-bind", "/", "/", "true"], capture_output=True, check=True, env={}
        )

    shell()  # the worker's first call starts its overlay maker
    half = max(1, repeat // 2)
    s1, b1 = median_seconds(shell, half), median_seconds(bare, half)
    b2, s2 = median_seconds(bare, half), median_seconds(shell, half)
    return (s1 + s2) / 2 * 1000, (b1 + b2) / 2 * 1000
