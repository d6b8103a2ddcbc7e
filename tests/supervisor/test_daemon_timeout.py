"""A run past its run_timeout_sec is ended with everything it started (SIGTERM, SIGKILL 5 s later,
status `timeout`), with a real daemon, a real worker and a command in the real sandbox.

The worker normally ends a command itself a little before the supervisor's deadline (its
own deadline keeps a margin). To test the supervisor's backstop, the worker is stopped with
SIGSTOP once its command runs: a wedged worker that can no longer end anything.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import psutil
import pytest

from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    entered,
    final,
    processes_with_cmdline,
    wait_for,
    write_routine,
)
from tests.supervisor.gates import gate, gate_home

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

TIMEOUT = 5


def sleeps(mark: str) -> list[str]:
    """The run's `sleep MARKn` processes still alive, by their argument."""
    out = []
    for proc in processes_with_cmdline(f"sleep {mark}"):
        try:
            cmd = proc.cmdline()
        except psutil.Error:
            continue
        if len(cmd) == 2 and cmd[0].endswith("sleep") and cmd[1].startswith(mark):
            out.append(cmd[1])
    return sorted(out)


def test_a_timeout_ends_the_whole_tree(tmp_path: Path, not_root: None) -> None:
    mark = f"1000.{random.randrange(10**6):06d}"
    state = gate("sprawl")  # its `entered` is read while the command runs (gates.py)
    command = (
        f"sleep {mark}1 & "  # a child in the command's process group
        f"setsid sleep {mark}2 & "  # a child in a session of its own
        f"( setsid sleep {mark}3 & ) ; "  # a double fork: orphaned, in its own session
        f"echo in >> {state}/entered; sleep {mark}4"  # and it never ends by itself
    )
    # Hourly: under load this test outlasts a minute, and a minutely routine's next slot was
    # then recorded `skipped` (the run still going) before the timeout's row.
    hourly = 'cron = "0 * * * *"'
    write_routine(
        "sprawl",
        command_routine(command, timeout=TIMEOUT, schedule=hourly, extra=gate_home("sprawl")),
    )
    d = DaemonProcess(tmp_path).start()
    d.to_slot(every=3600)
    wait_for(lambda: entered("sprawl") == 1, what="the command to start")
    everything = [f"{mark}{n}" for n in (1, 2, 3, 4)]
    wait_for(lambda: sleeps(mark) == everything, what="all four sleeps")
    [worker] = d.workers()
    os.kill(worker.pid, signal.SIGSTOP)  # wedged: its own timers cannot fire

    # The supervisor's deadline: SIGTERM to the worker's group and every descendant.
    wait_for(
        lambda: sleeps(mark) == [],
        timeout=TIMEOUT + 40,
        what="every process of the run to be ended",
    )
    assert worker.status() == psutil.STATUS_STOPPED  # its SIGTERM waits until it runs again
    os.kill(worker.pid, signal.SIGCONT)  # (spares the test the 5 s wait for SIGKILL)
    [row] = wait_for(lambda: final("sprawl"), what="the run to be recorded")
    assert (row.status, row.detail) == (
        "timeout",
        f"stopped after {TIMEOUT + 10}s ([command].timeout_sec = {TIMEOUT}, and the worker "
        "did not report)",
    )
    wait_for(lambda: not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE)
    assert d.workers() == []
    assert not processes_with_cmdline(str(state) + "/")  # nor the shell, nor bwrap
    assert d.request("ping")["pid"] == d.pid  # the daemon carries on
    assert d.stop() == 0
