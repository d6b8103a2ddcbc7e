"""The control socket, in process: real Unix sockets, real SO_PEERCRED, an asyncio server."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ipc import MAX_LINE, Event, EventKind, Request
from supervisor.cli.client import Client, DaemonError, DaemonNotRunning, connect
from supervisor.control.server import QUEUE_LINES, CommandError, Connection, ControlServer


class ServerThread:
    """A ControlServer on its own event loop thread, with a few test commands."""

    def __init__(self, path: Path, uid: int | None = None) -> None:
        self.path = path
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.release = asyncio.Event()
        self.server = ControlServer(
            {
                "ping": self.ping,
                "boom": self.boom,
                "refuse": self.refuse,
                "flood": self.flood,
                "wait": self.wait,
            },
            uid=uid,
        )
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    async def ping(self, req: Request, conn: Connection) -> Any:
        return {"pong": req.args.get("n", 0)}

    async def boom(self, req: Request, conn: Connection) -> Any:
        raise RuntimeError("a bug")

    async def refuse(self, req: Request, conn: Connection) -> Any:
        raise CommandError("busy", "previous run still going")

    async def flood(self, req: Request, conn: Connection) -> Any:
        for i in range(req.args["n"]):
            conn.send(Event(EventKind.LOG, f"line {i}", {"pad": "x" * 1000}))
            if i % 100 == 0 and not req.args.get("burst"):  # burst: all queued at once
                await asyncio.sleep(0)
        return {"sent": req.args["n"]}

    async def wait(self, req: Request, conn: Connection) -> Any:
        await self.release.wait()
        return "released"

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.start(self.path))
        self.ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.server.close(), self.loop)
        fut.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    s = ServerThread(tmp_path / "rt" / "control.sock")
    yield s
    s.stop()


def test_socket_is_private(server: ServerThread) -> None:
    assert stat.S_IMODE(server.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(server.path.parent.stat().st_mode) == 0o700


def test_request_response_and_errors(server: ServerThread) -> None:
    with connect(server.path) as c:
        assert c.request("ping", {"n": 7}) == {"pong": 7}
        with pytest.raises(DaemonError, match="previous run still going") as exc:
            c.request("refuse")
        assert exc.value.code == "busy"
        with pytest.raises(DaemonError, match="RuntimeError: a bug"):
            c.request("boom")
        with pytest.raises(DaemonError, match="unknown command 'nope'"):
            c.request("nope")
        # The connection survives all of that.
        assert c.request("ping") == {"pong": 0}


def test_events_stream_before_the_response(server: ServerThread) -> None:
    seen: list[Event] = []
    with connect(server.path) as c:
        assert c.request("flood", {"n": 50}, on_event=seen.append) == {"sent": 50}
    assert [e.text for e in seen] == [f"line {i}" for i in range(50)]


def test_another_uid_is_refused(tmp_path: Path) -> None:
    s = ServerThread(tmp_path / "rt" / "control.sock", uid=os.getuid() + 1)
    try:
        with pytest.raises(DaemonNotRunning, match="no hello"):
            connect(s.path)
    finally:
        s.stop()


def _raw(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    return sock


@pytest.mark.parametrize(
    "payload",
    [
        b"not json\n",
        b'{"type": "request", "id": "x", "cmd": 5}\n',
        b"[1, 2, 3]\n",
        b'{"type": "hello", "protocol": 1}\n{"type": "request"\n',
        b'{"type": "hello", "protocol": 1}\n' + b"x" * (MAX_LINE + 10) + b"\n",
    ],
    ids=["garbage", "bad-fields", "not-object", "torn", "oversized"],
)
def test_bad_lines_end_that_connection_only(server: ServerThread, payload: bytes) -> None:
    bad = _raw(server.path)
    bad.sendall(payload)
    # The daemon closes the bad connection (after its hello, nothing but EOF comes).
    data = b""
    while chunk := bad.recv(65536):
        data += chunk
    assert data.count(b"\n") == 1 and b'"hello"' in data
    bad.close()
    with connect(server.path) as good:
        assert good.request("ping") == {"pong": 0}


def test_a_client_that_never_reads_is_dropped_and_others_are_served(
    server: ServerThread,
) -> None:
    lazy = _raw(server.path)
    lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    lazy.sendall(b'{"type": "hello", "protocol": 1}\n')
    lazy.sendall(
        b'{"type": "request", "id": 1, "cmd": "flood", "args": {"n": %d}}\n' % (QUEUE_LINES * 4)
    )
    # While the lazy client's queue overflows, another client is served promptly.
    with connect(server.path, timeout=10) as c:
        for i in range(20):
            assert c.request("ping", {"n": i}) == {"pong": i}
    # And the lazy one was cut off rather than buffered without bound.
    lazy.settimeout(10)
    total = 0
    try:
        while chunk := lazy.recv(1 << 16):
            total += len(chunk)
    except ConnectionResetError:
        pass
    assert total < QUEUE_LINES * 4 * 1000
    lazy.close()


def test_a_hundred_clients_at_once(server: ServerThread) -> None:
    clients: list[Client] = [connect(server.path) for _ in range(100)]
    results: list[Any] = [None] * 100

    def ask(i: int) -> None:
        results[i] = clients[i].request("ping", {"n": i})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for c in clients:
        c.close()
    assert results == [{"pong": i} for i in range(100)]


def test_a_client_waiting_on_a_long_request_does_not_block_others(server: ServerThread) -> None:
    waiting = connect(server.path)
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(waiting.request("wait")))
    t.start()
    with connect(server.path) as c:
        assert c.request("ping") == {"pong": 0}
    server.loop.call_soon_threadsafe(server.release.set)
    t.join(10)
    waiting.close()
    assert result == ["released"]


def test_no_daemon_gives_the_start_hint(tmp_path: Path) -> None:
    with pytest.raises(DaemonNotRunning, match="systemctl --user enable --now vinos-routined"):
        connect(tmp_path / "missing.sock")


def test_a_socket_path_too_long_for_a_unix_socket_is_a_clear_error(
    tmp_path: Path, not_root: None
) -> None:
    from supervisor.control.server import socket_path_problem

    deep = tmp_path / ("d" * 120)
    assert socket_path_problem(deep / "control.sock") is not None
    assert socket_path_problem(Path("/run/user/1000/vinos-routine/control.sock")) is None
    env = dict(os.environ, XDG_RUNTIME_DIR=str(deep))
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "daemon"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert "a Unix socket path must be at most 107: set XDG_RUNTIME_DIR" in done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(DaemonNotRunning, match="too long for a Unix socket"):
        connect(deep / "vinos-routine" / "control.sock")
