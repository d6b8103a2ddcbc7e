"""The worker tests' runs, forked as a daemon forks them: one real forkserver
(worker/forkserver.py, the SDKs preloaded) for each test process, started at its first run and
ended with it, asked for each worker over its socket as supervisor/engine/forkserver.py asks.

A spawned worker imports the SDKs itself (~1.8 s of CPU a run); a forked one starts in the
state a spawned one would, with them already imported
(tests/supervisor/test_forkserver.py::test_a_forked_worker_starts_in_the_state_of_a_spawned_one
compares the two field by field). What a cold start alone shows (what a route imports, the
process's set-up) stays with the tests that spawn (`worker_harness.spawn`, test_worker_process.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from supervisor.engine.forkserver import forkserver_env

__all__ = ["close_forkservers", "forkserver_pid", "run_forked"]

READY_SEC = 120.0  # a bound on the preload (~2 s quiet), never a speed assertion
_RLIMITS = [getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")]


class _ForkServer:
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "worker.forkserver", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            env=forkserver_env(env),
            cwd=cwd,
        )
        theirs.close()
        self.sock = ours
        self.exits: dict[int, int] = {}  # exits read while waiting for something else
        ready = self._next(READY_SEC)
        assert ready == {"ready": True}, ready

    def _next(self, timeout: float) -> dict[str, Any]:
        self.sock.settimeout(timeout)
        data = self.sock.recv(65536)
        assert data, f"the forkserver exited ({self.proc.poll()})"
        msg: dict[str, Any] = json.loads(data)
        return msg

    def fork(self, env: dict[str, str], cwd: Path) -> tuple[int, int, int, int]:
        """A worker forked with `env` in `cwd`: its pid and our ends of its stdin, stdout and
        stderr."""
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(3)]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        dirfd = os.open(cwd, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        umask = os.umask(0o077)
        os.umask(umask)
        rlimits = [[r, *resource.getrlimit(r)] for r in _RLIMITS]
        argv = [sys.executable, "-m", "worker"]
        req = {"argv": argv, "env": env, "umask": umask, "rlimits": rlimits}
        try:
            socket.send_fds(self.sock, [json.dumps(req).encode()], [*theirs, dirfd])
        finally:
            for fd in (*theirs, dirfd):
                os.close(fd)
        while "exit" in (reply := self._next(READY_SEC)):
            self.exits[int(reply["exit"])] = int(reply["code"])
        assert "pid" in reply, f"the fork failed: {reply}"
        return int(reply["pid"]), pipes[0][1], pipes[1][0], pipes[2][0]

    def wait(self, pid: int, timeout: float) -> int:
        while pid not in self.exits:
            msg = self._next(timeout)
            assert "exit" in msg, msg
            self.exits[int(msg["exit"])] = int(msg["code"])
        return self.exits.pop(pid)


_SERVERS: dict[int, _ForkServer] = {}  # by pid of the test process (a fork of it starts anew)


def _server(env: dict[str, str], cwd: Path) -> _ForkServer:
    server = _SERVERS.get(os.getpid())
    if server is None or server.proc.poll() is not None:
        server = _SERVERS[os.getpid()] = _ForkServer(env, cwd)
    return server


def forkserver_pid() -> int | None:
    """This test process's forkserver while it runs: kept between tests, as the overlay
    maker is (tests/sandbox/conftest.py no_leftovers counts its workers, not it)."""
    server = _SERVERS.get(os.getpid())
    return server.proc.pid if server is not None and server.proc.poll() is None else None


def close_forkservers() -> None:
    """End this test process's forkserver (EOF: it forks no more and exits once its workers
    have) and reap it: its CPU, and its workers', count in this process's as a spawn's would."""
    server = _SERVERS.pop(os.getpid(), None)
    if server is not None:
        with contextlib.suppress(OSError):
            server.sock.shutdown(socket.SHUT_WR)
        try:
            server.proc.wait(READY_SEC)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
        server.sock.close()


def run_forked(
    stdin: bytes, env: dict[str, str], cwd: Path, timeout: float
) -> tuple[int, bytes, bytes]:
    """As `Popen([python, -m, worker], cwd=cwd, env=env).communicate(stdin, timeout)`, the worker
    forked: (returncode, stdout, stderr); subprocess.TimeoutExpired after its process group is
    killed when it outlives `timeout`."""
    server = _server(env, cwd)
    pid, to_child, from_out, from_err = server.fork(env, cwd)
    chunks: dict[int, list[bytes]] = {from_out: [], from_err: []}

    def drain(fd: int) -> None:
        with open(fd, "rb", buffering=0) as f:
            while data := f.read(65536):
                chunks[fd].append(data)

    def feed() -> None:
        with open(to_child, "wb", buffering=0) as f, contextlib.suppress(BrokenPipeError):
            f.write(stdin)

    threads = [threading.Thread(target=t, args=a) for t, a in ((feed, ()), (drain, (from_out,)))]
    threads.append(threading.Thread(target=drain, args=(from_err,)))
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # as subprocess.run's timeout kills its child
        for t in threads:
            t.join()
        server.wait(pid, READY_SEC)
        raise subprocess.TimeoutExpired(["python", "-m", "worker"], timeout)
    code = server.wait(pid, READY_SEC)  # its output ended: it is leaving
    return code, b"".join(chunks[from_out]), b"".join(chunks[from_err])
