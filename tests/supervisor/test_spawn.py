"""WorkerProcess with stand-in workers (tests/supervisor/fakeworker.py): real processes that speak,
or break, the worker protocol. Stopping (timeout, budget, shutdown), the backstop's arithmetic,
protocol errors and the run log, without a daemon (a protocol error ends that run, never the
daemon).
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import psutil
import pytest

from ipc import Event, Job, decode
from routines.ledger import LedgerUnavailable, Unavailable
from routines.runs import Trigger
from routines.spec.config import Config
from routines.spec.paths import paths
from routines.spec.registry import scan
from supervisor.engine import limits, spawn
from supervisor.engine.forkserver import ForkServer, ForkState
from supervisor.engine.jobs import build_job
from supervisor.engine.runlog import RunLog, read_log
from supervisor.engine.spawn import StopReason, WorkerOutcome, WorkerProcess, worker_env
from tests.supervisor.daemonkit import REPO, command_routine, processes_with_cmdline, write_routine

FAKE = str(REPO / "tests/supervisor/fakeworker.py")
# The forkserver without the SDK preloaded: the stand-in workers need none of it, and every
# test here runs both ways (a forked worker must behave as a spawned one).
BARE_FORKSERVER = [sys.executable, "-P", "-m", "worker.forkserver", "--bare"]
_forked = [False]


@pytest.fixture(autouse=True, params=["spawned", "forked"])
def how(request: pytest.FixtureRequest) -> str:
    _forked[0] = request.param == "forked"
    return str(request.param)


async def started_forkserver() -> ForkServer:
    """A bare forkserver, up (polled: it takes a moment to start)."""
    forks = ForkServer(BARE_FORKSERVER)
    forks.keep(True, worker_env())
    for _ in range(600):
        if forks.state is not ForkState.STARTING:
            break
        await asyncio.sleep(0.05)
    assert forks.state is ForkState.UP, forks.why
    return forks


class Ran:
    def __init__(self, out: WorkerOutcome, events: list[Event], started: list[int], log: Path):
        self.out = out
        self.events = events
        self.started = started
        self.log = list(read_log(log))


def make_job(tmp_path: Path) -> Job:
    write_routine("fake", command_routine("true"))
    routine = scan(paths()).get("fake").routine  # type: ignore[union-attr]
    assert routine is not None
    job = build_job(
        routine,
        run_id="run-1",
        trigger=Trigger.MANUAL,
        slot=None,
        now=datetime(2026, 12, 2, 9, 0, tzinfo=UTC),
        max_tokens=None,
        dollars_left=None,
        paths=paths(),
        config=Config(),
    )
    Path(job.scratch_dir).mkdir(parents=True)
    return job


def run(
    tmp_path: Path,
    mode: str,
    *args: str,
    timeout: float = 60,
    stop_on: str | None = None,
    **kw: object,
) -> Ran:
    events: list[Event] = []
    started: list[int] = []
    log_path = tmp_path / "run.jsonl"
    runlog = RunLog(log_path)

    async def go() -> WorkerOutcome:
        wp: WorkerProcess

        def on_event(e: Event) -> None:
            events.append(e)
            if stop_on is not None and e.text == stop_on:
                wp.stop(StopReason.SHUTDOWN)

        forks = await started_forkserver() if _forked[0] else None
        wp = WorkerProcess(
            make_job(tmp_path),
            log=runlog,
            timeout_sec=timeout,
            on_event=on_event,
            on_started=started.append,
            argv=[sys.executable, FAKE, mode, *args],
            forks=forks,
            **kw,  # type: ignore[arg-type]
        )
        try:
            out = await wp.run()
        finally:
            if forks is not None:
                await forks.close()
        assert wp.forked == _forked[0]
        return out

    out = asyncio.run(go())
    runlog.close()
    return Ran(out, events, started, log_path)


def test_a_worker_that_reports_a_result(tmp_path: Path) -> None:
    r = run(tmp_path, "ok")
    assert r.out.result is not None and r.out.result.status == "ok"
    assert (r.out.returncode, r.out.stopped, r.out.error) == (0, None, None)
    assert r.started == [r.out.pid]
    assert [e.text for e in r.events] == ["working"]
    assert (r.out.usage.input, r.out.usage.output, r.out.usage.model) == (
        10,
        5,
        "claude-sonnet-4-6",
    )
    assert [e["kind"] for e in r.log] == ["log", "usage"]


def test_a_renewal_during_the_start_goes_into_the_job_the_worker_gets(tmp_path: Path) -> None:
    """A fleet run renewed while its worker starts (a fork that waits for the forkserver's
    imports, up to 30 s) hands the worker the renewed deadline: the job's own, from before
    the start, had lapsed under load, and the worker stopped itself as "lease lost"."""
    told = tmp_path / "told"
    told.mkdir()
    job = msgspec.structs.replace(make_job(tmp_path), lease_until=1000.0)

    async def go() -> WorkerOutcome:
        wp = WorkerProcess(
            job,
            log=RunLog(tmp_path / "run.jsonl"),
            timeout_sec=60,
            on_event=lambda e: None,
            on_started=lambda pid: None,
            argv=[sys.executable, FAKE, "job", str(told)],
        )
        wp.renew_lease(1500.0)  # before the worker is up: nothing to write it to yet
        wp.renew_lease(1200.0)  # an older deadline never moves it back
        return await wp.run()

    out = asyncio.run(go())
    assert out.result is not None and out.result.status == "ok"
    got = decode((told / "run-1.json").read_bytes())
    assert isinstance(got, Job) and got.lease_until == 1500.0


class FakeGraces:
    """WorkerProcess's `within` on a fake clock: the waits numbered in `expire` (from 0) run
    out at once (the clock moves on by their length, the process goes on); the others wait
    for the real process (a SIGKILL cannot be ignored), bounded only against a hang."""

    def __init__(self, *expire: int, first_after: Path | None = None) -> None:
        self.expire = set(expire)
        self.clock = 0.0
        self.calls: list[tuple[float, float]] = []  # (fake time of the call, its length)
        # The first wait runs out only once this run log names a copy_back event.
        self.first_after = first_after

    async def __call__(self, aw: Awaitable[object], seconds: float) -> bool:
        self.calls.append((self.clock, seconds))
        task = asyncio.ensure_future(aw)
        if len(self.calls) == 1 and self.first_after is not None:
            log = self.first_after
            for _ in range(600):
                if log.exists() and '"copy_back"' in log.read_text():
                    break
                await asyncio.sleep(0.05)
        if len(self.calls) - 1 in self.expire:
            self.clock += seconds
            return task.done()
        await asyncio.wait_for(asyncio.shield(task), 60)
        return True


def test_stopping_ends_the_worker_and_every_descendant(tmp_path: Path) -> None:
    graces = FakeGraces(1)  # the run is stopped; the worker ignores SIGTERM: the grace runs out
    mark = f"1000.{random.randrange(10**6):06d}"
    r = run(tmp_path, "sprawl", mark, stop_on="sprawled", within=graces)
    # SIGTERM, then SIGKILL exactly KILL_GRACE_SEC later on the clock, not in real time.
    grace = spawn.KILL_GRACE_SEC
    assert graces.calls == [(0.0, 60), (0.0, grace), (grace, grace)]
    # It ignored SIGTERM, so it took SIGKILL; its children (one in a session of its own)
    # were signalled too.
    assert (r.out.stopped, r.out.returncode) == (StopReason.SHUTDOWN, -9)
    assert r.out.error == "the worker was killed by SIGKILL before it reported a result"
    assert not [
        p
        for p in processes_with_cmdline(f"sleep {mark}")
        if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ]


def test_a_worker_past_its_timeout_is_ended(tmp_path: Path) -> None:
    graces = FakeGraces(0)  # the run's 600 s pass at once; SIGTERM ends it
    r = run(tmp_path, "hang", timeout=600, within=graces)
    assert (r.out.stopped, r.out.returncode, r.out.result) == (StopReason.TIMEOUT, -15, None)
    grace = spawn.KILL_GRACE_SEC
    assert graces.calls == [(0.0, 600), (600.0, grace), (600.0, grace)]


def test_a_worker_copying_back_at_its_limit_gets_one_bounded_wait(tmp_path: Path) -> None:
    """A worker that said it is copying a call's writes back when its limit passes is given
    COPY_BACK_SEC more, once, not ended mid-copy with the folders half changed; one that
    still has not ended then is ended as any other."""
    graces = FakeGraces(0, 1, first_after=tmp_path / "run.jsonl")
    r = run(tmp_path, "copyback", timeout=600, within=graces)
    assert (r.out.stopped, r.out.returncode, r.out.result) == (StopReason.TIMEOUT, -15, None)
    grace, extra = spawn.KILL_GRACE_SEC, limits.COPY_BACK_SEC
    assert graces.calls == [
        (0.0, 600),
        (600.0, extra),
        (600.0 + extra, grace),
        (600.0 + extra, grace),
    ]


def test_a_copy_back_past_the_limit_ends_with_the_workers_own_report(tmp_path: Path) -> None:
    graces = FakeGraces(0, first_after=tmp_path / "run.jsonl")
    r = run(tmp_path, "copyback-ok", timeout=600, within=graces)
    assert r.out.stopped is None and r.out.returncode == 0
    assert r.out.result is not None and r.out.result.status == "ok"
    assert graces.calls[:2] == [(0.0, 600), (600.0, limits.COPY_BACK_SEC)]
    # The backstop's signal is in the run log, not streamed as a line of the run.
    assert "copy_back" in [entry.get("kind") for entry in r.log]
    assert "copy_back" not in [e.kind for e in r.events]


def test_the_backstop_ends_a_worker_that_spends_past_its_allowance(tmp_path: Path) -> None:
    r = run(tmp_path, "spend", max_dollars=0.025)
    assert r.out.stopped == StopReason.BUDGET
    warns = [e.text for e in r.events if e.kind == "warn"]
    # $0.01 a call: the 4th call came after $0.03 had been spent of $0.025.
    assert warns[0] == "budget backstop: spent $0.0400 of a $0.0250 allowance; ending the run"
    assert r.out.usage.dollars >= 0.04


def test_the_backstop_ends_a_worker_at_twice_its_token_cap(tmp_path: Path) -> None:
    r = run(tmp_path, "tokens", max_tokens=1500)
    assert r.out.stopped == StopReason.BUDGET
    warns = [e.text for e in r.events if e.kind == "warn"]
    why = "used 4000 premium tokens of a 1500-token cap"
    assert warns[0] == f"budget backstop: {why}; ending the run"


def test_local_tokens_are_free_and_not_capped(tmp_path: Path) -> None:
    r = run(tmp_path, "local", max_tokens=1500, max_dollars=0.01)
    assert (r.out.stopped, r.out.error) == (None, None)
    assert r.out.result is not None and r.out.result.status == "ok"
    assert r.out.usage.local_input == 50_000


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("garbage", "worker protocol error: "),
        ("no-hello", "worker protocol error: expected hello, got event"),
        ("two-results", "worker protocol error: a second result"),
    ],
)
def test_protocol_errors_end_the_worker(tmp_path: Path, mode: str, error: str) -> None:
    r = run(tmp_path, mode)
    assert r.out.stopped == StopReason.PROTOCOL
    assert (r.out.error or "").startswith(error)
    assert r.out.returncode == -15


def test_a_worker_that_exits_without_a_result(tmp_path: Path) -> None:
    r = run(tmp_path, "exit3")
    assert (r.out.result, r.out.stopped, r.out.returncode) == (None, None, 3)
    assert r.out.error == "the worker exited with status 3 before it reported a result"


def test_stderr_goes_to_the_run_log_line_by_line_capped(tmp_path: Path) -> None:
    r = run(tmp_path, "chatty")
    lines = [e["text"] for e in r.log if e["kind"] == "stderr"]
    assert lines == ["first line", "x" * spawn.STDERR_LINE_CAP, "last line"]


def test_a_worker_that_cannot_start(tmp_path: Path) -> None:
    events: list[Event] = []

    async def go() -> WorkerOutcome:
        wp = WorkerProcess(
            make_job(tmp_path),
            log=RunLog(tmp_path / "log.jsonl"),
            timeout_sec=5,
            on_event=events.append,
            argv=[str(tmp_path / "no-such-python")],
        )
        return await wp.run()

    out = asyncio.run(go())
    assert out.error == (
        f"could not start the worker ({tmp_path}/no-such-python): No such file or directory"
    )
    assert out.pid is None


def test_worker_env_keeps_the_daemons_systemd_and_test_variables_to_itself() -> None:
    base = {
        "HOME": "/home/u",
        "NOTIFY_SOCKET": "/run/n",
        "WATCHDOG_USEC": "1",
        "LISTEN_FDS": "1",
        "LISTEN_PID": "2",
        "VINOS_DEBUG_TIMINGS": '{"clock_offset_file": "/tmp/o", "tick_max_sec": 0.2}',
        "PYTHONPATH": f"/elsewhere:{spawn.package_root()}",
        "ANTHROPIC_API_KEY": "k",
    }
    env = worker_env(base)
    assert env == {
        "HOME": "/home/u",
        "PYTHONPATH": f"{spawn.package_root()}:/elsewhere",
        "ANTHROPIC_API_KEY": "k",
    }


def test_an_error_from_on_started_ends_the_worker_before_it_goes_on(tmp_path: Path) -> None:
    """The pool records "started" in on_started; an error there (a fleet database out of
    space) used to escape `run` with the worker left running, awaited by no one."""
    pids: list[int] = []

    def record_started(pid: int) -> None:
        pids.append(pid)
        raise LedgerUnavailable(Unavailable.DISK_FULL, "the database server has no space left")

    async def go() -> None:
        wp = WorkerProcess(
            make_job(tmp_path),
            log=RunLog(tmp_path / "run.jsonl"),
            timeout_sec=600,
            on_started=record_started,
            argv=[sys.executable, FAKE, "hang"],
        )
        with pytest.raises(LedgerUnavailable, match="no space left"):
            await wp.run()

    asyncio.run(go())
    [pid] = pids
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_run_whose_cgroup_cannot_be_made_runs_with_the_sampled_limits(tmp_path: Path) -> None:
    """supervisor/engine/runcgroup.py: a daemon whose delegated cgroup went (or turned read-only)
    still runs the routine, its limits sampled per call; nothing is left to remove."""
    r = run(tmp_path, "ok", cgroups=str(tmp_path / "no-such-cgroup"))
    assert r.out.result is not None and r.out.result.status == "ok", r.out.error
    assert not (tmp_path / "no-such-cgroup").exists()
