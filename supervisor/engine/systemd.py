"""The two pieces of systemd the daemon speaks itself: sd_notify (one datagram per state
change) and socket activation (LISTEN_FDS/LISTEN_PID: our control socket is fd 3)."""

from __future__ import annotations

import contextlib
import os
import socket

__all__ = ["SD_LISTEN_FDS_START", "listen_fds", "notify", "watchdog_interval"]

SD_LISTEN_FDS_START = 3


def notify(state: str) -> bool:
    """Send `state` ("READY=1", "STATUS=…", …) to $NOTIFY_SOCKET; False when not under systemd."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        try:
            s.sendto(state.encode(), addr)
        except OSError:
            return False
    return True


def listen_fds(unset: bool = True) -> list[int]:
    """File descriptors passed by socket activation for this process (and forget the env)."""
    try:
        pid = int(os.environ.get("LISTEN_PID", ""))
        count = int(os.environ.get("LISTEN_FDS", ""))
    except ValueError:
        return []
    if unset:
        for var in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(var, None)
    if pid != os.getpid() or count <= 0:
        return []
    fds = list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count))
    for fd in fds:
        with contextlib.suppress(OSError):
            os.set_inheritable(fd, False)  # never into a worker or a sandbox
    return fds


def watchdog_interval() -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None when not asked."""
    try:
        usec = int(os.environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    wpid = os.environ.get("WATCHDOG_PID")
    if wpid and wpid != str(os.getpid()):
        return None
    return usec / 2_000_000 if usec > 0 else None
