"""Escape suite, resources: a fork bomb, an 8 GB allocation, filling /tmp or a file, too many
open files. Each is stopped by a limit, quickly, and the host stays usable."""

from __future__ import annotations

import subprocess
import threading

from sandbox import Limits, ShellResult
from tests.sandbox.sandbox_testkit import Box, processes_with, python_in_sandbox, sleep_marker

MiB = 1024 * 1024


def test_fork_bomb_is_contained_and_the_host_stays_usable(box: Box, no_leftovers: None) -> None:
    results: list[ShellResult] = []
    # The classic bomb, made to wait so the shell does not simply exit under it.
    bomb = threading.Thread(
        target=lambda: results.append(box.run("bomb() { bomb | bomb & wait; }; bomb", timeout=3))
    )
    bomb.start()
    try:
        # The host can still start processes while it rages (RLIMIT_NPROC is counted in the
        # sandbox's own user namespace, so the user's other processes are untouched).
        for _ in range(3):
            assert subprocess.run(["true"], check=False).returncode == 0
    finally:
        bomb.join(60)
    assert not bomb.is_alive()
    (r,) = results
    # Ended by the runner: at the timeout, or when its fork errors filled the stderr cap.
    assert r.exit_code is None and (r.timed_out or r.stderr_truncated)
    assert "fork: retry: Resource temporarily unavailable" in r.stderr


def test_processes_stop_at_the_limit(box: Box, no_leftovers: None) -> None:
    code = """
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        print(n, exc.errno)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
"""
    r = box.run(python_in_sandbox(code), limits=Limits(processes=40))
    count, err = r.stdout.split()
    assert err == "11"  # EAGAIN
    assert 30 <= int(count) < 40  # the shell, python and bwrap's init count too
    assert r.exit_code == 0  # and the sleeping children went with the sandbox


def test_allocating_8_gb_fails(box: Box) -> None:
    r = box.run(python_in_sandbox("b = bytearray(8 << 30); print('ALLOCATED', len(b))"))
    assert "ALLOCATED" not in r.stdout
    assert "MemoryError" in r.stderr
    assert r.exit_code == 1


def test_a_file_stops_at_64_mb(box: Box) -> None:
    r = box.run("head -c 100M /dev/zero > big; echo rc=$?")
    # The scratch dir is an overlay (sandbox/overlay.py): past RLIMIT_FSIZE its write fails
    # with EFBIG rather than raising SIGXFSZ; on a plain bind (the poll's fallback) SIGXFSZ.
    assert r.stdout in (f"rc={128 + 25}\n", "rc=1\n"), r
    assert r.stdout == f"rc={128 + 25}\n" or "File too large" in r.stderr
    assert (box.scratch / "big").stat().st_size == 64 * MiB


def test_filling_tmp_stops_at_its_size(box: Box) -> None:
    r = box.run(
        "head -c 40M /dev/zero > /tmp/a; head -c 40M /dev/zero > /tmp/b; echo rc=$?;"
        " cat /tmp/a /tmp/b | wc -c"
    )
    rc, written = r.stdout.split()
    assert rc == "rc=1"
    assert "No space left on device" in r.stderr
    assert 40 * MiB < int(written) <= 64 * MiB


def test_open_files_stop_at_256(box: Box) -> None:
    code = """
import os
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    print(len(fds) + 3, exc.errno)
"""
    r = box.run(python_in_sandbox(code))
    assert r.stdout.split() == ["256", "24"]  # EMFILE


def test_limits_cannot_be_raised_and_no_core_dumps(box: Box) -> None:
    r = box.run(
        "ulimit -u 100000 && echo RAISED-U; ulimit -n 4096 && echo RAISED-N;"
        " ulimit -v unlimited && echo RAISED-V; ulimit -c unlimited && echo RAISED-C; ulimit -c"
    )
    assert "RAISED" not in r.stdout
    assert r.stdout.strip() == "0"


def test_the_runner_leaves_nothing_behind(box: Box, no_leftovers: None) -> None:
    marker = sleep_marker(4242)
    box.run(f"for i in 1 2 3; do sleep {marker} & done; echo started")
    assert processes_with(marker) == []
