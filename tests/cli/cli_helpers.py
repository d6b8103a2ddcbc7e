"""Driving the real CLI as a user would: its entry point run in-process (inprocess.py) or
`python -m supervisor …` as a subprocess (`Cli.spawn`), with the
test's VINOS_HOME (tests/conftest.py), a bin/ of fake programs first on PATH, and a time zone in
which it is about noon now, so "today" cannot roll over while a test runs; and on a
pseudo-terminal where a person would be at one."""

from __future__ import annotations

import errno
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from routines.ledger import Ledger
from tests.cli.inprocess import run_in_process

REPO = Path(__file__).resolve().parents[2]

AGENT = """\
[routine]
description = "{description}"

[schedule]
cron = "{cron}"
timezone = "{zone}"

[agent]
route = "anthropic"
system = "Write the brief."

[output]
open_on_login = {on_login}

[budget]
max_dollars_per_day = {cap}
"""

COMMAND = """\
[routine]
kind = "command"
description = "{description}"

[schedule]
cron = "{cron}"
timezone = "{zone}"

[command]
run = "{run}"

[output]
notify = {notify}
open_on_login = {on_login}
"""


def noon_zone(now: datetime | None = None) -> str:
    """An Etc/GMT±N zone in which the local time now is between 12:00 and 13:00."""
    hour = (now or datetime.now(UTC)).hour
    offset = 12 - hour  # hours east of UTC; from +12 to -11, all of which exist
    if offset == 0:
        return "Etc/GMT"
    # POSIX sign: Etc/GMT-5 is five hours *east* of UTC.
    return f"Etc/GMT{'-' if offset > 0 else '+'}{abs(offset)}"


@dataclass
class Cli:
    home: Path
    system: Path
    runtime: Path
    bin: Path
    zone: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def routines(self) -> Path:
        return self.home / "routines"

    @property
    def state(self) -> Path:
        return self.routines / "state"

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "supervisor", *args]

    def environ(self, extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
        env = dict(self.env)
        for key, value in (extra or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def __call__(
        self,
        *args: str,
        input: str | None = None,
        env: Mapping[str, str | None] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the CLI's entry point in this process (inprocess.py), with stdin/stdout/stderr
        as files (not a terminal): what `spawn` returns, without an interpreter's start."""
        return run_in_process(args, env=self.environ(env), cwd=str(self.home), input=input or "")

    def spawn(
        self,
        *args: str,
        input: str | None = None,
        env: Mapping[str, str | None] | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run `python -m supervisor` as a subprocess with stdin/stdout/stderr as pipes (not a
        terminal): for what needs a process of its own (the entry point, a signal, a race)."""
        return subprocess.run(
            self.argv(*args),
            input=input if input is not None else "",
            check=False,
            capture_output=True,
            text=True,
            env=self.environ(env),
            cwd=self.home,
            timeout=timeout,
        )

    def write(self, name: str, text: str, system: bool = False) -> Path:
        path = (self.system if system else self.routines) / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        return path

    def agent(
        self,
        name: str,
        *,
        cron: str = "0 6 * * *",
        cap: float = 0.5,
        on_login: bool = False,
        description: str = "",
        system: bool = False,
    ) -> Path:
        text = AGENT.format(
            description=description or f"the {name} routine",
            cron=cron,
            zone=self.zone,
            cap=cap,
            on_login=str(on_login).lower(),
        )
        return self.write(name, text, system)

    def command(
        self,
        name: str,
        run: str,
        *,
        cron: str = "0 6 * * *",
        notify: bool = False,
        on_login: bool = False,
    ) -> Path:
        text = COMMAND.format(
            description=f"the {name} routine",
            cron=cron,
            zone=self.zone,
            run=run,
            notify=str(notify).lower(),
            on_login=str(on_login).lower(),
        )
        return self.write(name, text)

    def ledger(self) -> Ledger:
        return Ledger(self.state / "ledger.db")

    def fake(self, name: str, script: str) -> Path:
        """A program in bin/ (first on PATH): a real executable the CLI runs."""
        path = self.bin / name
        path.write_text(script, encoding="utf-8")
        path.chmod(0o755)
        return path

    def recorder(self, name: str) -> Path:
        """A fake `name` that appends its argv, one JSON list a line, to bin/NAME.calls."""
        calls = self.bin / f"{name}.calls"
        self.fake(
            name,
            f"#!{sys.executable}\nimport json, sys\n"
            f"with open({str(calls)!r}, 'a') as f:\n"
            "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n",
        )
        return calls


def make_cli(vinos_env: Path, tmp_path: Path) -> Cli:
    """A Cli for the test's VINOS_HOME, its fakes in tmp_path/bin."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    zone = noon_zone()
    env = dict(os.environ)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        TZ=zone,
        PYTHONPATH=str(REPO),
        LANG="C.UTF-8",
        PYTHONIOENCODING="utf-8",
    )
    for var in ("NO_COLOR", "EDITOR", "VISUAL", "PAGER", "ANTHROPIC_API_KEY"):
        env.pop(var, None)
    return Cli(
        home=vinos_env,
        system=Path(os.environ["VINOS_SYSTEM_DIR"]),
        runtime=Path(os.environ["XDG_RUNTIME_DIR"]),
        bin=bin_dir,
        zone=zone,
        env=env,
    )


@dataclass
class PtyRun:
    """A CLI process on a pseudo-terminal: stdin and stdout are a terminal, as for a person."""

    pid: int
    fd: int
    output: bytearray = field(default_factory=bytearray)
    status: int | None = None

    def read_until(self, marker: str, limit: float = 60) -> str:
        """Read until `marker` shows up (a hang guard, not a timing assertion)."""
        deadline = time.monotonic() + limit
        while marker.encode() not in self.output:
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"no {marker!r} on the terminal; it showed:\n{self.text}")
            ready, _, _ = select.select([self.fd], [], [], 0.5)
            if ready and not self._read():
                pytest.fail(f"the process ended before {marker!r}; it showed:\n{self.text}")
        return self.text

    def _read(self) -> bool:
        try:
            data = os.read(self.fd, 65536)
        except OSError as exc:
            if exc.errno == errno.EIO:  # the child closed the terminal
                return False
            raise
        self.output += data
        return bool(data)

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait(self, limit: float = 60) -> int:
        deadline = time.monotonic() + limit
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready and not self._read():
                break
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"the process did not end; it showed:\n{self.text}")
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        self.status = os.waitstatus_to_exitcode(status)
        return self.status

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", "replace").replace("\r\n", "\n")


def start_pty(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> PtyRun:
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once, nothing else
        try:
            os.chdir(cwd)
            os.execve(argv[0], list(argv), dict(env))
        finally:
            os._exit(127)
    return PtyRun(pid, fd)


OnPty = Callable[..., PtyRun]
