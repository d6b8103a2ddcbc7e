"""The daemon's side of the forkserver (worker/forkserver.py): start it while a run is due
soon or running, ask it to fork a run's worker, learn the worker's exit, stop it when idle.

The forkserver has the SDKs imported (anthropic's ~1.4 s of CPU and openai's ~0.2 s more,
paid once, not per run); the daemon never does: it only starts
`python -P -m worker.forkserver FD` and talks over the socketpair whose other end is FD
(inherited, so nothing else can connect).

A forked worker looks to the pool exactly like a spawned one (`ForkedProcess` has the
asyncio Process's pid, pipes, returncode and wait), and starts in the same state (the
invariant in worker/forkserver.py). When the forkserver is not up, or a fork fails, the
spawner starts the worker the plain way and logs why (supervisor/engine/spawn.py).

Lifetime (`wanted`, pure): up while a run is running or queued, the next due slot is at
most FORK_AHEAD_SEC away, or the daemon was last used (started, asked to run, a run ended)
at most KEEP_WARM_SEC ago; closed otherwise once no worker it forked is alive (closing only
stops new forks: the forkserver waits for its children before it exits, since they die with
it). The daemon's shutdown closes it after the pool's workers ended. The keep window is why a
typed `run` with the daemon up starts as a scheduled one does (the first thing a person does
after starting the daemon is try a routine); past it, an idle daemon is as small as before,
and a typed run starts the forkserver and waits for it (`spawn` waits for one starting)
rather than paying a second cold start beside it.

What it preloads (`needs_sdk`, pure): while every routine the daemon has is a command, only what
a command run imports (`--commands`: no SDK, ~0.25 s of CPU to start rather than ~2 s); the
first agent routine (a reload) restarts it with the SDKs, before its first run.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import os
import resource
import signal
import socket
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from routines.spec.routine import Kind

__all__ = [
    "FORK_AHEAD_SEC",
    "KEEP_WARM_SEC",
    "ForkServer",
    "ForkState",
    "ForkUnavailable",
    "ForkedProcess",
    "forkserver_env",
    "needs_sdk",
    "wanted",
]

log = logging.getLogger("vinos.forkserver")

FORK_AHEAD_SEC = 180.0  # start this long before a due slot: the preload takes ~2 s
# Kept up this long after the daemon was last used: its idle cost is the preloaded SDKs'
# memory (docs/design.md states it), its wakeups none (it blocks in recvmsg).
KEEP_WARM_SEC = 1800.0
READY_TIMEOUT_SEC = 60.0
# How long a fork request waits for a forkserver still importing before it spawns instead:
# it started before any spawn begun now could, and imports the same, so it is ready first (a
# cold start on a loaded 2-core machine takes 10 s); a hung one fails at READY_TIMEOUT_SEC.
START_WAIT_SEC = 30.0
REPLY_TIMEOUT_SEC = 10.0
# What the forkserver's own environment keeps of the worker's: what the interpreter and the
# preload read at start-up, nothing a run uses (no key, no token: those reach each child in
# its own environment, replaced whole at fork).
_KEEP = ("PATH", "PYTHONPATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME")
_KEEP_PREFIX = ("LC_", "PYTHON")
_RLIMITS = tuple(getattr(resource, n) for n in sorted(dir(resource)) if n.startswith("RLIMIT_"))


class ForkState(enum.Enum):
    DOWN = "down"  # not started, or closed
    STARTING = "starting"  # started, importing the worker's modules
    UP = "up"  # forks on request
    FAILED = "failed"  # it died or refused; a later `keep(True)` starts another


class ForkUnavailable(RuntimeError):
    """No fork: why, for the log line of the plain spawn that follows."""


def forkserver_env(worker_env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in worker_env.items() if k in _KEEP or k.startswith(_KEEP_PREFIX)}


def wanted(
    *,
    active: int,
    next_due: datetime | None,
    now: datetime,
    ahead: float,
    last_use: datetime | None = None,
    keep: float = 0.0,
) -> bool:
    """Whether the forkserver should be up: runs running or queued, one due within `ahead`
    seconds, or the daemon used within `keep` seconds (tests/supervisor/test_forkserver.py)."""
    if active:
        return True
    if last_use is not None and (now - last_use).total_seconds() <= keep:
        return True
    return next_due is not None and (next_due - now).total_seconds() <= ahead


def needs_sdk(kinds: Iterable[Kind]) -> bool:
    """Whether the forkserver preloads the SDKs: when any of the daemon's routines is not a
    command (an agent run, or a reply to one, imports them; a command run never does)."""
    return any(kind is not Kind.COMMAND for kind in kinds)


def forkserver_for(worker_argv: list[str] | None, enabled: bool = True) -> ForkServer | None:
    """The daemon's forkserver: for real workers (`worker_argv` None; a stand-in worker in
    tests is spawned), unless `enabled` is False (Timings.forkserver, from VINOS_DEBUG_TIMINGS:
    the test suite's default, since a forkserver is ~2 s of CPU per daemon;
    tests/supervisor/test_forkserver.py and the daemon tests that ask for it run one)."""
    if worker_argv is not None or not enabled:
        return None
    return ForkServer()


def keep_forkserver(
    forks: ForkServer,
    active: int,
    next_due: datetime | None,
    now: datetime,
    env: dict[str, str],
    last_use: datetime | None = None,
    sdk: bool = True,
) -> None:
    """The daemon's hook, once a tick and when a run is asked for (`active`: runs running or
    queued; `env`: the workers' environment, supervisor/engine/spawn.py's worker_env; `last_use`:
    when the daemon started, was asked to run or saw a run end; `sdk`: `needs_sdk` of its
    routines): up while `wanted`, closed when not."""
    want = wanted(
        active=active,
        next_due=next_due,
        now=now,
        ahead=FORK_AHEAD_SEC,
        last_use=last_use,
        keep=KEEP_WARM_SEC,
    )
    forks.keep(want, env, sdk)


def _rlimits() -> list[list[int]]:
    return [[r, *resource.getrlimit(r)] for r in _RLIMITS]


@dataclass(slots=True)
class ForkedProcess:
    """A forked worker, as `asyncio.subprocess.Process` presents a spawned one."""

    pid: int
    stdin: asyncio.StreamWriter | None
    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None
    exited: asyncio.Future[int]
    returncode: int | None = None

    async def wait(self) -> int:
        self.returncode = await asyncio.shield(self.exited)
        return self.returncode


@dataclass(frozen=True, slots=True)
class Reply:
    """The forkserver's answer to one request, and the forked worker's exit to come."""

    msg: dict[str, Any]
    exited: asyncio.Future[int] | None


@dataclass(slots=True)
class _Conn:
    """One forkserver process and what is waiting on it."""

    sock: socket.socket
    proc: asyncio.subprocess.Process
    replies: deque[asyncio.Future[Reply]] = field(default_factory=deque)
    exits: dict[int, asyncio.Future[int]] = field(default_factory=dict)

    def dispatch(self, msg: dict[str, Any]) -> None:
        if "exit" in msg:
            fut = self.exits.pop(int(msg["exit"]), None)
            if fut is not None and not fut.done():
                fut.set_result(int(msg["code"]))
        elif self.replies:
            reply = self.replies.popleft()
            exited: asyncio.Future[int] | None = None
            if "pid" in msg:
                # Registered here, before the next datagram (its exit, maybe) is read.
                exited = asyncio.get_running_loop().create_future()
                self.exits[int(msg["pid"])] = exited
            if not reply.done():
                reply.set_result(Reply(msg, exited))

    def gone(self, why: str) -> None:
        for fut in self.replies:
            if not fut.done():
                fut.set_exception(ForkUnavailable(why))
        self.replies.clear()
        # Its workers die with it (their PDEATHSIG is SIGKILL): said as they would be.
        for ex in self.exits.values():
            if not ex.done():
                ex.set_result(-signal.SIGKILL)
        self.exits.clear()


class ForkServer:
    def __init__(self, argv: list[str] | None = None) -> None:
        self.argv = argv or [sys.executable, "-P", "-m", "worker.forkserver"]
        self.state = ForkState.DOWN
        self.why = "not started: no run was due"
        self.sdk = False  # whether the current one preloads the SDKs (`--commands` when not)
        self._conn: _Conn | None = None  # the current one, once it has started
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()  # requests one at a time: replies come in order
        self._settled: asyncio.Event | None = None  # set once a start is up, failed or closed

    @property
    def pid(self) -> int | None:
        return self._conn.proc.pid if self._conn is not None else None

    @property
    def children(self) -> int:
        return len(self._conn.exits) if self._conn is not None else 0

    def keep(self, want: bool, env: dict[str, str], sdk: bool = True) -> None:
        """Start it when wanted and down; close it when not wanted and none of its workers
        is alive (the daemon's tick calls this). `sdk`: preload the SDKs; one started without
        them is replaced when they are wanted (its workers end as they would: closing only
        stops new forks)."""
        if want and sdk and not self.sdk and self.state in (ForkState.STARTING, ForkState.UP):
            log.info("forkserver restarting (pid %d): a routine needs the SDK", self.pid or 0)
            self._close("restarting: a routine needs the SDK")
        if want and self.state in (ForkState.DOWN, ForkState.FAILED):
            self.sdk = sdk
            self.state = ForkState.STARTING
            self.why = "starting: importing the worker's modules"
            self._settled = asyncio.Event()
            task = asyncio.ensure_future(self._serve(env, sdk))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif not want and self.state is ForkState.UP and not self.children:
            log.info("forkserver stopping (pid %d): no run due", self.pid or 0)
            self._close("closed: no run due")

    async def close(self) -> None:
        """Stop it and wait for it to exit (the daemon's shutdown, after the pool's workers
        ended)."""
        pid = self.pid
        self._close("closed: the daemon stops")
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if pid is not None:
            # Said as its start is (tests/supervisor/test_daemon_systemd.py::
            # test_a_foreground_daemon_says_why_and_when_it_stops).
            log.info("forkserver stopped (pid %d): the daemon stops", pid)

    def _close(self, why: str) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_WR)  # EOF: it forks no more, then exits
        self.state = ForkState.DOWN
        self.why = why
        self._settle()

    def _settle(self) -> None:
        if self._settled is not None:
            self._settled.set()

    def _failed(self, conn: _Conn | None, why: str) -> None:
        if conn is self._conn and self.state is not ForkState.DOWN:
            self._conn = None
            self.state = ForkState.FAILED
            self.why = f"failed: {why}"
            log.warning("forkserver %s", self.why)
            self._settle()

    async def _serve(self, env: dict[str, str], sdk: bool) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                *([] if sdk else ["--commands"]),
                str(theirs.fileno()),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                start_new_session=True,  # as a worker: a terminal's ^C is the daemon's
                env=forkserver_env(env),
                pass_fds=(theirs.fileno(),),
            )
        except OSError as exc:
            ours.close()
            self._failed(self._conn, f"could not start it: {exc}")
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        conn = _Conn(ours, proc)
        if self.state is ForkState.STARTING:
            self._conn = conn
        loop = asyncio.get_running_loop()
        try:
            first = await asyncio.wait_for(loop.sock_recv(ours, 4096), READY_TIMEOUT_SEC)
            if not first:
                raise ConnectionError("it exited while importing (its stderr says why)")
            if conn is self._conn and self.state is ForkState.STARTING:
                self.state = ForkState.UP
                self.why = "up"
                log.info("forkserver up (pid %d%s)", proc.pid, "" if sdk else ", for commands")
                self._settle()
            while data := await loop.sock_recv(ours, 65536):
                conn.dispatch(json.loads(data))
            self._failed(conn, "it exited")
        except (OSError, ValueError, TimeoutError) as exc:
            self._failed(conn, f"{type(exc).__name__}: {exc}")
        finally:
            ours.close()
            conn.gone(self.why)
            if (
                proc.returncode is None
                and conn is not self._conn
                and self.state is not ForkState.DOWN
            ):
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await proc.wait()

    async def spawn(self, argv: list[str], env: dict[str, str]) -> ForkedProcess:
        """Fork a worker running `argv` with `env`, the daemon's cwd, umask and rlimits;
        ForkUnavailable (with why) when the forkserver is not up or the fork failed. One still
        starting is waited for, at most START_WAIT_SEC: it is further along than a spawn
        started now would be (tests/supervisor/test_forkserver.py::
        test_a_run_asked_for_while_the_forkserver_starts_waits_for_it_and_is_forked)."""
        settled = self._settled
        if self.state is ForkState.STARTING and settled is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(settled.wait(), START_WAIT_SEC)
        conn = self._conn
        if self.state is not ForkState.UP or conn is None:
            raise ForkUnavailable(self.why)
        loop = asyncio.get_running_loop()
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(3)]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        mine = [pipes[0][1], pipes[1][0], pipes[2][0]]
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        umask = os.umask(0o077)
        os.umask(umask)
        try:
            pid, exited = await self._fork(conn, argv, env, [*theirs, cwd], umask, _rlimits())
        except BaseException:
            for fd in mine:
                os.close(fd)
            raise
        finally:
            for fd in (*theirs, cwd):
                os.close(fd)
        return ForkedProcess(
            pid,
            stdin=await _writer(loop, mine[0]),
            stdout=await _reader(loop, mine[1]),
            stderr=await _reader(loop, mine[2]),
            exited=exited,
        )

    async def fork_with(
        self,
        argv: list[str],
        env: dict[str, str],
        fds: list[int],
        umask: int,
        rlimits: list[list[int]],
    ) -> tuple[int, asyncio.Future[int]]:
        """Fork `argv` with the given [stdin, stdout, stderr, cwd] descriptors (sent, not
        closed here), `env` whole, `umask` and `rlimits`: its pid and its exit code to come
        (a signal negative). Never waits for a forkserver still starting: ForkUnavailable
        (the caller has a path of its own, supervisor/control/sandboxsock.py)."""
        conn = self._conn
        if self.state is not ForkState.UP or conn is None:
            raise ForkUnavailable(self.why)
        return await self._fork(conn, argv, env, fds, umask, rlimits)

    async def _fork(
        self,
        conn: _Conn,
        argv: list[str],
        env: dict[str, str],
        fds: list[int],
        umask: int,
        rlimits: list[list[int]],
    ) -> tuple[int, asyncio.Future[int]]:
        loop = asyncio.get_running_loop()
        req = json.dumps({"argv": argv, "env": env, "umask": umask, "rlimits": rlimits})
        async with self._lock:
            fut: asyncio.Future[Reply] = loop.create_future()
            conn.replies.append(fut)
            try:
                socket.send_fds(conn.sock, [req.encode()], fds)
            except OSError as exc:
                conn.replies.remove(fut)
                raise ForkUnavailable(f"the request was not sent: {exc}") from exc
            try:
                reply = await asyncio.wait_for(fut, REPLY_TIMEOUT_SEC)
            except TimeoutError:
                raise ForkUnavailable("no reply to a fork request") from None
        if reply.exited is None:
            raise ForkUnavailable(f"the fork failed: {reply.msg.get('error', reply.msg)}")
        return int(reply.msg["pid"]), reply.exited


async def _reader(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(loop=loop)  # the default limit, as a subprocess's pipe
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop),
        open(fd, "rb", buffering=0),  # noqa: SIM115 - the transport owns it
    )
    return reader


async def _writer(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.StreamWriter:
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop),
        open(fd, "wb", buffering=0),  # noqa: SIM115 - the transport owns it
    )
    return asyncio.StreamWriter(transport, protocol, None, loop)
