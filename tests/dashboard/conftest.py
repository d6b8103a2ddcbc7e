"""Fixtures for the dashboard tests: a real daemon and the real dashboard process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboard.dashkit import Dashboard
from tests.supervisor.daemonkit import reap_daemons


@pytest.fixture(autouse=True)
def no_daemon_left() -> Iterator[None]:
    yield
    reap_daemons()


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    d = Dashboard(tmp_path / "dashboard.log").start()
    yield d
    d.stop()
