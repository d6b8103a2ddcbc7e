"""The sandbox socket: `vinos-routine sandbox NAME [--argv] -- CMD` through the daemon's warm
forkserver, so the call pays no interpreter start and no imports of its own.

`sandbox.sock` beside the control socket (the same 0700 directory, mode 0600), a Unix
SOCK_SEQPACKET socket: a stream socket read by asyncio drops the descriptors a client sends,
and a call needs its caller's. SO_PEERCRED on every connection: only the daemon's own uid is
served; anyone else is closed on without a word (tests/supervisor/test_sandbox_daemon.py::
test_another_user_cannot_call_the_sandbox_socket).

Protocol (one JSON object a datagram):
  → daemon  {"name", "argv": bool, "words": [...], "env": {...}, "rlimits": [[r, soft, hard]]}
            with SCM_RIGHTS [stdin, stdout, stderr, cwd]: the caller's own
  ← client  {"pid": N} once the call runs, or {"fallback": why} when the forkserver is not up
            (nothing ran: the client runs the call itself, as without a daemon)
  → daemon  {"signal": S} for each SIGINT, SIGTERM, SIGHUP or SIGQUIT the client got
  ← client  {"exit": C} (C negative for a signal), then the end.
The client gone before its call ended: the call is killed (nothing of a call outlives it).

What the call gets is what the client's exec of `python -m worker.sandboxcli` would give it:
the client's environment whole (sandboxcli builds the sandbox's own from the routine; the
daemon's never reaches it), cwd, the umask 077 the exec path sets, and the client's rlimits
(never above the daemon's hard ones: the forkserver could not raise them). The daemon writes
the argv (the module is always worker.sandboxcli; the client names only the routine and the
command) and never imports `worker`: the forkserver's child does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import resource
import signal
import socket
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from supervisor.control.server import peer_uid
from supervisor.engine.forkserver import ForkServer, ForkUnavailable

__all__ = [
    "FORWARDED",
    "SOCKET_NAME",
    "SandboxCall",
    "SandboxServer",
    "clamp_rlimits",
    "parse_call",
    "sandboxcli_argv",
]

log = logging.getLogger("vinos.sandboxsock")

SOCKET_NAME = "sandbox.sock"
MAX_REQUEST = 1 << 20
MAX_CALLS = 64  # calls at once; one more is told to run itself
UMASK = 0o077  # as supervisor/cli/sandboxexec.py sets before its exec
FORWARDED = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT})


@dataclass(frozen=True, slots=True)
class SandboxCall:
    """One client's request, checked."""

    name: str
    show_argv: bool
    words: tuple[str, ...]
    env: dict[str, str]
    rlimits: tuple[tuple[int, int, int], ...]


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(w, str) and "\0" not in w for w in value)


def parse_call(data: bytes, nfds: int) -> SandboxCall | str:
    """The call a datagram asks for, or why it is refused (pure)."""
    if nfds != 4:
        return f"{nfds} descriptors, not 4 (stdin, stdout, stderr, cwd)"
    try:
        msg = json.loads(data)
    except ValueError:
        return "not JSON"
    if not isinstance(msg, dict):
        return "not an object"
    name, words, env, limits = msg.get("name"), msg.get("words"), msg.get("env"), msg.get("rlimits")
    if not isinstance(name, str) or not name or name.startswith("-") or "\0" in name:
        return "no routine name"
    if not _strings(words) or not words:
        return "no command"
    if not isinstance(env, dict) or not _strings([*env, *env.values()]):
        return "a malformed environment"
    if not isinstance(limits, list) or not all(
        isinstance(r, list) and len(r) == 3 and all(type(v) is int for v in r) for r in limits
    ):
        return "malformed rlimits"
    return SandboxCall(
        name,
        msg.get("argv") is True,
        tuple(words),
        dict(env),
        tuple((r[0], r[1], r[2]) for r in limits),
    )


def sandboxcli_argv(call: SandboxCall, python: str = sys.executable) -> list[str]:
    """What supervisor/cli/sandboxexec.py's exec runs, for the forkserver to fork (pure)."""
    return [
        python,
        "-P",
        "-m",
        "worker.sandboxcli",
        call.name,
        *(["--argv"] if call.show_argv else []),
        "--",
        *call.words,
    ]


def clamp_rlimits(
    asked: tuple[tuple[int, int, int], ...], own: dict[int, tuple[int, int]]
) -> list[list[int]]:
    """The client's limits, each never above the daemon's hard limit (an unprivileged fork
    cannot raise one), only for the resources the daemon knows (pure; RLIM_INFINITY is -1)."""

    def low(a: int, b: int) -> int:
        if a == resource.RLIM_INFINITY:
            return b
        return a if b == resource.RLIM_INFINITY else min(a, b)

    out: list[list[int]] = []
    for res, soft, hard in asked:
        if res not in own:
            continue
        top = low(hard, own[res][1])
        out.append([res, low(soft, top), top])
    return out


