"""A fake GitHub on a test host, in a user+network namespace a test made (run by
test_gh_grant.py under `unshare`, as internet_ns.py is for test_egress_internet.py).

In it: 192.0.2.10 on `lo`, an HTTPS server on 192.0.2.10:443 with a certificate for
api.github.com and github.com signed by the test's own CA, and /etc/hosts bind-mounted by the
caller (api.github.com, github.com and elsewhere.test all at 192.0.2.10). GET /notifications
answers the real API's shape when the request carries the expected token, 401 otherwise.
On the inherited socket FD it serves the egress proxy's Dialer, one message per request:

    resolve HOST PORT    -> "ok ADDR ADDR…" | "err MESSAGE"
    connect ADDR PORT    -> "ok" plus the connected socket (SCM_RIGHTS) | "err MESSAGE"
    stats                -> "ok JSON" (every request seen: host, path, whether the token matched)

argv: FD CERT KEY TOKEN
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

seen: list[dict[str, object]] = []


def github(cert: str, key: str, token: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            ok = self.headers.get("Authorization") == f"token {token}"
            seen.append({"host": self.headers.get("Host"), "path": self.path, "token": ok})
            if not ok:
                self._send(401, {"message": "Bad credentials"})
            elif self.path.startswith("/notifications"):
                self._send(200, [{"id": "1", "subject": {"title": "Review requested: #42"}}])
            else:
                self._send(404, {"message": "Not Found"})

        def _send(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("192.0.2.10", 443), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))  # SOCK_SEQPACKET: one message a request
    github(sys.argv[2], sys.argv[3], sys.argv[4])
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
            channel.sendall(("ok " + json.dumps(seen) + "\n").encode())


if __name__ == "__main__":
    main()
