"""The control socket: where `vinos-routine` talks to the daemon.

A Unix stream socket, mode 0600 in a 0700 directory, and SO_PEERCRED on every connection:
only the daemon's own uid is served. Newline-JSON: each side says hello, then the client sends
requests and gets, per request, any number of `event` lines and one `response`.

A client cannot hurt the daemon or other clients: a malformed or oversized line ends that connection
only; every connection writes through its own bounded queue, so a client that stops reading is
dropped instead of stalling anyone (see tests/supervisor/test_control.py). Nor can idle clients lock
the others out: a connection that sends no request for IDLE_TIMEOUT_SEC is closed, and at
MAX_CLIENTS a new client evicts the oldest idle one instead of being refused
(tests/supervisor/test_reliability_flood.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ipc import (
    PROTOCOL,
    Event,
    EventKind,
    Hello,
    Message,
    ProtocolError,
    Request,
    Response,
    encode,
    read_message,
)
from routines.ledger import LedgerUnavailable
from routines.query import RoutineRow, encode_rows

__all__ = [
    "ROWS_PER_EVENT",
    "CommandError",
    "Connection",
    "ControlServer",
    "Handler",
    "send_rows",
    "socket_path_problem",
]

log = logging.getLogger("vinos.control")

HELLO_TIMEOUT_SEC = 10.0
# A connection with no request in flight that sends nothing for this long is closed (a CLI
# sends its request at once; `run` and `logs --follow` are in flight, so never idle).
# The daemon passes its Timings' control_idle_sec (tests shorten it).
IDLE_TIMEOUT_SEC = 60.0
QUEUE_LINES = 2048  # per connection; a client further behind than this is dropped
MAX_CLIENTS = 512


class CommandError(Exception):
    """A request that cannot be done; becomes `{"ok": false, "error": {code, message}}`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Connection:
    """One client. `send` never blocks: it queues, or drops the client when it lags."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_LINES)
        self.closed = False
        self.in_flight = 0  # requests being served: a connection with one is never idle
        self.last_active = time.monotonic()
        self._task = asyncio.ensure_future(self._pump())

    def send(self, msg: Message) -> bool:
        if self.closed:
            return False
        try:
            self.queue.put_nowait(encode(msg))
        except asyncio.QueueFull:
            log.warning("control client stopped reading; dropping it")
            self.close()
            return False
        return True

    async def _pump(self) -> None:
        try:
            while True:
                data = await self.queue.get()
                if data is None:
                    break
                self.writer.write(data)
                await self.writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed = True
            self._drop_queued()
            self.writer.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        # Drop whatever is queued, then let the pump close the transport.
        self._drop_queued()
        self.queue.put_nowait(None)
        self.writer.transport.abort()

    def _drop_queued(self) -> None:
        """Empty the queue (the client is gone)."""
        while not self.queue.empty():
            self.queue.get_nowait()

    async def drain_and_close(self) -> None:
        if not self.closed:
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.put_nowait(None)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._task, 5)


Handler = Callable[[Request, Connection], Awaitable[Any]]


SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes, with the terminating NUL


def socket_path_problem(path: Path) -> str | None:
    """Why `path` cannot be a Unix socket's address, or None when it can."""
    size = len(os.fsencode(path))
    if size <= SUN_PATH_MAX:
        return None
    return (
        f"the control socket path {path} is {size} bytes, and a Unix socket path must be at "
        f"most {SUN_PATH_MAX}: set XDG_RUNTIME_DIR to a shorter directory (normally "
        f"/run/user/{os.getuid()})"
    )


