"""Starting one worker process and seeing it through: job in, events out, stopped on time.

The worker is `python -m worker` in its own session (so its process group can be signalled as
one), fed a Hello and a Job on stdin, read as newline-JSON on stdout; its stderr goes to the
run log. Used by the daemon and by `vinos-routine run` without a daemon, so both run a
routine the same way.

Stopping (timeout, budget backstop, daemon shutdown): SIGTERM to the worker's process group
and to every descendant seen (a sandboxed command runs in a session of its own), SIGKILL to
all of them 5 s later (see tests/supervisor/test_spawn.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import msgspec
import psutil

from ipc import (
    Event,
    EventKind,
    Hello,
    Job,
    Lease,
    Proposal,
    ProtocolError,
    Result,
    Usage,
    encode,
    read_message,
)
from supervisor.engine.forkserver import ForkedProcess, ForkServer, ForkUnavailable
from supervisor.engine.limits import COPY_BACK_SEC
from supervisor.engine.pkgroot import package_root
from supervisor.engine.runcgroup import SANDBOX_ENV, RunCgroup
from supervisor.engine.runlog import RunLog

__all__ = [
    "KILL_GRACE_SEC",
    "Spawner",
    "StopReason",
    "UsageTotals",
    "Worker",
    "WorkerOutcome",
    "WorkerProcess",
    "WorkerSpawner",
    "package_root",
]

log = logging.getLogger("vinos.spawn")

KILL_GRACE_SEC = 5.0
STDERR_LINE_CAP = 4096
STDERR_TOTAL_CAP = 1 << 20


class StopReason(StrEnum):
    """Why the supervisor ended a worker early (WorkerOutcome.stopped); supervisor/engine/finish.py
    turns each into the run's final status."""

    TIMEOUT = "timeout"  # past its routine's limit and the report grace (limits.run_limit)
    BUDGET = "budget"  # it reported spending past its allowance (the budget backstop)
    SHUTDOWN = "shutdown"  # the daemon is stopping and its grace ran out
    PROTOCOL = "protocol"  # it broke the pipe's protocol (a bad or unexpected message)
    LEASE = "lease lost"  # a fleet's renewal found the run's lease gone


@dataclass(slots=True)
class UsageTotals:
    input: int = 0
    output: int = 0
    local_input: int = 0
    local_output: int = 0
    dollars: float = 0.0
    model: str = ""

    def add(self, u: Usage) -> None:
        self.input += u.input
        self.output += u.output
        self.local_input += u.local_input
        self.local_output += u.local_output
        self.dollars += u.dollars
        if u.model:
            self.model = u.model

    @property
    def tokens(self) -> int:
        return self.input + self.output + self.local_input + self.local_output


@dataclass(slots=True)
class WorkerOutcome:
    result: Result | None
    returncode: int | None
    usage: UsageTotals
    stopped: StopReason | None = None  # when the supervisor ended the worker
    error: str | None = None  # why there is no usable result
    pid: int | None = None
    warnings: list[str] = field(default_factory=list)
    proposals: list[Proposal] = field(default_factory=list)  # recorded by supervisor.engine.finish


# The daemon's own conversation with systemd: never a worker's business.
_DAEMON_ONLY_ENV = (
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "VINOS_DEBUG_TIMINGS",  # supervisor/timings.py: the daemon's test timings and clock
)


def worker_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: ours, minus the daemon's systemd variables, and a PYTHONPATH
    that imports this very code."""
    env = {
        k: v for k, v in (os.environ if base is None else base).items() if k not in _DAEMON_ONLY_ENV
    }
    root = package_root()
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in parts if p != root]])
    return env


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def _signal_all(pgid: int, procs: list[psutil.Process], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


async def within(aw: Awaitable[object], seconds: float) -> bool:
    """Whether `aw` completed within `seconds` (it goes on either way: it is shielded)."""
    try:
        await asyncio.wait_for(asyncio.shield(aw), seconds)
    except TimeoutError:
        return False
    return True


# How WorkerProcess waits out a grace: `within`, or a fake clock's in tests (test_spawn.py).
Within = Callable[[Awaitable[object], float], Awaitable[bool]]


class Worker(Protocol):
    """One run's worker as the pool sees it."""

    @property
    def pid(self) -> int | None: ...

    def stop(self, reason: StopReason) -> None:
        """End it early (idempotent; the first reason wins): `run` then returns `stopped`."""
        ...

    def renew_lease(self, until: float) -> None:
        """A leased run's deadline moved on (`Job.lease_until`): tell the worker."""
        ...

    async def run(self) -> WorkerOutcome:
        """Start it (calling `on_started` with its pid) and return once it and everything it
        started are gone."""
        ...


