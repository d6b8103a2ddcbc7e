"""Red team, Unix sockets by another door: socket(AF_UNIX) is refused (test_escape_memory.py),
but a datagram socket from socketpair() can be pointed anywhere, by connect() (a datagram
socket may change its peer) or by sendto()/sendmsg() with an address. So with the network
off, a pathname datagram socket inside a declared home folder (a logger, a notify socket)
would still be reachable. socketpair() of datagram sockets is refused; stream and seqpacket
pairs, which can never be re-aimed, stay (asyncio's self-pipe is one)."""

from __future__ import annotations

import socket

from tests.sandbox.sandbox_testkit import Box, python_in_sandbox

_AIM = """
import errno, socket
for how, kind in (("connect", socket.SOCK_DGRAM), ("sendto", socket.SOCK_DGRAM),
                  ("raw", socket.SOCK_RAW), ("nonblock", socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)):
    try:
        a, b = socket.socketpair(socket.AF_UNIX, kind)
        if how != "sendto":
            a.connect({path!r})
            a.send(b"via-" + how.encode())
        else:
            a.sendto(b"via-" + how.encode(), {path!r})
        print(how, "SENT")
    except OSError as exc:
        print(how, "refused", errno.errorcode[exc.errno])
for kind in ("SOCK_STREAM", "SOCK_SEQPACKET"):
    a, b = socket.socketpair(socket.AF_UNIX, getattr(socket, kind))
    a.send(b"x")
    print(kind, b.recv(1).decode())
"""


def test_a_datagram_socketpair_cannot_reach_a_socket_in_a_declared_folder(box: Box) -> None:
    folder = box.home / "notes"
    folder.mkdir()
    path = folder / "log.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(path))
    server.setblocking(False)
    try:
        r = box.run(python_in_sandbox(_AIM.format(path=str(path))), declared=("~/notes",))
        got = []
        while True:
            try:
                got.append(server.recv(100))
            except BlockingIOError:
                break
        assert got == [], got
        assert r.stdout == (
            "connect refused EPERM\nsendto refused EPERM\n"
            "raw refused EPERM\nnonblock refused EPERM\n"
            "SOCK_STREAM x\nSOCK_SEQPACKET x\n"
        ), r.stdout + r.stderr
        # Control: the socket is there, and takes a datagram from the host.
        control = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        control.sendto(b"host", str(path))
        assert server.recv(100) == b"host"
        control.close()
    finally:
        server.close()
