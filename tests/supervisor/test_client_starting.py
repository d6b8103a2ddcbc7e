"""A daemon takes its lock before its control socket listens (the ledger opens in between).
A command asked in that window waits for the socket instead of calling the daemon hung:
`systemctl --user start vinos-routined; vinos-routine status` works. Real flock, real Unix
socket (in the short runtime dir tests/conftest.py gives each test), no daemon: the window
is held open here for as long as the test needs.

Before: `status --json` failed with "running ... but does not answer (no socket)" when a
freshly installed daemon was asked while it started (tests/packaging/test_wheel.py, on CI).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import threading
from collections.abc import Iterator

import pytest

from ipc import Hello, encode
from routines.spec.paths import paths
from supervisor.cli.client import Client, DaemonUnresponsive, try_daemon


@contextlib.contextmanager
def held_lock() -> Iterator[None]:
    """The daemon's lock, held as supervisor/engine/owner.py holds it, with our pid in it."""
    p = paths()
    p.runtime_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(p.daemon_lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)


def greet_once(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(30)
        conn.recv(4096)  # the client's hello
        conn.sendall(encode(Hello()))


def test_a_starting_daemon_is_waited_for() -> None:
    got: list[object] = []
    asked = threading.Event()

    def ask() -> None:
        asked.set()
        try:
            got.append(try_daemon())
        except Exception as exc:  # the assertion below shows it
            got.append(exc)

    with held_lock(), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        client = threading.Thread(target=ask, daemon=True)
        client.start()
        asked.wait()
        # The daemon binds a moment after the command asked: no socket until then.
        client.join(timeout=1.0)
        listener.settimeout(30)
        listener.bind(str(paths().control_socket))
        listener.listen()
        server = threading.Thread(target=greet_once, args=(listener,), daemon=True)
        server.start()
        client.join(timeout=30)
        (answer,) = got
        assert isinstance(answer, Client), answer
        answer.close()
        server.join(timeout=30)


def test_a_daemon_whose_socket_never_appears_is_unresponsive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("supervisor.cli.client.CONNECT_TIMEOUT_SEC", 0.3)
    with held_lock(), pytest.raises(DaemonUnresponsive, match=f"pid {os.getpid()} holds"):
        try_daemon()
