"""The daemon's control socket as the quick clients find it (supervisor/cli/thinclient.py,
supervisor/cli/waybarfollow.py): where it is, whether a daemon holds its lock, whether the
listener is this user, and what a request says of this process. Only what Python has loaded
at start anyway (the thin client's start-up is its cost); `_socket` and `fcntl` lazily.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing's own flag, without importing typing at start-up
if TYPE_CHECKING:
    import _socket

__all__ = ["context", "daemon_running", "home_of_env", "peer_is_us", "socket_path"]


def _use_color() -> bool:
    # supervisor.present.use_color, which this must agree with (the thin-client test).
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stdout.isatty()


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


def context(home: str) -> dict[str, object]:
    """What the daemon must know to print what this process would: where it looks, its time
    zone, its PATH, whether it has an API key (not the key), its terminal's colour and
    encoding. The daemon answers only when home and zone are its own."""
    return {
        "color": _use_color(),
        "home": home,
        "system": os.path.normpath(os.environ.get("VINOS_SYSTEM_DIR") or "/etc/vinos/routines"),
        "tz": os.environ.get("TZ"),
        "path": os.environ.get("PATH", os.defpath),
        "key": bool(os.environ.get("ANTHROPIC_API_KEY", "").strip()),
        "encoding": sys.stdout.encoding,
        "errors": sys.stdout.errors,
    }
