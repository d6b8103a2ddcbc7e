"""Routine files that are not a page of TOML, with the real daemon:

- a file over 256 KB (here a sparse 300 MB file, through a symlink) is refused before it is
  read, with its size in the message: the daemon's peak memory stays small;
- a FIFO is refused without being read: neither the daemon's scan nor `validate` hangs;
- a loaded routine's file replaced by a symlink to /dev/zero keeps its last good version
  running, and `list` and `status` say so, as after any other bad edit.

Before: the big file was read whole (1 GiB took the daemon to 2.1 GB), `validate` of a FIFO
blocked forever, and a routine turned into a link to /dev/zero vanished from `list` and
`status` and stopped running.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from routines.spec.paths import paths
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    final,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

BIG = 300 * 1024 * 1024


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_an_oversized_routine_file_is_refused_before_it_is_read(
    tmp_path: Path, not_root: None
) -> None:
    target = tmp_path / "huge.toml"
    with open(target, "wb") as f:
        f.truncate(BIG)  # sparse: costs no disk, reads as 300 MB of NULs
    (paths().routines_dir / "huge.toml").symlink_to(target)
    write_routine("fine", command_routine("true", enabled=False))
    d = DaemonProcess(tmp_path).start()
    status = d.request("status")
    assert status["invalid"] == ["huge"] and status["routines"] == 2
    assert peak_rss_kib(d.pid) < 150 * 1024  # it never held the file
    want = (
        f"huge.toml: the file is {BIG:,} bytes; a routine file may be at most 262,144 bytes "
        "(256 KB), so it was not read"
    )
    listed = d.cli("list")
    assert listed.returncode == 0 and want in listed.stdout, listed.stdout + listed.stderr
    checked = d.cli("validate", str(paths().routines_dir / "huge.toml"))
    assert checked.returncode == 1 and want in checked.stdout
    assert d.stop() == 0


def test_a_fifo_never_hangs_the_scan_or_validate(tmp_path: Path, not_root: None) -> None:
    fifo = paths().routines_dir / "pipe.toml"
    os.mkfifo(fifo)  # nobody ever writes to it: a blocking read would wait forever
    write_routine("fine", command_routine("true", enabled=False))
    d = DaemonProcess(tmp_path).start()
    assert d.request("reload")["invalid"] == ["pipe"]
    checked = d.cli("validate", str(fifo), timeout=30)
    assert checked.returncode == 1
    assert checked.stdout.strip() == (
        f"{fifo}: expected a regular file, found a FIFO; nothing was read"
    )
    assert d.request("ping")["pid"] == d.pid
    assert d.stop() == 0


def test_a_routine_replaced_by_a_link_to_dev_zero_keeps_its_last_good_version(
    tmp_path: Path, not_root: None
) -> None:
    path = write_routine("ticker", command_routine("echo tick"))
    d = DaemonProcess(tmp_path).start()
    d.to_slot()
    wait_for(lambda: len(final("ticker")) == 1, what="the first run")

    link = path.with_name(".ticker.link")
    link.symlink_to("/dev/zero")
    link.replace(path)  # as an editor saves: one rename
    reloaded = d.request("reload")
    assert reloaded["invalid"] == ["ticker"] and reloaded["routines"] == 1
    status = d.request("status")
    assert status["stale"] == ["ticker"] and status["enabled"] == 1
    problem = f"{path}: expected a regular file, found a character device; nothing was read"
    listed = d.cli("list")
    assert "ticker" in listed.stdout
    assert "(the daemon still runs its last good version)" in listed.stdout
    assert problem in listed.stdout
    shown = d.cli("status").stdout
    assert "invalid  ticker; its last good version still runs" in shown, shown

    d.step(timedelta(seconds=60))  # the next slot: the last good version runs it
    [first, second] = wait_for(lambda: final("ticker")[1:] and final("ticker"), what="run 2")
    assert (first.status, second.status, second.detail) == ("ok", "ok", "tick")
    assert d.stop() == 0


def test_a_fifo_as_config_toml_never_hangs_a_reload(tmp_path: Path, not_root: None) -> None:
    write_routine("fine", command_routine("true", enabled=False))
    d = DaemonProcess(tmp_path).start()
    os.mkfifo(paths().config_file)
    with d.client() as client:
        client.sock.settimeout(30)  # a reload that blocks on the FIFO fails the test here
        assert client.request("reload")["routines"] == 1
    assert "config.toml: expected a regular file, found a FIFO; nothing was read" in d.log()
    assert d.request("ping")["pid"] == d.pid
    assert d.stop() == 0
