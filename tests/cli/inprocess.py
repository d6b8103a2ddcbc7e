"""Running the CLI's entry point in the test's own process, as `python -m supervisor ARGS`
would run it: the same `main` (supervisor/__main__.py calls it), with the process state a fresh
interpreter would have and nothing left behind for the next test.

A subprocess per command costs an interpreter start and the imports (about 0.2 s of CPU each,
hundreds of times in tests/cli); in-process it is the command's own work. What a separate
process gives for free is done here by hand, around each call:
- the environment (`os.environ`, and `time.tzset()` for TZ) and the working directory;
- fds 0, 1 and 2 are real files (stdin holds the input, stdout and stderr are read back), so a
  program the command starts (a pager, an editor, a sandboxed command) inherits them as it
  would the pipes of a subprocess, and none of them is a terminal;
- the umask (main sets 0077), the signal handlers, sys.argv;
- logging as an unconfigured interpreter has it: the root logger without handlers at WARNING, so
  a warning goes to stderr through logging's last resort (pytest's capturing handlers would
  swallow it, and a test that a secret or a traceback is not printed would pass unseen), and
  the warnings filters an interpreter starts with, printing to stderr;
- the per-process caches whose answer depends on the environment (the machine's time zone
  from TZ; the sandbox probe's warn-once flag);
- an exception that escapes `main` is a traceback on stderr and exit status 1, and
  `sys.exit` is its status, as for an interpreter.

What needs a process of its own (the console script and `-m` entry, a signal, a terminal,
two commands racing, `sandbox`, which execs its runner) stays a subprocess: `Cli.spawn`
(cli_helpers.py). A command that would exec here would replace the test's process, so
`os.execve` fails the test instead, naming `spawn`."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from typing import IO, Any, NoReturn

import pytest

from routines.schedule import tz
from supervisor.cli.thinclient import main  # the console script's and `python -m supervisor`'s

__all__ = ["run_in_process"]

# The module, not the function `sandbox.probe` that the package exports under the same name.
_probe_module: Any = importlib.import_module("sandbox.probe")
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGCHLD)


class _Exec(BaseException):
    """Raised instead of exec'ing: escapes the command's own handlers, and the helper's."""


def _no_exec(path: Any, argv: Any, env: Any) -> NoReturn:
    raise _Exec(path)


def _reset_caches() -> None:
    tz.machine_timezone.cache_clear()  # reads TZ once per process
    _probe_module._warned = False  # "shell tools disabled" is logged once per process


@contextmanager
def _environment(env: Mapping[str, str], cwd: str) -> Iterator[None]:
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_umask = os.umask(0o077)
    saved_signals = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    saved_argv = sys.argv
    saved_execve = os.execve
    os.execve = _no_exec
    root = logging.getLogger()
    saved_logging = (root.handlers[:], root.level)
    root.handlers = []
    root.setLevel(logging.WARNING)
    os.environ.clear()
    os.environ.update(env)
    time.tzset()
    _reset_caches()
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        time.tzset()
        _reset_caches()
        os.umask(saved_umask)
        for sig, handler in saved_signals.items():
            signal.signal(sig, handler)
        sys.argv = saved_argv
        os.execve = saved_execve
        root.handlers, level = saved_logging
        root.setLevel(level)


@contextmanager
def _fds(stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes]) -> Iterator[None]:
    """fds 0-2 on the given files, and sys.stdin/stdout/stderr text streams over them (utf-8,
    as PYTHONIOENCODING=utf-8 makes them for the subprocess)."""
    files = (stdin, stdout, stderr)
    saved = [os.dup(fd) for fd in range(3)]
    streams = (sys.stdin, sys.stdout, sys.stderr)
    for fd, f in enumerate(files):
        os.dup2(f.fileno(), fd)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with suppress(OSError, ValueError):  # a closed stream, as at an interpreter's exit
                stream.flush()
        sys.stdin, sys.stdout, sys.stderr = streams
        for fd, old in enumerate(saved):
            os.dup2(old, fd)
            os.close(old)


def _show(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextmanager
def _warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        # An interpreter's filters without -W or PYTHONWARNINGS (the `warnings` defaults).
        warnings.resetwarnings()
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        for category in (
            DeprecationWarning,
            PendingDeprecationWarning,
            ImportWarning,
            ResourceWarning,
        ):
            warnings.simplefilter("ignore", category, append=True)
        warnings.showwarning = _show
        yield


def _status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)  # sys.exit("message"), as the interpreter prints it
    return 1


def _text(f: IO[bytes]) -> str:
    f.seek(0)
    # subprocess.run(text=True): the locale's encoding (utf-8 here), universal newlines.
    return f.read().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def run_in_process(
    args: Sequence[str], *, env: Mapping[str, str], cwd: str, input: str = ""
) -> subprocess.CompletedProcess[str]:
    """What `subprocess.run([python, -m, supervisor, *args], input=input, env=env, cwd=cwd,
    capture_output=True, text=True)` would return, run by this process."""
    with ExitStack() as stack:
        stdin, stdout, stderr = (stack.enter_context(tempfile.TemporaryFile()) for _ in range(3))
        stdin.write(input.encode("utf-8"))
        stdin.flush()
        stdin.seek(0)
        with _environment(env, cwd), _fds(stdin, stdout, stderr), _warnings():
            sys.argv = [sys.executable, *args]
            try:
                code = main()
            except SystemExit as exc:
                code = _status(exc)
            except _Exec as exc:
                pytest.fail(f"`{' '.join(args)}` execs {exc.args[0]}: run it with cli.spawn")
            except BaseException:  # what the interpreter does with an uncaught exception
                traceback.print_exc()
                code = 1
        return subprocess.CompletedProcess(
            [sys.executable, "-m", "supervisor", *args], code, _text(stdout), _text(stderr)
        )