def peer_uid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlServer:
    def __init__(
        self,
        handlers: dict[str, Handler],
        uid: int | None = None,
        idle_sec: float = IDLE_TIMEOUT_SEC,
    ) -> None:
        self.handlers = handlers
        self.idle_sec = idle_sec
        self.uid = os.getuid() if uid is None else uid  # the only uid served
        self.connections: set[Connection] = set()
        self._server: asyncio.AbstractServer | None = None
        self.path: Path | None = None

    async def start(self, path: Path, inherited_fd: int | None = None) -> None:
        """Listen on `path`, or on a socket systemd passed us (socket activation)."""
        if inherited_fd is not None:
            sock = socket.socket(fileno=inherited_fd)
            sock.setblocking(False)
            self._server = await asyncio.start_unix_server(self._serve, sock=sock)
            return
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # we hold the daemon lock: a socket file left here is stale
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(path))
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self.path = path

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def _make_room(self) -> bool:
        """At the cap: close the connection idle the longest. False when every one is busy
        with a request (a run being watched), so the newcomer is the one refused."""
        idle = [c for c in self.connections if c.in_flight == 0 and not c.closed]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.last_active)
        log.warning(
            "control socket: %d clients, the limit; closing the one idle longest", MAX_CLIENTS
        )
        self.connections.discard(oldest)
        oldest.close()
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if peer_uid(sock) != self.uid or (
            len(self.connections) >= MAX_CLIENTS and not self._make_room()
        ):
            # Another user's process (or clients all busy): no hello, no error text, closed.
            writer.transport.abort()
            return
        conn = Connection(writer)
        self.connections.add(conn)
        try:
            await self._converse(reader, conn)
        finally:
            self.connections.discard(conn)
            await conn.drain_and_close()

    async def _converse(self, reader: asyncio.StreamReader, conn: Connection) -> None:
        conn.send(Hello())
        try:
            first = await asyncio.wait_for(read_message(reader), HELLO_TIMEOUT_SEC)
        except (TimeoutError, ProtocolError, ConnectionError):
            return
        if not isinstance(first, Hello) or first.protocol != PROTOCOL:
            return
        while not conn.closed:
            conn.last_active = time.monotonic()
            try:
                msg = await asyncio.wait_for(read_message(reader), self.idle_sec)
            except TimeoutError:
                log.info("control client idle for %gs; closing it", self.idle_sec)
                return
            except (ProtocolError, ConnectionError) as exc:
                log.info("control client sent a bad line (%s); closing it", exc)
                return
            if msg is None:
                return
            if not isinstance(msg, Request):
                log.info("control client sent a %s, not a request; closing it", msg.TYPE)
                return
            conn.in_flight += 1
            try:
                await self._dispatch(msg, conn)
            finally:
                conn.in_flight -= 1

    async def _dispatch(self, req: Request, conn: Connection) -> None:
        handler = self.handlers.get(req.cmd)
        if handler is None:
            known = ", ".join(sorted(self.handlers))
            conn.send(
                Response(
                    req.id,
                    False,
                    error={
                        "code": "unknown_command",
                        "message": f"unknown command {req.cmd!r}; known: {known}",
                    },
                )
            )
            return
        try:
            result = await handler(req, conn)
        except CommandError as exc:
            conn.send(Response(req.id, False, error={"code": exc.code, "message": exc.message}))
        except LedgerUnavailable as exc:  # a pause (a full disk, …): its reason, no traceback
            error = {"code": "ledger_unavailable", "message": str(exc)}
            conn.send(Response(req.id, False, error=error))
        except Exception as exc:  # a bug in one handler must not end the daemon
            log.exception("control command %s failed", req.cmd)
            conn.send(
                Response(
                    req.id,
                    False,
                    error={"code": "internal", "message": f"{type(exc).__name__}: {exc}"},
                )
            )
        else:
            conn.send(Response(req.id, True, result=result))


# A batch of rows as columns is ~250 bytes a row (10,000 rows: ~2.5 MB in 5 events); a batch
# over ipc.MAX_LINE (long error texts) is halved.
ROWS_PER_EVENT = 2000


def send_rows(conn: Connection, rows: Sequence[RoutineRow]) -> None:
    """`rows` as ROWS events, each a batch of columns (routines.query.encode_rows) under the
    wire's line limit."""
    batch, i = ROWS_PER_EVENT, 0
    while i < len(rows):
        chunk = rows[i : i + batch]
        try:
            conn.send(Event(EventKind.ROWS, "", {"rows": encode_rows(chunk)}))
        except ProtocolError:
            if batch == 1:
                raise  # one row over a megabyte: a bug, said as the command's error
            batch //= 2
            continue
        i += len(chunk)
