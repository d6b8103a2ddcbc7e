"""Where the suite's CPU goes: `pytest -p tests.cpuprofile` with VINOS_CPU_PROFILE=DIR writes,
per test, its wall time and the CPU of its pytest process and of every child process reaped
during it (a daemon, a sandbox, a pip install), as JSON lines in DIR/<worker>.jsonl.

Wall time alone misleads on two cores: a test that waits 40 s on a lease costs the suite a
worker slot, while one that compiles for 10 s costs a core every other worker wanted. A session
fixture's cost lands on the first test that asks for it. `scripts/cpu-profile.py DIR` sums them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Times setup, call and teardown together: a daemon started by a fixture is reaped (and
    its CPU counted) in the teardown."""
    out = os.environ.get("VINOS_CPU_PROFILE")
    if not out:
        yield
        return
    before, wall = os.times(), time.monotonic()
    yield
    after = os.times()
    row = {
        "test": item.nodeid,
        "wall": round(time.monotonic() - wall, 3),
        "cpu": round(after.user - before.user + after.system - before.system, 3),
        "children": round(
            after.children_user
            - before.children_user
            + after.children_system
            - before.children_system,
            3,
        ),
    }
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with (Path(out) / f"{worker}.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
