"""Any process of the user can open connections to the control socket; none can lock the CLI out of
the daemon, with the real daemon and real Unix sockets:

- a connection idle after the greeting is closed after the idle timeout;
- at the 512-client cap, a new client evicts the oldest idle connection, so `status` and
  `run` still reach the daemon;
- a daemon that holds its lock but does not answer (here: stopped with SIGSTOP) is "busy or
  unresponsive", never "not running": `status` and `run` exit 1 and say so, and `run` never
  runs the routine in-process beside it.

Before: 512 idle connections made `status` print "daemon: not running" (exit 0) and `run`
run in-process, outside the daemon's queue and max_concurrent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipc import Hello, encode
from routines.spec.paths import paths
from supervisor.control.server import MAX_CLIENTS
from tests.supervisor.daemonkit import DaemonProcess, command_routine, rows, wait_for, write_routine

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def greeted() -> socket.socket:
    """A client that said hello and then nothing: an idle connection."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(paths().control_socket))
    hello = b""
    while not hello.endswith(b"\n"):
        chunk = sock.recv(4096)
        assert chunk, "the daemon closed a new connection instead of greeting it"
        hello += chunk
    sock.sendall(encode(Hello()))
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(4096) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


@contextlib.contextmanager
def idle_clients(n: int) -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            socks.append(greeted())
        yield socks
    finally:
        for s in socks:
            s.close()


def test_idle_clients_at_the_cap_do_not_lock_out_the_cli(tmp_path: Path, not_root: None) -> None:
    write_routine("echoer", command_routine("echo through the daemon", enabled=False))
    d = DaemonProcess(tmp_path, timings={"control_idle_sec": 600}).start()
    with idle_clients(MAX_CLIENTS) as socks:
        status = d.cli("status")
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith(f"daemon: running (pid {d.pid})"), status.stdout
        # The oldest idle connection made room; the newest ones are still served.
        wait_for(lambda: closed_by_peer(socks[0]), what="the oldest idle client to be closed")
        assert not closed_by_peer(socks[-1])
        ran = d.cli("run", "echoer")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "in this process" not in ran.stderr
    [row] = rows("echoer")
    assert (row.status, row.detail) == ("ok", "through the daemon")
    assert "closing the one idle longest" in d.log()
    assert d.stop() == 0


def test_a_client_idle_after_the_greeting_is_closed(tmp_path: Path, not_root: None) -> None:
    d = DaemonProcess(tmp_path, timings={"control_idle_sec": 1}).start()
    with idle_clients(3) as socks:
        for sock in socks:
            wait_for(lambda s=sock: closed_by_peer(s), what="the idle client to be closed")
    assert d.request("ping")["pid"] == d.pid  # a client that asks is served as before
    assert d.stop() == 0


def test_a_daemon_holding_its_lock_but_silent_is_never_not_running(
    tmp_path: Path, not_root: None
) -> None:
    write_routine("echoer", command_routine("echo hi", enabled=False))
    d = DaemonProcess(tmp_path, extra_env={"VINOS_CONTROL_TIMEOUT_SEC": "1"}).start()
    os.kill(d.pid, signal.SIGSTOP)  # up, holding its lock, answering nothing
    try:
        said = f"the vinos-routine daemon is running (pid {d.pid} holds its lock) but does not"
        for args in (("status",), ("run", "echoer"), ("run", "echoer", "--no-daemon")):
            out = d.cli(*args)
            assert out.returncode == 1, (args, out.stdout, out.stderr)
            assert "not running" not in out.stdout + out.stderr, args
            assert "in this process" not in out.stderr, args
        assert said in d.cli("status").stderr
        assert rows("echoer") == []  # nothing ran beside the daemon
    finally:
        os.kill(d.pid, signal.SIGCONT)
    assert d.cli("status").returncode == 0
    assert d.stop() == 0


def test_a_silent_daemon_costs_the_control_timeout_once(tmp_path: Path, not_root: None) -> None:
    """`status` with the daemon stopped (SIGSTOP, its lock held): the quick path waits the
    control timeout out, then says the daemon does not answer; the full path does not wait
    it out a second time."""
    d = DaemonProcess(tmp_path, extra_env={"VINOS_CONTROL_TIMEOUT_SEC": "3"}).start()
    os.kill(d.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        out = d.cli("status")
        took = time.monotonic() - began
    finally:
        os.kill(d.pid, signal.SIGCONT)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "but does not answer" in out.stderr
    assert 3 <= took < 5.5, took  # once (3 s and the CLI's start), not twice (6 s)
    assert d.stop() == 0
