"""The network holder: a fresh user+network namespace with only `lo` and the proxy's listener.

Run as a script (`python -I -S netholder.py PASS_FD PORT -- BWRAP ARGV…`), never imported: it
uses only built-in modules (no `socket`, whose import alone costs ~10 ms; `_ctypes`, not the
`ctypes` package, as sandbox/overlayholder.py does), so it starts fast and trusts nothing on
sys.path. It

1. unshares a user and a network namespace, mapping only our own uid and gid;
2. brings up `lo` there and listens on 127.0.0.1:PORT;
3. hands that listening socket over PASS_FD (SCM_RIGHTS) to the egress proxy, a process of
   its own in the host's network namespace (sandbox/egressserver.py), which accepts on it
   from there (a socket stays in the namespace it was made in, whoever holds it), and
   closes PASS_FD: the sandbox gets no AF_UNIX socket from us;
4. execs bwrap (without --unshare-net), so the sandbox shares this namespace: its only way
   anywhere is 127.0.0.1:PORT, i.e. the proxy.

Why not bwrap's own --unshare-net plus a helper joining it: a helper cannot setns() into a namespace
bwrap made (setns(CLONE_NEWNET): EPERM). Why not slirp4netns or pasta: see sandbox/netns.py.
"""

import _ctypes
import _socket
import fcntl
import os
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
EXIT_SETUP = 125  # the holder could not build the namespace: nothing ran


class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]  # not subscriptable at run time
    _type_ = "i"


class _Func(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    """libc's unshare through _ctypes, the C module alone: the ctypes package's import costs
    every network-on shell call a few ms more of its start (bench_sandbox)."""

    _handle = _ctypes.dlopen(None, os.RTLD_NOW)  # type: ignore[arg-type]  # None: ourselves

    def __init__(self) -> None:
        # The stubs ask for a CDLL; CFuncPtr reads only `_handle` of it.
        self.unshare = _Func(("unshare", self))  # type: ignore[arg-type]


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
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        ifr = bytearray(40)  # struct ifreq: the name, then ifr_flags (a short)
        ifr[:2] = b"lo"
        fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifr)
        flags = int.from_bytes(ifr[16:18], sys.byteorder) | IFF_UP
        ifr[16:18] = flags.to_bytes(2, sys.byteorder)
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, bytes(ifr))
    finally:
        s.close()


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: netholder.py PASS_FD PORT -- BWRAP ARGV...\n")
        os._exit(2)
    pass_fd, port, command = int(argv[0]), int(argv[1]), argv[3:]
    uid, gid = os.getuid(), os.getgid()
    libc = _Libc()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        _fail("unshare(user, net)", int(_ctypes.get_errno()))
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
        _lo_up()
        listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, pass_fd)
        fds = listener.fileno().to_bytes(4, sys.byteorder)
        channel.sendmsg([b"L"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        listener.close()
        channel.close()
    except OSError as exc:
        _fail("network namespace setup", exc.errno or 0)
    try:
        os.execv(command[0], command)
    except OSError as exc:
        _fail(f"exec {command[0]}", exc.errno or 0)


if __name__ == "__main__":
    main(sys.argv[1:])
