"""A run that ends by its time limit is recorded `timeout`, not `failed`, and still counts as a
strike, with a real daemon and a real worker: a command in the real sandbox, and an agent against
the fake Ollama server (a real HTTP server on 127.0.0.1) that answers too slowly.

Before: a command with `timeout_sec = 3` was recorded `failed` ("timed out after 2 s": the
worker cut the command short by its own deadline margin), and an agent whose model call ran
into run_timeout_sec was `failed` too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes import FakeOllama
from tests.fakes import ollama_replies as O
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    final,
    state,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

TIMEOUT = 3


def test_a_command_past_its_timeout_sec_is_recorded_timeout(tmp_path: Path, not_root: None) -> None:
    write_routine("slowpoke", command_routine("sleep 60", enabled=False, timeout=TIMEOUT))
    d = DaemonProcess(tmp_path).start()
    out = d.cli("run", "slowpoke")
    assert out.returncode == 1, out.stdout + out.stderr
    [row] = final("slowpoke")
    assert row.status == "timeout"
    assert row.detail == f"the command timed out after {TIMEOUT} s (timeout_sec)"
    # The command had its whole timeout_sec: the run cannot have been shorter.
    assert row.duration_sec is not None and row.duration_sec >= TIMEOUT
    assert state("slowpoke").failure_streak == 1  # a timeout is a strike
    assert out.stdout.splitlines()[-2:] == [
        "timeout · $0.0000",
        f"the command timed out after {TIMEOUT} s (timeout_sec)",
    ]
    assert d.stop() == 0


def test_an_agent_out_of_run_timeout_sec_is_recorded_timeout(
    tmp_path: Path, not_root: None
) -> None:
    with FakeOllama([O.text("too late", delay=60)]) as ollama:
        write_routine(
            "ponder",
            '[routine]\nenabled = false\n[schedule]\ncron = "0 6 * * *"\ntimezone = "UTC"\n'
            '[agent]\nroute = "ollama"\nlocal_model = "llama3.2:3b"\n'
            # 15 s: the worker's start (slow beside a CPU hog) leaves the limit to run out
            # while the model thinks, which this test is about, and not before the request.
            'system = "Think."\ntools = []\nrun_timeout_sec = 15\n',
        )
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        d.cli("run", "ponder", "--detach")
        [row] = wait_for(lambda: final("ponder"), what="the run to end")
        assert row.status == "timeout"
        assert (row.detail or "").startswith(
            "the run reached its time limit (run_timeout_sec = 15): "
        )
        assert state("ponder").failure_streak == 1
        assert d.stop() == 0
