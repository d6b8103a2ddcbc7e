"""Shared fixtures. Every test gets its own VINOS_HOME and VINOS_SYSTEM_DIR under tmp_path."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from tests.dashboard.squatkit import SecondUser, Squat

# The tree may be read-only for the test user (scripts/dev-pytest.sh): keep no example database.
settings.register_profile("vinos", database=None, deadline=None)
settings.load_profile("vinos")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def vinos_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Isolate each test: its own VINOS_HOME, system dir and XDG_RUNTIME_DIR."""
    home = tmp_path / "vinos-home"
    system = tmp_path / "vinos-system"
    for d in (home / "routines", system):
        d.mkdir(parents=True)
    # Not under tmp_path: the control socket's path must stay within the 107 bytes of a Unix
    # socket address, and tmp_path is long (pytest-xdist adds a popen-gwN level to it).
    runtime = short_tmp_dir("vinos-run-")
    monkeypatch.setenv("VINOS_HOME", str(home))
    monkeypatch.setenv("VINOS_SYSTEM_DIR", str(system))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("VINOS_ROUTINE_DEBUG", raising=False)
    # A daemon's forkserver costs ~2 s of CPU to start when it imports the SDKs (a daemon with
    # an agent routine; ~0.25 s for one with commands only): off for the
    # in-process daemons and CLI runs of most tests, through the one debug setting
    # (supervisor/timings.py). daemonkit's DaemonProcess, a real daemon, turns it on.
    monkeypatch.setenv("VINOS_DEBUG_TIMINGS", '{"forkserver": false}')
    yield home
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.hookimpl(trylast=True)  # after pytest's own order (by shared fixtures), kept in each part
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked slow first, each part in its own order: under `--dist loadgroup` a
    worker takes the next test in this order (the xdist groups, the largest, go first anyway),
    so the longest tests start early, side by side, and the quick ones fill in around them
    rather than one 30 s test starting last while the other workers are done."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def short_tmp_dir(prefix: str) -> Path:
    """A new private (0700) directory directly under the system's temp dir."""
    return Path(tempfile.mkdtemp(prefix=prefix))


@pytest.fixture
def not_root() -> None:
    """Fail loudly (never skip) when a test that runs a sandbox or the daemon runs as root."""
    if os.geteuid() == 0:
        pytest.fail(
            "this test runs a sandbox or the daemon and must run unprivileged: "
            "use `make test` or scripts/dev-pytest.sh"
        )


# Another local user, played by a real one (scripts/second-user.sh, tests/helpers/squatter.py):
# the dashboard's and the worker's squatting chains.
@pytest.fixture
def second_user() -> SecondUser:
    from tests.dashboard.squatkit import SecondUser

    return SecondUser.from_env()


@pytest.fixture
def squat(second_user: SecondUser) -> Iterator[Squat]:
    """The second user listening on a free port of 127.0.0.1."""
    s = second_user.listen()
    yield s
    s.close()
