"""Fixtures for the supervisor tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.supervisor.daemonkit import reap_daemons


@pytest.fixture(autouse=True)
def no_daemon_left() -> Iterator[None]:
    """A test that fails half-way leaves no daemon or worker running behind it."""
    yield
    reap_daemons()
