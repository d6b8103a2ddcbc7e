"""The daemon under systemd's eyes: sd_notify datagrams to a NOTIFY_SOCKET the test owns, socket
activation (LISTEN_FDS) through systemd-socket-activate, the process titles, and a clean stop on
SIGTERM (STOPPING=1, the workers given their grace).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from routines.spec.paths import paths
from supervisor.cli.client import DaemonError, connect
from tests.supervisor.daemonkit import (
    REPO,
    DaemonProcess,
    command_routine,
    entered,
    final,
    gated,
    processes_with_cmdline,
    release,
    rows,
    wait_for,
    write_routine,
)
from tests.supervisor.gates import gate_home, gates

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

GRACE = 5.0  # stop_grace_sec (VINOS_DEBUG_TIMINGS) for these daemons


class NotifySocket:
    """A datagram socket standing in for systemd's notify socket; records every datagram,
    and whether the control socket accepted a connection when READY=1 arrived."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[str] = []
        self.ready_could_connect: bool | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            text = data.decode()
            if "READY=1" in text.split("\n") and self.ready_could_connect is None:
                try:
                    connect(paths().control_socket, timeout=5).close()
                    self.ready_could_connect = True
                except OSError:
                    self.ready_could_connect = False
            self.messages.append(text)

    def lines(self) -> list[str]:
        return [line for m in list(self.messages) for line in m.split("\n")]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    s = NotifySocket(tmp_path / "notify.sock")
    yield s
    s.close()


def alive(p: psutil.Process) -> bool:
    try:
        return bool(p.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def sandboxed() -> list[psutil.Process]:
    """The runs' sandboxes (their argv names a workspace) and commands (theirs, their gate)."""
    return [
        *processes_with_cmdline(str(paths().workspace_root) + "/"),
        *processes_with_cmdline(str(gates()) + "/"),
    ]


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


def test_sigterm_stops_cleanly_and_ends_what_did_not_finish_in_the_grace(
    tmp_path: Path, not_root: None, notify_socket: NotifySocket
) -> None:
    for name in ("alpha", "beta", "gamma"):
        write_routine(name, command_routine(gated(name, f"echo {name}"), extra=gate_home(name)))
    d = DaemonProcess(
        tmp_path,
        extra_env={
            "NOTIFY_SOCKET": str(notify_socket.path),
            "WATCHDOG_USEC": "200000",
        },
        timings={"stop_grace_sec": GRACE},
    ).start()
    wait_for(lambda: "READY=1" in notify_socket.lines(), what="READY=1")
    assert notify_socket.ready_could_connect is True  # READY only once the socket listens
    d.to_slot()
    wait_for(lambda: entered("alpha") == 1 and entered("beta") == 1, what="two runs")
    wait_for(lambda: "STATUS=2 running · 1 queued" in "\n".join(notify_socket.lines()))
    wait_for(lambda: notify_socket.lines().count("WATCHDOG=1") >= 2, what="watchdog pings")
    # setproctitle: the daemon and its workers say what they are in ps.
    assert cmdline(d.pid).startswith("vinos-routined: 2 running · 1 queued · next ")
    workers = d.workers()
    titles = sorted(cmdline(w.pid) for w in workers)
    assert titles == ["vinos-routine worker alpha", "vinos-routine worker beta"]
    sandboxes = sandboxed()
    assert sandboxes

    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "STOPPING=1" in notify_socket.lines(), what="STOPPING=1")
    # Nothing new is admitted while it stops; the socket still answers, with the reason.
    with pytest.raises(DaemonError) as refused:
        d.request("run", {"name": "gamma"})
    assert refused.value.code == "stopping"
    release("alpha")  # ends within the grace: recorded as it ended
    assert d.proc.wait(GRACE + 30) == 0
    assert [r.status for r in rows("alpha")] == ["ok"]
    [beta] = rows("beta")
    assert (beta.status, beta.detail) == ("interrupted", "the daemon stopped while it ran")
    [gamma] = rows("gamma")
    assert (gamma.status, gamma.detail) == ("interrupted", "the daemon stopped before it started")
    assert entered("gamma") == 0
    # No worker and no sandboxed process is left behind; the socket file is gone.
    assert not [p for p in [*workers, *sandboxes] if alive(p)]
    assert not sandboxed()
    assert not paths().control_socket.exists()
    assert "STOPPING=1" in notify_socket.lines()


