"""Stands for the internet, in a user+network namespace a test made (run by
test_egress_internet.py under `unshare`; the workplace allows traffic only to 127.0.0.0/8 and
to namespaces the tests create themselves).

In it: 192.0.2.10 on `lo`, an "internet" HTTP server on 192.0.2.10:8080, a decoy on
127.0.0.1:8081 that must never be reached, and /etc/hosts bind-mounted by the caller. On the
inherited socket FD it serves the egress proxy's Dialer, one message per request:

    resolve HOST PORT    -> "ok ADDR ADDR…" | "err MESSAGE"
    connect ADDR PORT    -> "ok" plus the connected socket (SCM_RIGHTS) | "err MESSAGE"
    stats                -> "ok INTERNET_HITS DECOY_HITS"
"""

from __future__ import annotations

import socket
import sys
import threading

hits = {"internet": 0, "decoy": 0}


def serve(sock: socket.socket, name: str, body: bytes) -> None:
    while True:
        conn, _ = sock.accept()
        hits[name] += 1
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            line = data.split(b"\r\n", 1)[0]
            reply = body + b" " + line + b"\n"
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(reply)
                + reply
            )


def listen(address: str, port: int, name: str, body: bytes) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((address, port))
    s.listen(16)
    threading.Thread(target=serve, args=(s, name, body), daemon=True).start()


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))  # SOCK_SEQPACKET: one message a request
    listen("192.0.2.10", 8080, "internet", b"hello from the internet")
    listen("127.0.0.1", 8081, "decoy", b"DECOY REACHED")
    channel.sendall(b"ready\n")
    while raw := channel.recv(4096):
        op, *args = raw.decode().split()
        if op == "resolve":
            try:
                infos = socket.getaddrinfo(args[0], int(args[1]), type=socket.SOCK_STREAM)
            except OSError as exc:
                channel.sendall(f"err {exc}\n".encode())
                continue
            found = dict.fromkeys(str(i[4][0]) for i in infos)
            channel.sendall(("ok " + " ".join(found) + "\n").encode())
        elif op == "connect":
            s = socket.socket(socket.AF_INET6 if ":" in args[0] else socket.AF_INET)
            try:
                s.connect((args[0], int(args[1])))
            except OSError as exc:
                channel.sendall(f"err {exc}\n".encode())
                s.close()
                continue
            socket.send_fds(channel, [b"ok\n"], [s.fileno()])
            s.close()
        elif op == "stats":
            channel.sendall(f"ok {hits['internet']} {hits['decoy']}\n".encode())


if __name__ == "__main__":
    main()
