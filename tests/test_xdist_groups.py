"""The suite's xdist groups hold: tests that share one user manager and one
~/.config/systemd/user (the "user-manager" group) must run on one worker. pytest 9.2 with
pytest-xdist 3.8 silently dropped the groups; this pins that they reach the node ids."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("xdist-group-check")


def test_a_grouped_test_carries_its_group_under_loadgroup(request: pytest.FixtureRequest) -> None:
    # A worker under `-n N --dist loadgroup` suffixes grouped node ids with @GROUP.
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under pytest-xdist --dist loadgroup (make test runs it so)")
    assert request.node.nodeid.endswith("@xdist-group-check"), request.node.nodeid
