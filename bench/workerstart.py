"""Worker start-up as the daemon starts a worker, for bench_worker*.py: forked by the
forkserver (supervisor/engine/forkserver.py: what the daemon does whenever one is up) and spawned as
`python -P -m worker` (the fallback while none is), each timed from start to its first request
at a fake server, against a floor command that sends one request to the same fake, timed the
same way. The three are warmed once, then interleaved, so a noisy moment hits each alike.

Everything runs with bytecode cached (PYTHONPYCACHEPREFIX in a temp dir, filled by the warm-up
run), as an installed package has it: a checkout the benchmark user cannot write to would
otherwise make the worker compile its own modules on every start, which no install does.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common import Row
from ipc import Hello, Job, encode
from routines.runs import Trigger
from supervisor.engine.forkserver import ForkServer, ForkState
from tests.fakes import Recorded

__all__ = ["REPO", "Peer", "Starts", "bench_job", "measure", "start_rows"]

REPO = Path(__file__).resolve().parent.parent
# A worker's Result says the run succeeded (not only that a request arrived).
OK = b'"status":"ok"'


def bench_job(home: Path, url: str, i: int, toml: str) -> Job:
    """Run `i` of the routine `toml` (named "bench"), its Ollama server at `url`."""
    state = home / "routines" / "state" / "bench"
    scratch = state / ".scratch" / f"run-{i}"
    scratch.mkdir(parents=True, exist_ok=True)
    return Job(
        run_id=f"run-{i}",
        routine_name="bench",
        routine_path=str(home / "routines" / "bench.toml"),
        routine_toml=toml,
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


@dataclass(frozen=True, slots=True)
class Peer:
    """A program measured alongside, as the floor is: `cmd` with `env` added to the bench's
    environment, its figures under `name` in Starts."""

    name: str
    cmd: tuple[str, ...]
    env: dict[str, str]


@dataclass(frozen=True, slots=True)
class Starts:
    """Each way's (start → the first request's arrival, the last request → the process
    gone), in seconds, one pair a run: "fork", "spawn", "floor" and each peer's name."""

    got: dict[str, list[tuple[float, float]]]
    repeat: int

    def ms(self, how: str, which: int = 0) -> float:
        return statistics.median(x[which] for x in self.got[how]) * 1000


Arrivals = Callable[[], list[Recorded]]


def _checked(what: str, seen: int, got: list[Recorded], code: int, out: bytes) -> None:
    if len(got) <= seen or code != 0 or OK not in out:
        raise RuntimeError(f"{what} made no request or did not succeed (exit {code})")


def _timed(
    cmd: list[str], data: bytes, arrivals: Arrivals, env: dict[str, str], check: bool
) -> tuple[float, float]:
    """(spawn → the first request's arrival, the last request → the process gone)."""
    seen = len(arrivals())
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env=env,
    )
    out, _ = proc.communicate(data, timeout=120)
    gone = time.monotonic()
    got = arrivals()
    _checked(" ".join(cmd[:3]), seen, got, proc.returncode, out if check else OK)
    return got[seen].at - t0, gone - got[-1].at


async def _forked(
    forks: ForkServer, argv: list[str], data: bytes, arrivals: Arrivals, env: dict[str, str]
) -> tuple[float, float]:
    """`_timed`, for a worker the forkserver forks."""
    seen = len(arrivals())
    t0 = time.monotonic()
    proc = await forks.spawn(argv, env)
    assert proc.stdin and proc.stdout and proc.stderr
    proc.stdin.write(data)
    await proc.stdin.drain()
    proc.stdin.close()
    out, _ = await asyncio.gather(proc.stdout.read(), proc.stderr.read())
    code = await proc.wait()
    gone = time.monotonic()
    got = arrivals()
    _checked("the forked worker", seen, got, code, out)
    return got[seen].at - t0, gone - got[-1].at


async def _up(env: dict[str, str]) -> ForkServer:
    forks = ForkServer()
    forks.keep(True, env)
    for _ in range(1200):
        if forks.state is not ForkState.STARTING:
            break
        await asyncio.sleep(0.05)
    if forks.state is not ForkState.UP:
        raise RuntimeError(f"the forkserver is {forks.why}")
    return forks


def measure(
    repeat: int,
    job: Callable[[Path, int], Job],
    floor: list[str],
    arrivals: Arrivals,
    extra_env: dict[str, str] | None = None,
    peers: tuple[Peer, ...] = (),
) -> Starts:
    """`job(home, i)` run forked, spawned, the `floor` command and the `peers`, warmed once
    then interleaved `repeat` times; `arrivals()` lists the fake server's requests so far."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "vinos"
        (home / "routines").mkdir(parents=True)
        env = {**os.environ, "VINOS_HOME": str(home), "PYTHONPYCACHEPREFIX": f"{tmp}/pycache"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("ANTHROPIC_API_KEY", None)
        env.update(extra_env or {})
        # As the daemon's worker_env: -P keeps the cwd off sys.path, PYTHONPATH names the tree.
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(":")
        worker = [sys.executable, "-P", "-m", "worker"]

        def data(i: int) -> bytes:
            return encode(Hello()) + encode(job(home, i))

        def others() -> list[tuple[str, list[str], dict[str, str]]]:
            """The floor and the peers: (name, command, environment)."""
            return [("floor", floor, env), *((p.name, [*p.cmd], {**env, **p.env}) for p in peers)]

        async def run() -> dict[str, list[tuple[float, float]]]:
            cwd = os.getcwd()
            os.chdir(REPO)  # the forked worker takes the daemon's cwd, as _timed's cwd=REPO
            forks = await _up(env)
            try:
                _timed(worker, data(0), arrivals, env, True)  # warm: bytecode, page cache
                for _, cmd, cmd_env in others():
                    _timed(cmd, b"", arrivals, cmd_env, False)
                await _forked(forks, worker, data(0), arrivals, env)
                got: dict[str, list[tuple[float, float]]] = {"fork": [], "spawn": []}
                got.update((name, []) for name, _, _ in others())
                for i in range(1, repeat + 1):
                    got["fork"].append(await _forked(forks, worker, data(i), arrivals, env))
                    got["spawn"].append(_timed(worker, data(i), arrivals, env, True))
                    for name, cmd, cmd_env in others():
                        got[name].append(_timed(cmd, b"", arrivals, cmd_env, False))
                return got
            finally:
                await forks.close()
                os.chdir(cwd)

        return Starts(asyncio.run(run()), repeat)


def start_rows(route: str, starts: Starts, floor: str, target: float | None) -> list[Row]:
    """The forked row (what the daemon does while its forkserver is up: the one `target`, a
    ratio to the floor, is for) and the spawned row (the fallback), both against `floor`."""
    fs, ws, bs = starts.ms("fork"), starts.ms("spawn"), starts.ms("floor")
    n = starts.repeat
    floor_txt = f"{floor}: {bs:.1f} ms"
    return [
        Row(
            f"worker start → first request, {route} route, forked (median of {n})",
            fs,
            "ms",
            baseline=f"{floor_txt}; spawned worker {ws:.0f} ms ({fs / ws:.2f}x)",
            ratio=fs / bs,
            target="" if target is None else f"<= {target:g}x",
            met=None if target is None else fs / bs <= target,
        ),
        Row(
            f"worker start → first request, {route} route, spawned (median of {n})",
            ws,
            "ms",
            baseline=f"{floor_txt} (the fallback, no forkserver up)",
            ratio=ws / bs,
        ),
    ]
