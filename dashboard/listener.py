"""Who holds a loopback port: proven from the kernel's socket tables, before anything that
proves who we are (the launch token, a cookie, a browser sent to `?token=`) goes there.

Another local user can listen on 127.0.0.1:PORT before the dashboard does. Asking the
listener over HTTP ("do you accept our token?") hands the token to whoever answers, so
nothing is asked: the kernel's socket tables (routines/listeners.py: sock_diag, else
`/proc/net/tcp` and `/proc/net/tcp6`) say which uid owns each listening socket and its
inode, and `/proc/PID/fd` of the dashboard (its pid from the state file it writes in the
runtime dir, 0700) says whether it holds that very socket.

The table's parsing and which sockets a connection could reach are routines/listeners.py's,
shared with the worker's check of a model server on loopback (worker/connector.py). The
decisions (`parse_table`, `decide`) are pure and unit-tested on table text; the chain
with a real second user's listener is tests/dashboard/test_dashboard_squatter.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from dashboard.security import private_dir
from routines.listeners import Listener, parse_table, reachable, read_listeners
from routines.store import read_regular, write_atomic

__all__ = [
    "Holder",
    "Listener",
    "Verdict",
    "clear_state",
    "dashboard_pid",
    "decide",
    "parse_table",
    "socket_inodes",
    "who_holds",
    "write_state",
]

STATE_FILE = "dashboard.json"
_LOOPBACK = (ipaddress.IPv4Address("127.0.0.1"),)


class Holder(StrEnum):
    NOBODY = "nobody"  # no socket listens where a connection to 127.0.0.1:PORT would go
    OURS = "ours"  # our uid, and the dashboard process holds that very socket
    MINE_NOT_DASHBOARD = "mine"  # our uid, but no dashboard of ours holds it (yet)
    FOREIGN = "foreign"  # another uid listens there: nothing may be sent to it


@dataclass(frozen=True, slots=True)
class Verdict:
    holder: Holder
    uids: tuple[int, ...] = ()  # the foreign uids, for the message


def decide(
    listeners: Iterable[Listener], port: int, uid: int, dashboard_inodes: frozenset[int]
) -> Verdict:
    """Who holds 127.0.0.1:`port` (pure). Every listener a connection could reach counts:
    any foreign one makes the port FOREIGN, even beside ours."""
    found = reachable(listeners, _LOOPBACK, port)
    if not found:
        return Verdict(Holder.NOBODY)
    foreign = sorted({s.uid for s in found if s.uid != uid})
    if foreign:
        return Verdict(Holder.FOREIGN, tuple(foreign))
    if all(s.inode in dashboard_inodes for s in found):
        return Verdict(Holder.OURS)
    return Verdict(Holder.MINE_NOT_DASHBOARD)


def socket_inodes(pid: int, proc: Path = Path("/proc")) -> frozenset[int]:
    """The inodes of the sockets process `pid` holds (empty when it is gone or not ours:
    /proc/PID/fd of another user's process cannot be listed)."""
    found = set()
    try:
        names = os.listdir(proc / str(pid) / "fd")
    except OSError:
        return frozenset()
    for name in names:
        with contextlib.suppress(OSError):
            target = os.readlink(proc / str(pid) / "fd" / name)
            if target.startswith("socket:[") and target.endswith("]"):
                found.add(int(target[8:-1]))
    return frozenset(found)


def write_state(runtime_dir: Path, pid: int, port: int) -> None:
    """Record the dashboard's pid for `who_holds` (0600, in the 0700 runtime dir)."""
    private_dir(runtime_dir)
    data = json.dumps({"pid": pid, "port": port}).encode()
    write_atomic(runtime_dir / STATE_FILE, data, mode=0o600)


def clear_state(runtime_dir: Path, pid: int) -> None:
    """Remove the state file when it is still `pid`'s (a newer dashboard's stays)."""
    path = runtime_dir / STATE_FILE
    raw = read_regular(path, 4096, head=True)
    with contextlib.suppress(ValueError, OSError):
        if raw is not None and json.loads(raw).get("pid") == pid:
            path.unlink()


def dashboard_pid(runtime_dir: Path, port: int) -> int | None:
    """The pid the dashboard on `port` recorded, or None (no state, another port, garbage,
    or a file that is not our private regular file)."""
    path = runtime_dir / STATE_FILE
    raw = read_regular(path, 4096, head=True)
    if raw is None:
        return None
    try:
        st = path.lstat()
        state = json.loads(raw)
    except (OSError, ValueError):
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not isinstance(state, dict):
        return None
    pid, held = state.get("pid"), state.get("port")
    if not isinstance(pid, int) or isinstance(pid, bool) or held != port or pid <= 0:
        return None
    return pid


def who_holds(port: int, runtime_dir: Path, proc: Path = Path("/proc")) -> Verdict:
    """The kernel's answer for 127.0.0.1:`port` now (asks the kernel; sends nothing)."""
    listeners = read_listeners(proc)
    pid = dashboard_pid(runtime_dir, port)
    inodes = socket_inodes(pid, proc) if pid is not None else frozenset()
    return decide(listeners, port, os.getuid(), inodes)
