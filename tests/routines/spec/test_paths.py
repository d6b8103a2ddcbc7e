"""Where the runtime dir is: $XDG_RUNTIME_DIR, else logind's /run/user/UID, else, with no login
session at all (a container, WSL), under VINOS_HOME, where the daemon started by hand can take
its lock (it could not: /run/user/UID did not exist and cannot be made by a user). The thin
client finds the same socket."""

from __future__ import annotations

from pathlib import Path

import pytest

from routines.spec.paths import paths, runtime_base
from supervisor.cli.thinclient import socket_path

HOME = Path("/home/ana/.vinos")


def test_the_runtime_base_is_xdg_then_loginds_then_vinos_home() -> None:
    assert runtime_base("/run/user/1000", 1000, HOME, lambda _: False) == Path("/run/user/1000")
    assert runtime_base(None, 1000, HOME, lambda p: p == "/run/user/1000") == Path("/run/user/1000")
    assert runtime_base("", 1000, HOME, lambda _: False) == HOME / "run"


def test_without_a_session_the_cli_and_the_thin_client_agree_on_the_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("VINOS_HOME", str(tmp_path / "vinos"))
    assert socket_path() == str(paths().control_socket)
    if not Path(f"/run/user/{__import__('os').getuid()}").is_dir():  # a container, as here
        assert paths().runtime_dir == tmp_path / "vinos/run/vinos-routine"
