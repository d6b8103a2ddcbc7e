"""A fake GitHub on a test host (run by test_gh_grant.py under `unshare`, in the "host"
namespace internet_ns.linked() builds, as internet_ns.py is for test_egress_internet.py).

The egress proxy runs in the "host" namespace (the caller bind-mounted its /etc/hosts there:
api.github.com, github.com and elsewhere.test all at 192.0.2.10). In the "net" namespace
behind the veth: 192.0.2.10, an HTTPS server on :443 with a certificate for api.github.com
and github.com signed by the test's own CA. GET /notifications answers the real API's shape
when the request carries the expected token, 401 otherwise. Each connection accepted is a
line "connect" in SEEN_FILE, each request a JSON line (host, path, whether the token matched).

argv: FD CERT KEY TOKEN SEEN_FILE     -> "ready\n" on FD; ends at its EOF
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.sandbox.internet_ns import hit, linked


def github(cert: str, key: str, token: str, seen: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            ok = self.headers.get("Authorization") == f"token {token}"
            hit(
                seen, json.dumps({"host": self.headers.get("Host"), "path": self.path, "token": ok})
            )
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

    class Server(ThreadingHTTPServer):
        def get_request(self) -> tuple[Any, Any]:
            request = super().get_request()
            hit(seen, "connect")
            return request

    server = Server(("192.0.2.10", 443), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))
    cert, key, token, seen = sys.argv[2:6]
    linked(channel, ("192.0.2.10",), (), lambda: github(cert, key, token, seen))


if __name__ == "__main__":
    main()
