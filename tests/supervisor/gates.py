"""Live channels between a test and a command routine's running command, outside its workspace.

A command routine's workspace is an overlay while its command runs (sandbox/runner.py): what
the command writes there reaches the real folder when it ends, and what the test writes there
meanwhile may never show. So the test and the command meet in a gate: a folder of the test
user's home the routine declares readable (`home = [...]`, bound read-only at the same path),

- holding files the test makes and removes (`go`, …), which the command sees as they change;
- and FIFOs (`entered`, a log) the command appends lines to: writing a FIFO needs no write
  access to the mount, and the test holds each one open for reading and writing, so a writer
  never blocks and what it wrote is read the moment it wrote it, from a run that is killed
  as well as from one that ends.

Each test has its own gates (keyed by its VINOS_HOME), removed with its daemons
(daemonkit.reap_daemons).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from pathlib import Path

ROOT = "vinos-gates"  # under the test user's home: `home` entries are `~/...`
_PIPE_BYTES = 1 << 20  # room for every line of the longest test, read or not


class Channel:
    """A FIFO the test holds open: `lines()` is everything written to it so far."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path, 0o600)
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):  # the user's pipe pages may be spent: 64 KiB then
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        self._read = b""

    def lines(self) -> list[str]:
        while True:
            try:
                chunk = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._read += chunk
        done = self._read[: self._read.rfind(b"\n") + 1]  # a line is written whole (< PIPE_BUF)
        return done.decode().splitlines()

    def close(self) -> None:
        os.close(self._fd)


_CHANNELS: dict[Path, Channel] = {}
_MADE: set[Path] = set()


def _key() -> str:
    return hashlib.sha256(os.environ["VINOS_HOME"].encode()).hexdigest()[:16]


def gate_entry(name: str) -> str:
    """The gate of routine `name` as a `home` entry: `~/vinos-gates/KEY/NAME`."""
    return f"~/{ROOT}/{_key()}/{name}"


def gate_home(name: str) -> str:
    """The line of a routine's [command] that shows it its gate."""
    return f'home = ["{gate_entry(name)}"]\n'


def gates() -> Path:
    """The folder of this test's gates: a command line that names it is a gated command's."""
    return Path.home() / ROOT / _key()


def gate(name: str) -> Path:
    """The gate folder of routine `name`, made, with its `entered` channel open."""
    top = gates()
    d = top / name
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    _MADE.add(top)
    channel(d / "entered")
    return d


def channel(path: Path) -> Channel:
    """The channel at `path`, made and opened on first use."""
    if path not in _CHANNELS:
        _CHANNELS[path] = Channel(path)
    return _CHANNELS[path]


def close_gates() -> None:
    """Close every channel and remove every gate this process made."""
    for ch in _CHANNELS.values():
        ch.close()
    _CHANNELS.clear()
    for top in _MADE:
        shutil.rmtree(top, ignore_errors=True)
        with contextlib.suppress(OSError):  # another test's gates may be there still
            top.parent.rmdir()
    _MADE.clear()