class Spawner(Protocol):
    """The pool's seam for starting workers: `WorkerSpawner` starts real processes; the
    tests' FakeSpawner (tests/supervisor/fakespawn.py) scripts their outcomes."""

    def __call__(
        self,
        job: Job,
        *,
        log: RunLog,
        timeout_sec: float,
        on_event: Callable[[Event], None],
        on_started: Callable[[int], None],
        max_dollars: float | None,
        max_tokens: int | None,
    ) -> Worker: ...


@dataclass(frozen=True, slots=True)
class WorkerSpawner:
    """Starts `python -m worker` (or `argv`, a stand-in worker in tests) per run: forked by
    `forks` when it is up (supervisor/engine/forkserver.py), else spawned."""

    argv: list[str] | None = None
    forks: ForkServer | None = None
    cgroups: str | None = None  # the delegated cgroup runs get one under (sandbox/cgroup.py)

    def __call__(
        self,
        job: Job,
        *,
        log: RunLog,
        timeout_sec: float,
        on_event: Callable[[Event], None],
        on_started: Callable[[int], None],
        max_dollars: float | None,
        max_tokens: int | None,
    ) -> WorkerProcess:
        return WorkerProcess(
            job,
            log=log,
            timeout_sec=timeout_sec,
            on_event=on_event,
            on_started=on_started,
            max_dollars=max_dollars,
            max_tokens=max_tokens,
            argv=self.argv,
            forks=self.forks,
            cgroups=self.cgroups,
        )


