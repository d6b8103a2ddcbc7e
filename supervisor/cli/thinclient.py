"""`vinos-routine`'s entry point: `list` and `status` (with or without `--json`) go to
supervisor/cli/reads.py before argparse is imported: it asks the daemon for the read model's
rows (`ask`: data, never text) and renders them here. Every other command, and any other
spelling of these, goes to supervisor/cli/main.py.

This module and `ask` import only `_socket` and `json` beyond what Python has loaded at start;
a daemon that is not there costs one stat of its socket file.
"""

from __future__ import annotations

import os
import sys

from supervisor.cli.daemonsock import daemon_running, home_of_env, peer_is_us, socket_path

__all__ = ["ask", "main", "socket_path"]


def _exchange(path: str, request: bytes) -> list[bytes] | None:
    """The lines the daemon sent after its hello, up to its response; None on any failure."""
    import _socket

    timeout = float(os.environ.get("VINOS_CONTROL_TIMEOUT_SEC") or 10.0)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        if not peer_is_us(sock):
            return None  # the full client says who listens there; nothing is sent to them
        sock.sendall(b'{"type":"hello","protocol":1}\n' + request)
        chunks: list[bytes] = []
        while True:
            data = sock.recv(1 << 20)
            if not data:
                return None
            chunks.append(data)
            if b"\n" not in data:
                continue  # a large answer arrives in many pieces: joined once, at its end
            joined = b"".join(chunks)
            *lines, _rest = joined.split(b"\n")
            # Unescaped quotes are never inside a JSON string: only a response has this.
            if any(b'"type":"response"' in line for line in lines):
                return lines
            chunks = [joined]
    except TimeoutError:
        # The daemon holds its lock (daemon_running) yet did not answer within the control
        # timeout: the full path must not wait it out a second time.
        from supervisor.client import waited_out

        waited_out()
        return None
    except OSError:
        return None
    finally:
        sock.close()


def ask(cmd: str, args: dict[str, object]) -> object:
    """The daemon's result for the request `cmd`, or None when none answers it: no daemon
    (one stat of its socket file), one stopped behind its socket unit (a read never starts
    it), a failure, or an error reply (an older daemon that does not know `cmd`)."""
    path = socket_path()
    home = home_of_env()
    if home is None or len(os.fsencode(path)) > 107 or not os.path.exists(path):
        return None  # no daemon: the plain in-process path, without a socket import
    if not daemon_running(path):
        return None  # a socket unit listening for a stopped daemon: a read never starts it
    import json

    req = {"type": "request", "id": 1, "cmd": cmd, "args": args}
    lines = _exchange(path, json.dumps(req, separators=(",", ":")).encode() + b"\n")
    if not lines:
        return None
    try:
        response = json.loads(lines[-1])
    except ValueError:
        return None
    if not response.get("ok"):
        if os.environ.get("VINOS_ROUTINE_DEBUG"):  # why the full path runs instead
            print(f"vinos-routine: in-process: {response.get('error')}", file=sys.stderr)
        return None
    return response.get("result")


# The read commands answered from the read model before argparse is loaded; any other
# spelling (`--help`, an abbreviation, a bad option) goes to the full parser.
_QUICK = {
    ("list",): ("list", False),
    ("list", "--json"): ("list", True),
    ("status",): ("status", False),
    ("status", "--json"): ("status", True),
}


def main() -> int:
    """Entry point of the `vinos-routine` console script."""
    argv = sys.argv[1:]
    if argv in (["status", "--waybar", "--follow"], ["status", "--follow", "--waybar"]):
        from supervisor.cli.waybarfollow import follow

        return follow()
    quick = _QUICK.get(tuple(argv))
    if quick is not None:
        from supervisor.cli import reads

        try:
            verb, as_json = quick
            return reads.show_list(as_json) if verb == "list" else reads.show_status(as_json)
        except BrokenPipeError:  # `vinos-routine list | head`: the reader left, not an error
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return 0
    from supervisor.cli.main import main as full

    return full(argv)
