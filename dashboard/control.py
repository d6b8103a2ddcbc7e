"""The dashboard's side of the daemon's control socket: hello, one request, its response.

Built on ipc's framing (the dashboard may not import supervisor, whose client the CLI uses).
One short connection per request: the dashboard asks rarely and must never hold the daemon up.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from pathlib import Path
from typing import Any

from ipc import PROTOCOL, Event, Hello, LineReader, ProtocolError, Request, Response, encode

__all__ = ["DaemonDown", "DaemonRefused", "request"]

SUN_PATH_MAX = 107


class DaemonDown(ConnectionError):
    """Nobody answers on the control socket."""


class DaemonRefused(RuntimeError):
    """The daemon answered ok = false; the message is its own, for the person to read."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _peer_uid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return int(struct.unpack("3i", creds)[1])


def request(path: Path, cmd: str, args: dict[str, Any] | None = None, timeout: float = 10) -> Any:
    """The result of `cmd`; DaemonDown when the daemon is not there, DaemonRefused on ok=false.
    Events streamed before the response (a `run` without detach) are skipped."""
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise DaemonDown(f"the control socket path {path} is too long for a Unix socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    with contextlib.closing(sock):
        try:
            sock.connect(str(path))
        except OSError as exc:
            raise DaemonDown(
                f"the daemon is not running ({exc.strerror or exc} at {path})"
            ) from None
        # Nothing goes to a listener of another uid, which a runtime dir others can write
        # lets into the daemon's place (tests/supervisor/test_redteam_control.py).
        owner = _peer_uid(sock)
        if owner != os.getuid():
            raise DaemonDown(
                f"another user (uid {owner}) listens on {path}, not your daemon; nothing was sent"
            )
        reader = LineReader(sock.makefile("rb"))
        try:
            sock.sendall(encode(Hello()))
            first = reader.read()
            if not isinstance(first, Hello) or first.protocol != PROTOCOL:
                raise DaemonDown(f"the daemon at {path} did not say hello")
            sock.sendall(encode(Request(1, cmd, args or {})))
            while True:
                msg = reader.read()
                if msg is None:
                    raise DaemonDown("the daemon closed the connection")
                if isinstance(msg, Event):
                    continue
                if isinstance(msg, Response) and msg.id == 1:
                    break
                raise DaemonDown(f"unexpected {msg.TYPE} from the daemon")
        except (OSError, ProtocolError) as exc:
            raise DaemonDown(f"talking to the daemon failed: {exc}") from None
    if not msg.ok:
        err = msg.error or {}
        raise DaemonRefused(err.get("code", "error"), err.get("message", "request failed"))
    return msg.result