def test_socket_activation_uses_the_passed_socket(
    tmp_path: Path, not_root: None, notify_socket: NotifySocket
) -> None:
    activate = shutil.which("systemd-socket-activate")
    if activate is None:
        pytest.fail("systemd-socket-activate is missing: install systemd (scripts/system-deps.sh)")
    sock = paths().control_socket
    sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_routine("hello", command_routine("echo hello"))
    # systemd-socket-activate passes on only TERM, PATH, USER and HOME, and what -E names.
    passed = ["VINOS_HOME", "VINOS_SYSTEM_DIR", "XDG_RUNTIME_DIR", "PYTHONPATH", "NOTIFY_SOCKET"]
    passed += ["VINOS_DEBUG_TIMINGS"]
    record = tmp_path / "worker-env.jsonl"
    d = DaemonProcess(
        tmp_path,
        wrap=[activate, "-l", str(sock), *(f"--setenv={v}" for v in passed)],
        extra_env={"NOTIFY_SOCKET": str(notify_socket.path)},
        worker_argv=[sys.executable, str(REPO / "tests/supervisor/envshim.py"), str(record)],
    )
    d.start(wait=False)
    wait_for(sock.exists, what="systemd-socket-activate to listen")
    inode = sock.stat().st_ino
    d.wait_ready()  # the first connection starts the daemon on the listening socket
    assert d.proc is not None
    assert d.pid == d.proc.pid  # systemd-socket-activate execs it in place
    assert sock.stat().st_ino == inode  # the daemon did not bind a socket of its own
    wait_for(lambda: "READY=1" in notify_socket.lines(), what="READY=1")
    d.to_slot()
    [row] = wait_for(lambda: final("hello"), what="the run")
    assert row.status == "ok"
    [seen] = [json.loads(line) for line in record.read_text().splitlines()]
    # The daemon's conversation with systemd, its listening socket and the test clock stay
    # with the daemon.
    assert seen["fds"] == [0, 1, 2]
    for var in ("LISTEN_FDS", "LISTEN_PID", "NOTIFY_SOCKET", "VINOS_DEBUG_TIMINGS"):
        assert var not in seen["env"]
    assert seen["env"]["VINOS_HOME"] == os.environ["VINOS_HOME"]
    assert d.stop() == 0
    assert sock.exists() and sock.stat().st_ino == inode  # systemd's socket: left in place


def test_a_foreground_daemon_says_why_and_when_it_stops(tmp_path: Path, not_root: None) -> None:
    """SIGTERM to a daemon in the foreground: its log says it stops and why, that its
    forkserver stopped, and that it stopped, as it says it started (a journal that ends
    without a line reads as a crash)."""
    write_routine("ticker", command_routine("true"))  # due each minute: the forkserver is up
    d = DaemonProcess(tmp_path, timings={"forkserver": True}).start()
    wait_for(lambda: "forkserver up (pid" in d.log(), timeout=60, what="the forkserver")
    assert d.stop(signal.SIGTERM) == 0
    log = d.log()
    assert "INFO vinos.daemon: stopping (SIGTERM)" in log, log
    assert "INFO vinos.forkserver: forkserver stopped (pid" in log, log
    assert f"INFO vinos.daemon: vinos-routine daemon stopped (pid {d.pid})" in log, log
    # In that order, after the start line.
    order = [
        log.index(s)
        for s in ("started for", "stopping (SIGTERM)", "forkserver stopped", "daemon stopped")
    ]
    assert order == sorted(order), log
