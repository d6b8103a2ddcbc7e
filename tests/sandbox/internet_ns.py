"""Stands for the host and its network, in namespaces a test made (run by
test_egress_internet.py under `unshare`; the workplace allows traffic only to 127.0.0.0/8 and
to namespaces the tests create themselves).

This process runs in namespace "host" (user, network and mount namespaces of the test's own;
the caller bind-mounted a test /etc/hosts there). The egress proxy is started in it too, so
it resolves and connects from there, as it would from the real host. Here: a decoy on the
host's 127.0.0.1:80 and :443 that must never be reached, and a veth link to a child network
namespace "net" that holds every other test address:

    192.0.2.10             the internet (TEST-NET-1)
    10.0.0.5 192.168.1.5 100.64.0.5 fd00::5 64:ff9b::a00:5    the LAN, and a NAT64 form
    203.0.113.5 2001:db8:5::5    LAN devices on global addresses: the host's routes put
                                 203.0.113.0/24 and 2001:db8:5::/64 on its link (no gateway)

`linked()` builds the pair for any test (test_gh_grant.py uses it for its fake GitHub).

Every address in "net" serves HTTP on ports 80 and 8080 (the answer names the address and
port it was reached on) and takes TLS on 443 (it records the server name the ClientHello
carried, then closes). Every connection either side takes is a line in HITS_FILE.

    internet_ns.py CHANNEL_FD HITS_FILE     -> "ready\n" on the channel; ends at its EOF
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

CLONE_NEWNET = 0x40000000
NET_V4 = ("192.0.2.10", "10.0.0.5", "192.168.1.5", "100.64.0.5", "203.0.113.5")
NET_V6 = ("fd00::5", "64:ff9b::a00:5", "2001:db8:5::5")
# On-link prefixes of the host (routes with no gateway, as a LAN's router advertises them):
# a device inside one is on the LAN although its address is a global one.
ON_LINK = ("203.0.113.0/24", "2001:db8:5::/64")
_lock = threading.Lock()


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


def hit(hits: str, line: str) -> None:
    with _lock, open(hits, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def sni(data: bytes) -> str:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    from sandbox.tlshello import HelloState, parse_client_hello

    hello = parse_client_hello(data)
    return hello.name if hello.state is HelloState.NAME else f"<{hello.state.value}>"


def handle(conn: socket.socket, hits: str, name: str) -> None:
    with conn:
        conn.settimeout(10)
        here = conn.getsockname()
        where = f"{name} {here[0]} {here[1]}"
        data = b""
        try:
            if here[1] == 443:
                while len(data) < 5 or len(data) < 5 + int.from_bytes(data[3:5], "big"):
                    chunk = conn.recv(16384)
                    if not chunk:
                        break
                    data += chunk
                hit(hits, f"{where} tls {sni(data)}")
                return
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        line = data.split(b"\r\n", 1)[0].decode("latin-1")
        hit(hits, f"{where} {line}")
        reply = f"hello from {here[0]}:{here[1]} {line}\n".encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(reply)
        conn.sendall(head + reply)


def listen(family: int, address: str, port: int, hits: str, name: str) -> None:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((address, port))
    s.listen(16)

    def accept() -> None:
        while True:
            conn, _ = s.accept()
            threading.Thread(target=handle, args=(conn, hits, name), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def linked(
    channel: socket.socket,
    v4: Sequence[str],
    v6: Sequence[str],
    serve: Callable[[], None],
    host_side: Callable[[], None] = lambda: None,
) -> None:
    """From the "host" namespace: fork a "net" namespace holding `v4` and `v6` on its end of
    a veth link, the host's default routes going there; run `serve` there and `host_side`
    here, answer "ready" on `channel`, and keep both until its EOF."""
    unshared_r, unshared_w = os.pipe()
    linked_r, linked_w = os.pipe()
    up_r, up_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            channel.close()
            if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) != 0:
                os._exit(3)
            os.write(unshared_w, b"x")
            os.read(linked_r, 1)  # the host has moved v1 here
            ip("link", "set", "lo", "up")
            for address in v4:
                ip("addr", "add", f"{address}/32", "dev", "v1")
            for address in v6:
                ip("-6", "addr", "add", f"{address}/128", "dev", "v1", "nodad")
            ip("link", "set", "v1", "up")
            ip("route", "add", "default", "dev", "v1")
            ip("-6", "route", "add", "default", "dev", "v1")
            serve()
            os.write(up_w, b"x")
            signal.pause()
        finally:
            os._exit(4)
    try:
        assert os.read(unshared_r, 1) == b"x"
        ip("link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", str(child))
        os.write(linked_w, b"x")
        ip("addr", "add", "198.51.100.1/32", "dev", "v0")
        ip("-6", "addr", "add", "2001:db8::1/128", "dev", "v0", "nodad")
        ip("link", "set", "v0", "up")
        ip("route", "add", "default", "dev", "v0")
        ip("-6", "route", "add", "default", "dev", "v0")
        host_side()
        assert os.read(up_r, 1) == b"x"
        channel.sendall(b"ready\n")
        while channel.recv(4096):
            pass
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))
    hits = sys.argv[2]

    def serve() -> None:
        for port in (80, 443, 8080):
            listen(socket.AF_INET, "0.0.0.0", port, hits, "net")
            listen(socket.AF_INET6, "::", port, hits, "net")

    def host_side() -> None:
        for prefix in ON_LINK:
            ip("-6" if ":" in prefix else "-4", "route", "add", prefix, "dev", "v0")
        listen(socket.AF_INET, "127.0.0.1", 80, hits, "DECOY")
        listen(socket.AF_INET, "127.0.0.1", 443, hits, "DECOY")

    linked(channel, NET_V4, NET_V6, serve, host_side)


if __name__ == "__main__":
    main()
