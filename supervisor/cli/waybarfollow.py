"""`vinos-routine status --waybar --follow`: one long-lived process for waybar's custom module
(no `interval`): a JSON line each time the bar's content changes, pushed by the daemon over
its socket (a `watch` request, supervisor/control/watch.py), so no process is started per update.

When the daemon goes away (a restart, a stop) it prints the DOWN line and connects again
every RETRY_SEC: one connect attempt, no process. A daemon that cannot render this client's
line exactly (another home or time zone) answers `fallback`; then this process renders the
line itself every FALLBACK_SEC, as the polling module did, without spawning.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

__all__ = ["DOWN", "FALLBACK_SEC", "RETRY_SEC", "down_line", "follow"]

RETRY_SEC = 2.0
FALLBACK_SEC = 30.0
# The daemon sends at least a keep-alive every few minutes (supervisor/control/watch.py): silence
# for
# longer than this means a daemon that hangs, and the connection is made again.
SILENCE_SEC = 7 * 60.0

DOWN = {
    "text": "󰚩 daemon down",
    "tooltip": (
        "The vinos-routine daemon is not running, so no routine runs: start it with "
        "systemctl --user enable --now vinos-routined"
    ),
    "class": "critical",
    "alt": "down",
    "percentage": 0,
}


class _Fallback(Exception):
    pass


def down_line() -> bytes:
    import json

    return json.dumps(DOWN, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _lines(path: str, home: str) -> Iterator[bytes]:
    """The bar's lines from one connection, until it ends; _Fallback when the daemon says
    it cannot render them. Nothing when no daemon listens."""
    import _socket
    import json

    from supervisor.cli.daemonsock import context, peer_is_us

    req = {"type": "request", "id": 1, "cmd": "watch", "args": context(home)}
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(SILENCE_SEC)
        sock.connect(path)
        if not peer_is_us(sock):
            return  # another user's socket in the daemon's place: as if none listened
        sock.sendall(b'{"type":"hello","protocol":1}\n' + json.dumps(req).encode() + b"\n")
        pending = b""
        while True:
            data = sock.recv(1 << 16)
            if not data:
                return
            pending += data
            *done, pending = pending.split(b"\n")
            for raw in done:
                msg = json.loads(raw)
                if msg.get("type") == "event" and msg.get("data", {}).get("fd") == 1:
                    yield msg["text"].encode("latin-1")
                elif msg.get("type") == "response":
                    result = msg.get("result") if msg.get("ok") else None
                    if not isinstance(result, dict) or "fallback" in result:
                        raise _Fallback(str(result or msg.get("error")))
                    return
    except (OSError, ValueError):
        return
    finally:
        sock.close()


def _write(line: bytes) -> None:
    sys.stdout.buffer.write(line)
    sys.stdout.flush()


def _in_process() -> int:
    from supervisor.views.status import waybar

    while True:
        waybar()
        time.sleep(FALLBACK_SEC)


def follow() -> int:
    """Print the bar's line on every change, forever; 0 when waybar stops reading."""
    from supervisor.cli.daemonsock import daemon_running, home_of_env, socket_path

    home = home_of_env()
    if home is None:
        return _in_process()
    path = socket_path()
    down = False
    try:
        while True:
            got = False
            # A stopped daemon behind a listening socket unit is down: never start it.
            up = os.path.exists(path) and daemon_running(path)
            for line in _lines(path, home) if up else ():
                _write(line)
                got, down = True, False
            if got:  # the daemon went away: a restart's new one is often there at once
                time.sleep(0.2)
                continue
            if not down:
                _write(down_line())
                down = True
            time.sleep(RETRY_SEC)
    except _Fallback as exc:
        if os.environ.get("VINOS_ROUTINE_DEBUG"):
            print(f"vinos-routine: in-process: {exc}", file=sys.stderr)
        return _in_process()
    except BrokenPipeError:  # waybar went away
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
