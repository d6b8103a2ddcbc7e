"""`vinos-routine status --waybar --follow`: one long-lived process for waybar's custom module
(no `interval`): a JSON line each time the bar's content changes, pushed by the daemon over
its socket (a `watch` request, supervisor/control/watch.py), so no process is started per update.

When the daemon goes away (a restart, a stop) it prints the DOWN line and connects again
every RETRY_SEC: one connect attempt, no process. The daemon sends the bar's data (the read
model's rows and the day's facts), and this process renders the line; a daemon that does not
know `watch` makes it read the files itself every FALLBACK_SEC, as the polling module did.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

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


def _render(bar: dict[str, Any]) -> bytes:
    """The bar's line from the daemon's data (supervisor/control/watch.py), rendered here, now."""
    from datetime import UTC, datetime

    import orjson

    from routines.query import decode_rows
    from supervisor.cli.render.waybar import waybar_error, waybar_json

    if "error" in bar:
        value = waybar_error(str(bar["error"]))
    else:
        rows = decode_rows(bar["routines"])
        now = datetime.now(UTC)
        value = waybar_json(rows, bar["today_dollars"], now, bar["unseen"], bar["pending"])
    return orjson.dumps(value) + b"\n"


def _lines(path: str) -> Iterator[bytes]:
    """The bar's lines from one connection, until it ends: one for each piece of data the
    daemon sends, and one again at each keep-alive (the minute turned). _Fallback when the
    daemon does not know `watch`. Nothing when no daemon listens."""
    import _socket
    import json

    from supervisor.cli.daemonsock import peer_is_us

    req = {"type": "request", "id": 1, "cmd": "watch", "args": {}}
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    bar: dict[str, Any] | None = None
    rows: list[Any] = []  # the data being sent: its batches of rows' columns, in order
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
                data = msg.get("data", {}) if msg.get("type") == "event" else {}
                if msg.get("kind") == "rows":
                    rows.append(data["rows"])
                elif "bar" in data:
                    bar, rows = {**data["bar"], "routines": rows}, []
                    if sum(len(b["name"]) for b in bar["routines"]) != bar.get("rows", 0):
                        return  # a batch went missing: connect again
                    yield _render(bar)
                elif msg.get("type") == "event" and bar is not None:
                    yield _render(bar)  # a keep-alive: the minute turned
                elif msg.get("type") == "response":
                    result = msg.get("result") if msg.get("ok") else None
                    if not isinstance(result, dict):
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
    from supervisor.cli.reads import waybar

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
            last = None
            for line in _lines(path) if up else ():
                if line != last:
                    _write(line)
                last, got, down = line, True, False
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