def _own_rlimits() -> dict[int, tuple[int, int]]:
    names = (n for n in dir(resource) if n.startswith("RLIMIT_"))
    return {getattr(resource, n): resource.getrlimit(getattr(resource, n)) for n in names}


async def _readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await fut
    finally:
        loop.remove_reader(fd)


async def _recv(sock: socket.socket, maxfds: int = 0) -> tuple[bytes, list[int], int]:
    loop = asyncio.get_running_loop()
    while True:
        try:
            data, fds, flags, _ = socket.recv_fds(
                sock, MAX_REQUEST, maxfds, socket.MSG_CMSG_CLOEXEC
            )
            return data, fds, flags
        except BlockingIOError:
            await _readable(loop, sock.fileno())


def _send(sock: socket.socket, msg: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # the client gone: its call is killed below
        sock.send(json.dumps(msg).encode())


def _kill(pid: int, sig: int) -> None:
    # The child is its own process group (the forkserver answers its pid after its setsid).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class SandboxServer:
    def __init__(self, forks: ForkServer, used: Callable[[], None], uid: int | None = None) -> None:
        self.forks = forks
        self.used = used  # a call counts as a use of the daemon: the forkserver is kept up
        self.uid = os.getuid() if uid is None else uid
        self.path: Path | None = None
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._calls: dict[asyncio.Task[None], int | None] = {}  # → its pid, once forked

    async def start(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # the daemon lock is held: a socket file left here is stale
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(16)
        sock.setblocking(False)
        self._sock, self.path = sock, path
        self._accepting = asyncio.ensure_future(self._accept())

    async def close(self) -> None:
        """Stop accepting and end the calls still running (before the forkserver closes,
        which waits for its children)."""
        if self._accepting is not None:
            self._accepting.cancel()
        if self._sock is not None:
            self._sock.close()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        for pid in self._calls.values():
            if pid is not None:
                _kill(pid, signal.SIGTERM)
        for task in list(self._calls):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 10)

    async def _accept(self) -> None:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(self._sock)
            conn.setblocking(False)
            if peer_uid(conn) != self.uid:
                conn.close()  # another user: no answer at all
                continue
            if len(self._calls) >= MAX_CALLS:
                _send(conn, {"fallback": f"{MAX_CALLS} calls running through the daemon"})
                conn.close()
                continue
            task = asyncio.ensure_future(self._serve(conn))
            self._calls[task] = None
            task.add_done_callback(self._calls.pop)

    async def _serve(self, conn: socket.socket) -> None:
        try:
            await self._call(conn)
        except Exception:  # a bug in one call must not end the daemon
            log.exception("sandbox call failed")
        finally:
            conn.close()

    async def _call(self, conn: socket.socket) -> None:
        data, fds, flags = await asyncio.wait_for(_recv(conn, 4), 10)
        try:
            checked = parse_call(data, len(fds))
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                checked = "a request over its size"
            if isinstance(checked, str):
                _send(conn, {"fallback": f"refused: {checked}"})
                return
            if not stat.S_ISDIR(os.fstat(fds[3]).st_mode):
                _send(conn, {"fallback": "refused: the cwd is not a directory"})
                return
            self.used()
            try:
                pid, exited = await self.forks.fork_with(
                    sandboxcli_argv(checked),
                    checked.env,
                    fds,
                    UMASK,
                    clamp_rlimits(checked.rlimits, _own_rlimits()),
                )
            except ForkUnavailable as exc:
                _send(conn, {"fallback": f"the forkserver is {exc}"})
                return
        finally:
            for fd in fds:
                os.close(fd)
        me = asyncio.current_task()
        if me is not None:
            self._calls[me] = pid
        log.info("sandbox %s: forked as pid %d", checked.name, pid)
        _send(conn, {"pid": pid})
        await self._relay(conn, pid, exited)

    async def _relay(self, conn: socket.socket, pid: int, exited: asyncio.Future[int]) -> None:
        """Signals from the client to the call until it ends; its exit to the client."""
        reading = asyncio.ensure_future(_recv(conn))
        try:
            while not exited.done():
                waits: set[asyncio.Future[object]] = {exited, reading}  # type: ignore[arg-type]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():
                    continue
                data = reading.result()[0] if reading.exception() is None else b""
                if not data:  # the client gone: so is its call
                    _kill(pid, signal.SIGKILL)
                    await asyncio.shield(exited)
                    return
                _forward(pid, data)
                reading = asyncio.ensure_future(_recv(conn))
        finally:
            reading.cancel()
        _send(conn, {"exit": exited.result()})


def _forward(pid: int, data: bytes) -> None:
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        sig = json.loads(data).get("signal")
        if sig in FORWARDED:
            _kill(pid, int(sig))
