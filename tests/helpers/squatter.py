"""A second local user's listener, for the dashboard's port-squatting and cookie chains.

The suite runs as one unprivileged user and cannot become another; scripts/second-user.sh
(run as root before the tests, by scripts/dev-pytest.sh and scripts/as-user.sh) starts this
program as the user `vinos-test2`. It is that user's real process: its sockets are owned by
that uid in /proc/net/tcp, as an attacker's would be.

It serves one Unix socket (SOCKET, mode 0666 in a 0755 dir; only the uid given by
--allow-uid is answered, checked with SO_PEERCRED), one JSON line per request:

    {"cmd": "listen", "port": 0, "address": "127.0.0.1"}  -> {"id": 1, "port": 41234, "uid": 1002}
    {"cmd": "received", "id": 1}                          -> {"requests": ["GET / HTTP/1.1..."]}
    {"cmd": "close", "id": 1}                             -> {}
    {"cmd": "plant", "name": "bin/x", "text": "..."}      -> {"path": "/tmp/vinos-plant-…/bin/x"}
    {"cmd": "call", "path": "/…/sandbox.sock", "text": "{…}"} -> {"connected": true, "received": ""}

`plant` writes an executable of this user (folders 0755, the file 0755) in a new folder under
/tmp: a program another user installed where a routine's author points to it (an MCP
server's command). Each plant is removed when the helper stops.

A listener answers every HTTP request with 200 and a dashboard-like body (what the old
"is it ours?" probe took for a yes) and records what it was sent, headers included: the test
asserts that no token or cookie ever arrived. Standard library only; it runs under the
system's python3, outside the project's venv. Bounded: at most 64 listeners, 256 recorded
requests each, 64 KiB read per connection.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import sys
import threading
from typing import Any

MAX_LISTENERS = 64
MAX_REQUESTS = 256
MAX_READ = 64 * 1024
BODY = b'{"pulse": "squatter"}'
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
)


class Listener:
    def __init__(self, address: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            # Dual stack: a connection to 127.0.0.1 lands here too.
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.sock.bind((address, port))
        self.sock.listen(16)
        self.port: int = self.sock.getsockname()[1]
        self.requests: list[str] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        data = b""
        try:
            while b"\r\n\r\n" not in data and len(data) < MAX_READ:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            with self.lock:
                if len(self.requests) < MAX_REQUESTS:
                    self.requests.append(data.decode("latin-1"))
            if data:
                conn.sendall(RESPONSE)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


class Squatter:
    def __init__(self) -> None:
        self.listeners: dict[int, Listener] = {}
        self.next_id = 1
        self.planted: list[str] = []

    def plant(self, name: str, text: str) -> dict[str, Any]:
        import tempfile

        if len(self.planted) >= MAX_LISTENERS or name.startswith("/") or ".." in name.split("/"):
            return {"error": "refused"}
        top = tempfile.mkdtemp(prefix="vinos-plant-", dir="/tmp")
        self.planted.append(top)
        os.chmod(top, 0o755)
        path = os.path.join(top, name)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
        return {"path": path}

    def call(self, path: str, text: str) -> dict[str, Any]:
        """Connect to the Unix SOCK_SEQPACKET socket `path` as this user, send `text` with this
        process's stdin, stdout, stderr and / as descriptors (a `vinos-routine sandbox` call's
        shape), and return what came back: "" when it was closed on without a word."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(10)
            try:
                s.connect(path)
            except OSError as exc:
                return {"connected": False, "why": str(exc)}
            root = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
            try:
                socket.send_fds(s, [text.encode()], [0, 1, 2, root])
            except OSError as exc:
                return {"connected": True, "received": "", "why": str(exc)}
            finally:
                os.close(root)
            try:
                got = s.recv(MAX_READ)
            except OSError as exc:
                return {"connected": True, "received": "", "why": str(exc)}
            return {"connected": True, "received": got.decode("utf-8", "replace")}

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req.get("cmd")
        if cmd == "call":
            return self.call(str(req.get("path", "")), str(req.get("text", "")))
        if cmd == "plant":
            return self.plant(str(req.get("name", "")), str(req.get("text", "")))
        if cmd == "listen":
            if len(self.listeners) >= MAX_LISTENERS:
                return {"error": "too many listeners"}
            try:
                listener = Listener(str(req.get("address", "127.0.0.1")), int(req["port"]))
            except (OSError, KeyError, ValueError) as exc:
                return {"error": str(exc)}
            lid, self.next_id = self.next_id, self.next_id + 1
            self.listeners[lid] = listener
            return {"id": lid, "port": listener.port, "uid": os.getuid()}
        listener_or_none = self.listeners.get(int(req.get("id", 0)))
        if listener_or_none is None:
            return {"error": "no such listener"}
        if cmd == "received":
            with listener_or_none.lock:
                return {"requests": list(listener_or_none.requests)}
        if cmd == "close":
            listener_or_none.close()
            del self.listeners[int(req["id"])]
            return {}
        return {"error": f"unknown command {cmd!r}"}


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--allow-uid", type=int, required=True)
    args = parser.parse_args()
    squatter = Squatter()
    lock = threading.Lock()

    def stop(_sig: int, _frame: object) -> None:
        import shutil

        for top in squatter.planted:
            shutil.rmtree(top, ignore_errors=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    server.bind(args.socket)
    os.chmod(args.socket, 0o666)
    server.listen(16)
    print("ready", flush=True)

    def client(conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            if peer_uid(conn) != args.allow_uid:
                return
            for line in f:
                try:
                    req = json.loads(line)
                    with lock:
                        reply = squatter.handle(req if isinstance(req, dict) else {})
                except ValueError as exc:
                    reply = {"error": str(exc)}
                f.write(json.dumps(reply).encode() + b"\n")
                f.flush()

    while True:
        conn, _ = server.accept()
        threading.Thread(target=client, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
