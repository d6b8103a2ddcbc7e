"""The user units: the socket listens on IPv4 loopback only, and the service, started with
that socket (LISTEN_FDS, through systemd-socket-activate, as the user manager does), serves
on it."""

from __future__ import annotations

import configparser
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.dashboard.dashkit import REPO, Dashboard

UNITS = REPO / "supervisor" / "units"


def unit(name: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNITS / name)
    return parser


def test_socket_is_loopback_only_and_the_service_runs_the_dashboard() -> None:
    sock = unit("vinos-routine-dashboard.socket")
    assert sock["Socket"]["ListenStream"] == "127.0.0.1:8742"
    service = unit("vinos-routine-dashboard.service")
    assert service["Service"]["ExecStart"] == "/usr/bin/vinos-routine dashboard --no-open"
    assert service["Unit"]["Requires"] == "vinos-routine-dashboard.socket"
    assert service["Install"]["Also"] == "vinos-routine-dashboard.socket"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_socket_activated_dashboard_serves_on_the_inherited_socket(tmp_path: Path) -> None:
    activate = shutil.which("systemd-socket-activate")
    if activate is None:
        pytest.fail("systemd-socket-activate is missing: run scripts/system-deps.sh as root")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # systemd-socket-activate gives the child only LISTEN_* and what -E names, as a unit's
    # Environment= would.
    keep = ("VINOS_HOME", "VINOS_SYSTEM_DIR", "XDG_RUNTIME_DIR", "PYTHONPATH", "HOME", "PATH")
    setenv = [f"-E{k}={env[k]}" for k in keep if k in env]
    log = open(tmp_path / "activate.log", "wb")  # noqa: SIM115 - the child holds it
    proc = subprocess.Popen(
        [
            activate,
            *setenv,
            "-l",
            f"127.0.0.1:{port}",
            sys.executable,
            "-m",
            "supervisor",
            "dashboard",
            "--no-open",
            "--port",
            "1",
        ],
        env=env,
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    dash = Dashboard(tmp_path / "unused.log")
    dash.port = port
    try:
        # The first connection starts the dashboard (and so creates the token): it is served
        # once the dashboard takes the socket over, refused for want of the token.
        deadline = time.monotonic() + 30
        while "Listening on" not in (tmp_path / "activate.log").read_text():
            assert time.monotonic() < deadline, "systemd-socket-activate did not listen"
            time.sleep(0.05)
        first = dash.get("/")
        assert first.status == 403, (tmp_path / "activate.log").read_text()
        dash.session = dash.exchange(dash.token)
        assert dash.get("/", cookie=True).status == 200
        assert "Routines" in dash.get("/", cookie=True).body
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
