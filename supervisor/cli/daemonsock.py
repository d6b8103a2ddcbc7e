"""The daemon's control socket as the quick clients find it (supervisor/cli/thinclient.py,
supervisor/cli/waybarfollow.py): where it is, whether a daemon holds its lock, whether the
listener is this user, and `ask`: one request, its result. Only what Python has loaded at
start anyway (the quick client's start-up is its cost); `_socket`, `fcntl` and JSON's C
code (supervisor/cli/wirejson.py) lazily.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing's own flag, without importing typing at start-up
if TYPE_CHECKING:
    import _socket

__all__ = [
    "ask",
    "daemon_running",
    "home_of_env",
    "peer_is_us",
    "request_args",
    "socket_path",
]


def home_of_env() -> str | None:
    home = os.environ.get("VINOS_HOME") or os.path.join(os.path.expanduser("~"), ".vinos")
    return os.path.normpath(home) if os.path.isabs(home) else None


def peer_is_us(sock: _socket.socket) -> bool:
    """Whether the process listening at the other end is this user (SO_PEERCRED). Where
    $XDG_RUNTIME_DIR is writable by others, another user can put a socket in the daemon's
    place: nothing is sent to it, and nothing it answers is printed
    (tests/supervisor/test_redteam_control.py)."""
    import _socket

    try:
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    except OSError:
        return False
    return int.from_bytes(creds[4:8], sys.byteorder) == os.getuid()  # struct ucred: pid, uid, gid


def socket_path() -> str:
    """routines.spec.paths' control socket, from the same variables (its runtime_base)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime:
        runtime = f"/run/user/{os.getuid()}"
        if not os.path.isdir(runtime):  # no login session made it: a container, WSL
            home = home_of_env()
            if home is None:
                return runtime + "/vinos-routine/control.sock"  # nothing to ask: no daemon
            runtime = home + "/run"
    return runtime + "/vinos-routine/control.sock"


def daemon_running(socket: str) -> bool:
    """Whether a daemon holds its lock beside `socket` (supervisor/engine/owner.py takes it
    exclusively). With socket activation the socket listens while the daemon is stopped, and
    a connect would start it: a read command or the waybar follower must never start the
    scheduler of a person who stopped it
    (tests/supervisor/test_thin_client.py::test_a_read_never_starts_a_stopped_daemon)."""
    import fcntl

    try:
        fd = os.open(os.path.join(os.path.dirname(socket), "daemon.lock"), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True  # held: a daemon runs
    except OSError:
        return True  # no verdict from the lock: ask, as before
    finally:
        os.close(fd)  # closing drops a shared lock taken here
    return False


_silent = False  # this process waited out the control timeout on a silent daemon once


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
        lines: list[bytes] = []
        partial: list[bytes] = []  # the line being received, in pieces: joined once
        while True:
            data = sock.recv(1 << 20)
            if not data:
                return None
            end = data.rfind(b"\n")
            if end < 0:
                partial.append(data)
                continue
            partial.append(data[:end])
            lines.extend(b"".join(partial).split(b"\n"))
            partial = [data[end + 1 :]]
            # Unescaped quotes are never inside a JSON string: only a response has this, and
            # it is the last line the daemon sends.
            if b'"type":"response"' in lines[-1]:
                return lines
    except TimeoutError:
        # The daemon holds its lock (daemon_running) yet did not answer within the control
        # timeout: neither this nor the full path may wait it out a second time.
        from supervisor.cli.client import waited_out

        global _silent
        _silent = True
        waited_out()
        return None
    except OSError:
        return None
    finally:
        sock.close()


def ask(cmd: str, args: dict[str, object]) -> object:
    """The daemon's result for the request `cmd`, or None when none answers it: no daemon
    (one stat of its socket file), one stopped behind its socket unit (a read never starts
    it), a failure, or an error reply (an older daemon that does not know `cmd`, or one that
    refuses: its ledger lost). After one wait for a silent daemon, None at once: a command
    costs the control timeout once, not twice."""
    if _silent:
        return None
    path = socket_path()
    home = home_of_env()
    if home is None or len(os.fsencode(path)) > 107 or not os.path.exists(path):
        return None  # no daemon: the plain in-process path, without a socket import
    if not daemon_running(path):
        return None  # a socket unit listening for a stopped daemon: a read never starts it
    from supervisor.cli.wirejson import dumps, loads

    req = {"type": "request", "id": 1, "cmd": cmd, "args": args}
    lines = _exchange(path, dumps(req) + b"\n")
    if not lines:
        return None
    try:
        response = loads(lines[-1])
        # Rows come as events before the response (`list`), each a batch of columns
        # (routines.query.encode_rows): gathered, in order, into the result.
        batches = [loads(line)["data"]["rows"] for line in lines[1:-1] if b'"kind":"rows"' in line]
        count = sum(len(b["name"]) for b in batches)
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(response, dict) or not response.get("ok"):
        if os.environ.get("VINOS_ROUTINE_DEBUG"):  # why the full path runs instead
            error = response.get("error") if isinstance(response, dict) else response
            print(f"vinos-routine: in-process: {error}", file=sys.stderr)
        return None
    result = response.get("result")
    if isinstance(result, dict) and "rows" in result:
        if count != result["rows"]:
            return None  # a batch went missing: read here rather than show part of it
        result["routines"] = batches
    return result


def request_args(verb: str) -> dict[str, object]:
    """`status` asks for its problems, with what the daemon must know of this shell to say
    them: its PATH and whether it has an API key (never the key)."""
    if verb != "status":
        return {}
    key = bool(os.environ.get("ANTHROPIC_API_KEY", "").strip())
    return {"problems": {"path": os.environ.get("PATH", os.defpath), "key": key}}
