"""The CLI's side of the control socket: connect, say hello, send a request, read events and
the response. Blocking and small: the CLI is a short-lived process."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipc import PROTOCOL, Event, Hello, LineReader, ProtocolError, Request, Response, encode

if TYPE_CHECKING:
    from routines.spec.paths import Paths

__all__ = [
    "Client",
    "DaemonError",
    "DaemonNotRunning",
    "DaemonUnresponsive",
    "connect",
    "daemon_locks",
    "lock_holder",
    "try_daemon",
    "waited_out",
]

# How long to wait for the daemon's hello: VINOS_CONTROL_TIMEOUT_SEC, a user setting of the
# commands, not the daemon's (docs/install.md); tests shorten it.
CONNECT_TIMEOUT_SEC = float(os.environ.get("VINOS_CONTROL_TIMEOUT_SEC") or 10.0)


class DaemonNotRunning(ConnectionError):
    """Nobody answered on the socket. `absent`: no socket there, or nobody listening on it,
    which a daemon that holds its lock shows while it starts (it binds after the ledger opens)."""

    def __init__(self, path: Path, why: str, *, absent: bool = False) -> None:
        from supervisor.cli.userunits import start_hint

        hint = start_hint()
        super().__init__(f"the vinos-routine daemon is not running ({why} at {path}); {hint}")
        self.why = why
        self.absent = absent


class DaemonUnresponsive(ConnectionError):
    """A daemon holds the lock but did not answer on its socket: busy, stopped or hung.

    Never "not running": a command must not then act as if it were alone (run in-process,
    outside the daemon's queue and limits, or create a second ledger)."""

    def __init__(self, path: Path, holder: int | None, why: str) -> None:
        pid = f"pid {holder}" if holder else "a process"
        super().__init__(
            f"the vinos-routine daemon is running ({pid} holds its lock) but does not answer "
            f"on {path} ({why}): it is busy or hung. Try again; if it persists, see "
            "journalctl --user -u vinos-routined, or restart it: "
            "systemctl --user restart vinos-routined"
        )
        self.holder = holder


def lock_holder(lock_files: tuple[Path, ...]) -> int | None:
    """Whether a daemon holds one of its lock files: its pid (from the file), 0 when the
    pid is unreadable, None when no lock is held. Probes with a shared, non-blocking flock,
    taken and dropped at once; a missing file is not created."""
    for path in lock_files:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = os.read(fd, 64).decode("ascii", "replace").strip()
                return int(text) if text.isdigit() else 0
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return None


class DaemonError(RuntimeError):
    """The daemon answered a request with ok = false."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = LineReader(sock.makefile("rb"))
        self._ids = itertools.count(1)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stream(self, cmd: str, args: dict[str, Any] | None = None) -> Iterator[Event | Response]:
        """Send one request; yield its events, then its response."""
        rid = next(self._ids)
        self.sock.sendall(encode(Request(rid, cmd, args or {})))
        while True:
            msg = self.reader.read()
            if msg is None:
                raise ConnectionError("the daemon closed the connection")
            if isinstance(msg, Event):
                yield msg
            elif isinstance(msg, Response) and msg.id == rid:
                yield msg
                return
            else:
                raise ProtocolError(f"unexpected {msg.TYPE} from the daemon")

    def request(
        self,
        cmd: str,
        args: dict[str, Any] | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> Any:
        """The result of one request (events go to `on_event`); raises DaemonError on ok=false."""
        for msg in self.stream(cmd, args):
            if isinstance(msg, Event):
                if on_event:
                    on_event(msg)
            elif msg.ok:
                return msg.result
            else:
                err = msg.error or {}
                raise DaemonError(err.get("code", "error"), err.get("message", "request failed"))
        raise ConnectionError("no response")


def _peer_uid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return int(struct.unpack("3i", creds)[1])


def connect(path: Path, timeout: float | None = CONNECT_TIMEOUT_SEC) -> Client:
    """A hello'd client on the daemon's socket; DaemonNotRunning when nobody listens."""
    if len(os.fsencode(path)) > 107:  # sun_path's size: connect() would fail obscurely
        raise DaemonNotRunning(path, "the socket path is too long for a Unix socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except FileNotFoundError:
        sock.close()
        raise DaemonNotRunning(path, "no socket", absent=True) from None
    except ConnectionRefusedError:
        sock.close()
        raise DaemonNotRunning(path, "nobody listening", absent=True) from None
    except OSError as exc:
        sock.close()
        raise DaemonNotRunning(path, exc.strerror or str(exc)) from None
    # Nothing is sent to a listener of another uid: where $XDG_RUNTIME_DIR is writable by
    # others, another user can put a socket in the daemon's place, and the hello and every
    # request would go to it (tests/supervisor/test_redteam_control.py).
    owner = _peer_uid(sock)
    if owner != os.getuid():
        sock.close()
        who = f"another user (uid {owner})" if owner is not None else "a process of unknown uid"
        raise DaemonNotRunning(path, f"{who} listens there; nothing was sent")
    client = Client(sock)
    try:
        sock.sendall(encode(Hello()))
        first = client.reader.read()
    except (OSError, ProtocolError) as exc:
        client.close()
        raise DaemonNotRunning(path, f"no hello: {exc}") from None
    if not isinstance(first, Hello) or first.protocol != PROTOCOL:
        client.close()
        raise DaemonNotRunning(path, "it did not say hello")
    sock.settimeout(None)
    return client


_waited = False  # this process waited the control timeout out on a silent daemon already


def waited_out() -> None:
    """The quick path (supervisor/cli/daemonsock.py `ask`) waited the whole control
    timeout for a daemon that holds its lock: `try_daemon` says it is unresponsive at once,
    so a command costs the timeout once, not twice (tests/supervisor/
    test_reliability_flood.py::test_a_silent_daemon_costs_the_control_timeout_once)."""
    global _waited
    _waited = True


def daemon_locks(p: Paths) -> tuple[Path, ...]:
    """The lock files a running daemon holds (supervisor/daemon.py acquire_locks)."""
    return (p.daemon_lock, p.state_dir / ".daemon.lock")


def try_daemon(p: Paths | None = None) -> Any:
    """A connected control client, or None when no daemon is running (no socket, or nobody listening
    and no lock held). Raises DaemonUnresponsive when a daemon holds its lock but does not answer:
    then the caller must not act as if it were alone
    (test_reliability_flood.py::test_a_daemon_holding_its_lock_but_silent_is_never_not_running)."""
    from routines.spec.paths import paths

    p = p or paths()
    if _waited and (holder := lock_holder(daemon_locks(p))) is not None:
        raise DaemonUnresponsive(p.control_socket, holder or None, "timed out")
    deadline = time.monotonic() + CONNECT_TIMEOUT_SEC
    while True:
        try:
            return connect(p.control_socket)
        except DaemonNotRunning as exc:
            holder = lock_holder(daemon_locks(p))
            if holder is None:
                return None
            # A daemon holds its lock before its socket listens (the ledger opens first):
            # `systemctl --user start` then `status` waits for it instead of calling a
            # starting daemon hung (test_client_starting.py::test_a_starting_daemon_is_waited_for).
            if not exc.absent or time.monotonic() >= deadline:
                raise DaemonUnresponsive(p.control_socket, holder or None, exc.why) from None
        time.sleep(0.1)
