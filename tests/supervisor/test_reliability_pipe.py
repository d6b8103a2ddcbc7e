"""`vinos-routine run NAME | head -3`: a reader that leaves ends the streaming quietly; the run goes
on to its end and is recorded as it ended.

Before: with no daemon, the in-process run was recorded `failed` ("supervisor error:
BrokenPipeError") or left `queued` with exit status 120 (the interpreter's last flush
failing). The pipe here is a real pipe whose read end the test closes after the first lines,
while the routine waits at a gate, so every later line meets EPIPE.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    entered,
    final,
    gated,
    release,
    wait_for,
    write_routine,
)
from tests.supervisor.gates import gate_home

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


@pytest.mark.parametrize("with_daemon", [False, True], ids=["in-process", "through-daemon"])
def test_a_closed_stdout_ends_the_stream_not_the_run(
    tmp_path: Path, not_root: None, with_daemon: bool
) -> None:
    write_routine(
        "piped",
        command_routine(gated("piped", "seq 1 50"), enabled=False, extra=gate_home("piped")),
    )
    d = DaemonProcess(tmp_path)
    if with_daemon:
        d.start()
    cli = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "run", "piped"],
        env=d.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert cli.stdout is not None and cli.stderr is not None
    first = cli.stdout.readline()  # `head -1`: one line, then the reader is gone
    assert first
    cli.stdout.close()
    wait_for(lambda: entered("piped") == 1, what="the command to start")
    release("piped")  # the rest of the stream (running, the tool result, ok) meets EPIPE
    assert cli.wait(60) == 0
    err = cli.stderr.read().decode()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    [row] = wait_for(lambda: final("piped"), what="the run's final row")
    assert (row.status, row.detail) == ("ok", "1")
    assert row.output_file and Path(row.output_file).read_text().endswith("49\n50\n")
    if with_daemon:
        assert d.stop() == 0
