"""The network holder: a fresh user+network namespace with only `lo`, a forwarder, then bwrap.

Run as a script (`python -I -S netholder.py PASS_FD PORT -- BWRAP ARGV…`), never imported by
the worker: it uses the standard library only, so it starts fast and trusts nothing on
sys.path. It

1. unshares a user and a network namespace, mapping only our own uid and gid;
2. brings up `lo` there and listens on 127.0.0.1:PORT;
3. forks the forwarder (trusted, outside bwrap): each connection accepted on that port is
   handed, as a file descriptor over PASS_FD (SCM_RIGHTS), to the egress proxy that runs in
   the worker, in the host's network namespace (sandbox/egress.py);
4. execs bwrap (without --unshare-net), so the sandbox shares this namespace: its only route
   anywhere is 127.0.0.1:PORT, i.e. the proxy.

Why not bwrap's own --unshare-net plus a helper joining it: a helper cannot setns() into a
namespace bwrap made (EPERM; DESIGN.md "Sandbox"). Why not slirp4netns or pasta: both need
/dev/net/tun, which is root-only on some machines (this project's CI among them), and both
give the sandbox raw IP to every address the host can reach; the proxy gives it only the
hosts its policy names. A fresh network namespace also has its own abstract Unix sockets, so
the host's (X11, D-Bus, …) are out of reach.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
EXIT_SETUP = 125  # the holder could not build the namespace: nothing ran


def _fail(what: str, err: int) -> None:
    sys.stderr.write(f"vinos-netholder: {what}: {os.strerror(err)}\n")
    sys.stderr.flush()
    os._exit(EXIT_SETUP)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _lo_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", flags | IFF_UP))


def _only(keep: set[int]) -> None:
    """Drop every inherited fd but `keep`: the sandbox's pipes must end when bwrap ends."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _forward(listener: socket.socket, pass_fd: int) -> None:
    """Hand every accepted connection to the proxy; exit when the proxy's end is gone."""
    _only({listener.fileno(), pass_fd})
    channel = socket.socket(fileno=pass_fd)
    while True:
        conn, _ = listener.accept()
        try:
            socket.send_fds(channel, [b"c"], [conn.fileno()])
        except OSError:
            os._exit(0)  # the worker closed its end: the call is over
        finally:
            conn.close()


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: netholder.py PASS_FD PORT -- BWRAP ARGV...\n")
        os._exit(2)
    pass_fd, port, command = int(argv[0]), int(argv[1]), argv[3:]
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        _fail("unshare(user, net)", ctypes.get_errno())
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
        _lo_up()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
    except OSError as exc:
        _fail("network namespace setup", exc.errno or 0)
    pid = os.fork()
    if pid == 0:
        try:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() == 1:
                os._exit(0)  # the parent is already gone
            _forward(listener, pass_fd)
        finally:
            os._exit(0)
    listener.close()
    os.close(pass_fd)
    try:
        os.execv(command[0], command)
    except OSError as exc:
        _fail(f"exec {command[0]}", exc.errno or 0)


if __name__ == "__main__":
    main(sys.argv[1:])
