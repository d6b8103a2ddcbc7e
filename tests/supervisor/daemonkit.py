"""A real daemon process for end-to-end tests: start, talk to, step its clock, stop, kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

from routines.ledger import Ledger, RunRow
from routines.paths import Paths, paths
from supervisor.client import Client, DaemonNotRunning, connect

REPO = Path(__file__).resolve().parents[2]


def write_routine(name: str, text: str, p: Paths | None = None) -> Path:
    p = p or paths()
    p.routines_dir.mkdir(parents=True, exist_ok=True)
    path = p.routines_dir / f"{name}.toml"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def command_routine(
    run: str,
    *,
    schedule: str = 'oncalendar = "*-*-* *:*:00/5"',
    enabled: bool = True,
    timeout: int = 60,
    missed: str = "catch_up",
    extra: str = "",
) -> str:
    return (
        f"[routine]\nkind = \"command\"\nenabled = {str(enabled).lower()}\n"
        f"[schedule]\n{schedule}\nmissed = \"{missed}\"\ntimezone = \"UTC\"\n"
        f"[command]\nrun = '''{run}'''\ntimeout_sec = {timeout}\n{extra}"
    )


class Daemon:
    """`vinos-routine daemon` in a subprocess with the test's environment."""

    def __init__(self, tmp: Path, *, tick: float = 0.2, extra_env: dict[str, str] | None = None):
        self.paths = paths()
        self.clock_file = tmp / "clock-offset"
        self.clock_file.write_text("0")
        self.log_path = tmp / f"daemon-{time.monotonic_ns()}.log"
        self.env = dict(os.environ)
        self.env.update(
            VINOS_CLOCK_OFFSET_FILE=str(self.clock_file),
            VINOS_TICK_MAX_SEC=str(tick),
            PYTHONPATH=str(REPO),
            **(extra_env or {}),
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> Daemon:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "daemon"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}:\n{self.log()}")
            try:
                with connect(self.paths.control_socket, timeout=2) as c:
                    c.request("ping")
                return
            except (DaemonNotRunning, OSError):
                time.sleep(0.05)
        raise AssertionError(f"daemon not ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self) -> Client:
        return connect(self.paths.control_socket)

    def request(self, cmd: str, args: dict[str, Any] | None = None) -> Any:
        with self.client() as c:
            return c.request(cmd, args)

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=float(self.clock_file.read_text()))

    def set_offset(self, seconds: float) -> None:
        tmp = self.clock_file.with_suffix(".tmp")
        tmp.write_text(repr(seconds))
        tmp.replace(self.clock_file)

    def step(self, delta: timedelta) -> None:
        self.set_offset(float(self.clock_file.read_text()) + delta.total_seconds())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def rows(name: str | None = None, limit: int = 1000) -> list[RunRow]:
    with Ledger(paths().ledger) as ledger:
        return ledger.history(name, limit)


def wait_for(predicate: Any, timeout: float = 30, interval: float = 0.05, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def workers_of(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def processes_with_cmdline(fragment: str) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["cmdline", "uids"]):
        try:
            if proc.info["uids"] and proc.info["uids"].real != os.getuid():
                continue
            if fragment in " ".join(proc.info["cmdline"] or []):
                out.append(proc)
        except psutil.Error:
            continue
    return out