class WorkerProcess:
    """One run's worker. `run()` returns when the worker and everything it started are gone."""

    def __init__(
        self,
        job: Job,
        *,
        log: RunLog,
        timeout_sec: float,
        on_event: Callable[[Event], None] | None = None,
        on_started: Callable[[int], None] | None = None,
        max_dollars: float | None = None,
        max_tokens: int | None = None,
        argv: list[str] | None = None,
        within: Within = within,
        forks: ForkServer | None = None,
        cgroups: str | None = None,
    ) -> None:
        self.job = job
        self.cgroups = cgroups
        self.within = within
        self.log = log
        self.timeout_sec = timeout_sec
        self.on_event = on_event or (lambda e: None)
        self.on_started = on_started or (lambda pid: None)
        self.max_dollars = max_dollars
        self.max_tokens = max_tokens
        # -P: `-m` would otherwise put the current directory first on sys.path, so a `worker`
        # (or `anthropic`, `httpx` …) package wherever the daemon or the CLI was started from
        # would run instead of ours (tests/packaging/test_installed_run.py). PYTHONPATH
        # (worker_env) still names the directory holding our packages.
        self.argv = argv or [sys.executable, "-P", "-m", "worker"]
        self.forks = forks
        self.forked = False  # whether the forkserver started it (else a plain spawn)
        self.usage = UsageTotals()
        self._stop = asyncio.Event()
        self._stop_reason: StopReason | None = None
        self._proc: asyncio.subprocess.Process | ForkedProcess | None = None
        self._lease_pipe: asyncio.StreamWriter | None = None
        # The newest "yours until" (the job's, moved on by each renewal): a renewal that comes
        # while the worker starts (a fork waiting for the forkserver's imports) goes into the
        # job it is handed, never dropped, or the worker would start past a stale deadline and
        # stop itself (tests/supervisor/test_spawn.py::
        # test_a_renewal_during_the_start_goes_into_the_job_the_worker_gets).
        self._until = job.lease_until
        # The worker said a call's writes are being copied back (EventKind.COPY_BACK).
        self._copying_back = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def stop(self, reason: StopReason) -> None:
        """Ask for the worker to be ended (idempotent; the first reason wins)."""
        if self._stop_reason is None:
            self._stop_reason = reason
        self._stop.set()

    def renew_lease(self, until: float) -> None:
        """Write "yours until `until`" to the worker's stdin, kept open for a leased run. A
        worker that is gone, or a full pipe, loses the renewal: its deadline then stands."""
        if self._until is not None:
            self._until = max(self._until, until)
        pipe = self._lease_pipe
        if pipe is None or pipe.is_closing():
            return
        with contextlib.suppress(OSError, RuntimeError):
            pipe.write(encode(Lease(until)))

    def _emit(self, event: Event) -> None:
        self.log.event(event)
        if event.kind is EventKind.COPY_BACK:
            # A signal to this backstop, kept in the run log (`logs` shows it), not a line of
            # the run's narration streamed after every shell call.
            self._copying_back = True
            return
        self.on_event(event)

    def _over_budget(self, u: Usage) -> str | None:
        """Backstop: a worker that calls a paid model after its allowance was spent, or that
        uses twice its premium token cap, is ended: it was told the allowance and ignored it.
        (Local tokens are free and not capped: the worker's budget counts paid tokens.)"""
        already_spent = self.max_dollars is not None and self.usage.dollars >= self.max_dollars
        self.usage.add(u)
        if u.dollars > 0 and already_spent:
            return f"spent ${self.usage.dollars:.4f} of a ${self.max_dollars:.4f} allowance"
        paid = self.usage.input + self.usage.output
        if self.max_tokens is not None and paid > 2 * self.max_tokens:
            return f"used {paid} premium tokens of a {self.max_tokens}-token cap"
        return None

    async def _read_stdout(self, stdout: asyncio.StreamReader, out: WorkerOutcome) -> None:
        first = True
        while True:
            try:
                msg = await read_message(stdout)
            except ProtocolError as exc:
                out.error = f"worker protocol error: {exc}"
                self.stop(StopReason.PROTOCOL)
                return
            if msg is None:
                return
            if first:
                first = False
                if not isinstance(msg, Hello):
                    out.error = f"worker protocol error: expected hello, got {msg.TYPE}"
                    self.stop(StopReason.PROTOCOL)
                    return
                continue
            if isinstance(msg, Event):
                self._emit(msg)
            elif isinstance(msg, Usage):
                self.log.usage(msg)
                over = self._over_budget(msg)
                if over:
                    self._emit(Event(EventKind.WARN, f"budget backstop: {over}; ending the run"))
                    self.stop(StopReason.BUDGET)
            elif isinstance(msg, Proposal):
                out.proposals.append(msg)
            elif isinstance(msg, Result):
                if out.result is not None:
                    out.error = "worker protocol error: a second result"
                    self.stop(StopReason.PROTOCOL)
                    return
                out.result = msg
            else:
                out.error = f"worker protocol error: unexpected {msg.TYPE}"
                self.stop(StopReason.PROTOCOL)
                return

    async def _read_stderr(self, stderr: asyncio.StreamReader) -> None:
        total = 0
        while True:
            try:
                line = await stderr.readline()
            except ValueError:  # a line past the reader's limit: skip it
                line = b"(an over-long line was dropped)\n"
            if not line:
                return
            total += len(line)
            if total <= STDERR_TOTAL_CAP:
                self.log.stderr(line[:STDERR_LINE_CAP].decode("utf-8", "replace").rstrip("\n"))

    async def run(self) -> WorkerOutcome:
        run_cgroup = self._cgroup()
        try:
            return await self._run(run_cgroup)
        finally:
            if run_cgroup is not None:
                # Whatever is left of the run goes with it; off the loop, as the kernel may
                # take a moment to empty it.
                await asyncio.to_thread(run_cgroup.remove)

    def _cgroup(self) -> RunCgroup | None:
        """The run's cgroup (sandbox/cgroup.py), when the daemon has a delegated subtree;
        None, and the per-call sampled limits alone, when it cannot be made."""
        if self.cgroups is None:
            return None
        try:
            return RunCgroup.create(self.cgroups, self.job.run_id)
        except OSError as exc:
            log.warning("%s: no cgroup for the run (%s): limits are sampled", self.job.run_id, exc)
            return None

    async def _run(self, run_cgroup: RunCgroup | None) -> WorkerOutcome:
        out = WorkerOutcome(result=None, returncode=None, usage=self.usage)
        try:
            proc = await self._start(run_cgroup)
        except OSError as exc:
            out.error = f"could not start the worker ({self.argv[0]}): {exc.strerror or exc}"
            return out
        self._proc = proc
        out.pid = proc.pid
        try:
            self.on_started(proc.pid)
        except BaseException:
            # The caller will not await this worker: end it and its tree before the error goes
            # on, so none is left running unrecorded (tests/supervisor/test_spawn.py).
            await self._terminate(proc)
            await proc.wait()
            raise
        assert proc.stdin and proc.stdout and proc.stderr
        readers = [
            asyncio.ensure_future(self._read_stdout(proc.stdout, out)),
            asyncio.ensure_future(self._read_stderr(proc.stderr)),
        ]
        try:
            job = self.job
            if self._until != job.lease_until:
                job = msgspec.structs.replace(job, lease_until=self._until)
            proc.stdin.write(encode(Hello()) + encode(job))
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it died at once; its exit status tells why
        finally:
            if self.job.lease_until is None:
                proc.stdin.close()
            else:
                self._lease_pipe = proc.stdin  # renewals follow (renew_lease)
        waiter = asyncio.ensure_future(proc.wait())
        stopper = asyncio.ensure_future(self._stop.wait())
        try:
            either = asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            await self.within(either, self.timeout_sec)
            if not waiter.done() and not stopper.done() and self._copying_back:
                # Past the limit while copying back: once more, bounded, so its folders get
                # the call's writes whole, not cut halfway (limits.COPY_BACK_SEC).
                either = asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                await self.within(either, COPY_BACK_SEC)
            if not waiter.done():
                if not stopper.done():
                    self.stop(StopReason.TIMEOUT)
                await self._terminate(proc)
        finally:
            stopper.cancel()
            if not waiter.done():
                await self._terminate(proc)
            out.returncode = await waiter
            if self._lease_pipe is not None:
                self._lease_pipe.close()
                self._lease_pipe = None
            # The pipes close when the worker (and anything holding them) is gone.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*readers), KILL_GRACE_SEC)
            for r in readers:
                r.cancel()
        out.stopped = self._stop_reason
        if out.result is None and out.error is None:
            out.error = self._exit_text(out.returncode)
        return out

    async def _start(
        self, run_cgroup: RunCgroup | None
    ) -> asyncio.subprocess.Process | ForkedProcess:
        """The worker, forked when the forkserver is up, else spawned; the same either way
        (worker/forkserver.py's invariant; tests/supervisor/test_spawn.py runs both). In the
        run's cgroup when there is one: moved there before it is sent the job, so before it
        starts anything."""
        env = worker_env()
        if run_cgroup is not None:
            env[SANDBOX_ENV] = run_cgroup.sandbox
        proc = await self._spawn(env)
        if run_cgroup is not None:
            try:
                run_cgroup.enter(proc.pid)
            except OSError as exc:  # its sandboxes still go into the run's sandbox cgroup
                log.warning("%s: the worker stays in the daemon's cgroup: %s", self.job.run_id, exc)
        return proc

    async def _spawn(self, env: dict[str, str]) -> asyncio.subprocess.Process | ForkedProcess:
        if self.forks is not None:
            try:
                proc = await self.forks.spawn(self.argv, env)
            except ForkUnavailable as exc:
                log.info("%s: spawning the worker (the forkserver is %s)", self.job.run_id, exc)
            else:
                log.info("%s: worker pid %d forked by the forkserver", self.job.run_id, proc.pid)
                self.forked = True
                return proc
        return await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env=env,
            close_fds=True,
        )

    async def _terminate(self, proc: asyncio.subprocess.Process | ForkedProcess) -> None:
        """SIGTERM to the tree, KILL_GRACE_SEC to go, then SIGKILL to what is left."""
        procs = _descendants(proc.pid)
        if self._stop_reason == StopReason.LEASE:  # another machine may run it now: no grace
            _signal_all(proc.pid, procs, signal.SIGKILL)
        _signal_all(proc.pid, procs, signal.SIGTERM)
        await self.within(proc.wait(), KILL_GRACE_SEC)
        procs += [p for p in _descendants(proc.pid) if p not in procs]
        _signal_all(proc.pid, procs, signal.SIGKILL)
        await self.within(proc.wait(), KILL_GRACE_SEC)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.wait(timeout=0)

    @staticmethod
    def _exit_text(code: int | None) -> str:
        if code is None:
            return "the worker did not exit"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the worker was killed by {name} before it reported a result"
        return f"the worker exited with status {code} before it reported a result"
