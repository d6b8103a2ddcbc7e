"""A real daemon process for end-to-end tests: start, talk to, step its clock, stop, kill."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

from routines.ledger import Ledger, RoutineState, RunRow
from routines.spec.paths import Paths, paths
from supervisor.cli.client import Client, DaemonNotRunning, connect
from supervisor.timings import DEBUG_ENV
from tests.supervisor.gates import channel, close_gates, gate

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
    schedule: str = 'cron = "* * * * *"',
    enabled: bool = True,
    timeout: int = 60,
    missed: str = "catch_up",
    extra: str = "",
) -> str:
    return (
        f'[routine]\nkind = "command"\nenabled = {str(enabled).lower()}\n'
        f'[schedule]\n{schedule}\nmissed = "{missed}"\ntimezone = "UTC"\n'
        f"[command]\nrun = '''{run}'''\ntimeout_sec = {timeout}\n{extra}"
    )


class DaemonProcess:
    """`vinos-routine daemon` in a subprocess with the test's environment.

    `python_flags` go before `-m supervisor` (e.g. `-X importtime`); `worker_argv` starts the
    daemon through `supervisor.daemon.main(worker_argv=...)` (a stand-in worker); `wrap` is a
    command the daemon runs under (e.g. bwrap giving it a tiny tmpfs): then `self.proc` is the
    wrapper and `daemon_pid` (from `ping`) the daemon itself. `timings`: fields of
    supervisor/timings.py's Timings, over the short tick and the stepped clock every test's
    daemon has; they reach it as VINOS_DEBUG_TIMINGS, written at `start`.
    """

    def __init__(
        self,
        tmp: Path,
        *,
        tick: float = 0.2,
        extra_env: dict[str, str] | None = None,
        timings: Mapping[str, object] | None = None,
        python_flags: list[str] | None = None,
        worker_argv: list[str] | None = None,
        wrap: list[str] | None = None,
    ):
        self.paths = paths()
        self.clock_file = tmp / "clock-offset"
        if not self.clock_file.exists():
            self.clock_file.write_text("0")
        self.log_path = tmp / f"daemon-{time.monotonic_ns()}.log"
        self.env = dict(os.environ)
        self.env.update(PYTHONPATH=str(REPO), **(extra_env or {}))
        # Over the fields the environment already sets. A real daemon runs its forkserver, as
        # it does for users (supervisor/engine/forkserver.py: it earns its start in bench_typedrun,
        # bench_worker_anthropic and bench_command), so its runs are forked here too; the
        # in-process daemons of the other tests go without (tests/conftest.py).
        inherited = json.loads(self.env.get(DEBUG_ENV) or "{}")
        self.timings: dict[str, object] = {
            "tick_max_sec": tick,
            **inherited,
            "forkserver": True,
            **(timings or {}),
        }
        self.python_flags = python_flags or []
        self.worker_argv = worker_argv
        self.wrap = wrap or []
        self.proc: subprocess.Popen[bytes] | None = None
        self.daemon_pid: int | None = None

    def argv(self) -> list[str]:
        if self.worker_argv is None:
            entry = ["-m", "supervisor", "daemon"]
        else:
            entry = [
                "-c",
                "import sys; from supervisor.daemon import main; "
                f"sys.exit(main(worker_argv={self.worker_argv!r}))",
            ]
        return [*self.wrap, sys.executable, *self.python_flags, *entry]

    def debug_timings(self) -> str:
        """The VINOS_DEBUG_TIMINGS this daemon starts with (its clock file as it is now)."""
        return json.dumps({"clock_offset_file": str(self.clock_file), **self.timings})

    def start(self, wait: bool = True) -> DaemonProcess:
        self.env[DEBUG_ENV] = self.debug_timings()
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            self.argv(),
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()
        _STARTED.append(self)
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
                    self.daemon_pid = c.request("ping")["pid"]
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
            os.kill(self.pid, sig)  # the daemon itself, also when it runs under a wrapper
        return self.proc.wait(timeout)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    @property
    def pid(self) -> int:
        """The daemon's pid (not a wrapper's)."""
        if self.daemon_pid is not None:
            return self.daemon_pid
        assert self.proc is not None
        return self.proc.pid

    def to_slot(self, every: int = 60, after: float = 1.0) -> datetime:
        """Step the clock to `after` seconds past the next multiple of `every` seconds (a slot
        of a `* * * * *` routine when every = 60); returns that slot."""
        now = self.now()
        epoch = int(now.timestamp())
        slot = datetime.fromtimestamp((epoch // every + 1) * every, UTC)
        self.step(slot + timedelta(seconds=after) - now)
        return slot

    def workers(self) -> list[psutil.Process]:
        """The daemon's worker processes: its children running `python -m worker` (titled
        `vinos-routine worker NAME` once they are up), and its forkserver's (a forked worker
        is the forkserver's child)."""
        out = []
        try:
            children = psutil.Process(self.pid).children()
        except psutil.Error:
            return []
        for child in list(children):
            with contextlib.suppress(psutil.Error):
                if "vinos-routine forkserver" in " ".join(child.cmdline()):
                    children += child.children()
        for child in children:
            try:
                cmd = child.cmdline()
            except psutil.Error:
                continue
            line = " ".join(cmd)
            if "vinos-routine worker" in line or cmd[-2:] == ["-m", "worker"]:
                out.append(child)
        return out

    def cli(
        self, *args: str, timeout: float = 60, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`vinos-routine ARGS` with the daemon's environment (and `stdin` on its stdin)."""
        return subprocess.run(
            [sys.executable, "-m", "supervisor", *args],
            check=False,
            env=self.env,
            input="" if stdin is None else stdin,  # no input: an empty stdin, never the test's
            capture_output=True,
            text=True,
            timeout=timeout,
        )


_STARTED: list[DaemonProcess] = []  # every daemon a test started, for reap_daemons()


def reap_daemons() -> None:
    """Kill what a test left running (a failed test does not reach its `stop()`): each
    daemon it started, and that daemon's process tree."""
    for d in _STARTED:
        if d.proc is None or d.proc.poll() is not None:
            continue
        tree = workers_of(d.pid) + workers_of(d.proc.pid)
        for proc in [psutil.Process(d.proc.pid), *tree]:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        d.proc.wait(10)
    _STARTED.clear()
    close_gates()


def sid(instant: datetime) -> str:
    """A slot's id as the ledger stores it."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rows(name: str | None = None, limit: int = 1000) -> list[RunRow]:
    """Run rows, oldest first."""
    with Ledger(paths().ledger) as ledger:
        return sorted(ledger.history(name, limit), key=lambda r: r.id)


def state(name: str) -> RoutineState:
    with Ledger(paths().ledger) as ledger:
        return ledger.state(name)


def final(name: str) -> list[RunRow]:
    """Run rows of `name` that have their final status, oldest first."""
    return [r for r in rows(name) if r.status not in ("queued", "running")]


def gated(name: str, body: str = "echo released") -> str:
    """A command that notes it started (a line in its gate's `entered`), waits until the test
    creates `go` there, then runs `body`. The gate is outside the workspace, which is an
    overlay while the command runs (tests/supervisor/gates.py): the routine shows it to the
    command with `extra=gate_home(name)`."""
    d = gate(name)
    return f"echo in >> {d}/entered; while [ ! -e {d}/go ]; do sleep 0.05; done; {body}"


def entered(name: str) -> int:
    """How many runs of a gated routine have started their command."""
    return len(channel(gate(name) / "entered").lines())


def release(name: str) -> None:
    (gate(name) / "go").touch()


def hold(name: str) -> None:
    (gate(name) / "go").unlink(missing_ok=True)


def fake_notify_send(tmp: Path, *, choose: str | None = None) -> tuple[Path, Path]:
    """A real `notify-send` stand-in (a shell script, first on PATH) that appends its argv to
    a file, one argument a line and `<end>` after each call. Returns (bin dir, record file).
    `choose`: it takes actions (its --help says --action, as libnotify >= 0.7.10's does) and,
    with --wait, prints that action as if the person clicked it; else it takes none."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    record = tmp / "notify-send.calls"
    script = bin_dir / "notify-send"
    helps = "  -A, --action=[NAME=]Text...  Specifies the actions to display" if choose else ""
    chosen = f'case " $* " in *" --wait "*) echo {choose};; esac\n' if choose else ""
    script.write_text(
        f'#!/bin/sh\nif [ "$1" = --help ]; then echo "Usage: notify-send"; echo "{helps}"; '
        "exit 0; fi\n"
        f'for a in "$@"; do printf \'%s\\n\' "$a"; done >> {record}\n'
        f"echo '<end>' >> {record}\n{chosen}"
    )
    script.chmod(0o755)
    return bin_dir, record


def notifications(record: Path) -> list[list[str]]:
    """The argv of each notify-send call recorded by fake_notify_send."""
    try:
        text = record.read_text()
    except FileNotFoundError:
        return []
    calls: list[Any] = []
    cur: list[Any] = []
    for line in text.splitlines():
        if line == "<end>":
            calls.append(cur)
            cur = []
        else:
            cur.append(line)
    return calls


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
        children: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
        return children
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


class Sampler:
    """Counts a daemon's workers every `interval` seconds on a thread, while in a `with`."""

    def __init__(self, d: DaemonProcess, interval: float = 0.01) -> None:
        self.d = d
        self.interval = interval
        self.counts: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.counts.append(len(self.d.workers()))
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
