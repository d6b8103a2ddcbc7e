"""Fixtures for the sandbox tests; the helpers live in sandbox_testkit.py."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sandbox import overlay
from tests.sandbox.sandbox_testkit import Box, make_box
from tests.worker.forked import forkserver_pid


@pytest.fixture
def box(tmp_path: Path, not_root: None) -> Box:
    """A planted home (see sandbox_testkit.make_box); fails the test when run as root."""
    return make_box(tmp_path)


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """After the test, no child process of ours is left (the sandbox ended everything) but
    the overlay maker, one per process from its first overlaid call on, which holds nothing
    of a call once it has answered (sandbox/overlayholder.py), and the worker tests'
    forkserver (tests/worker/forked.py) when a worker test ran first in this process, with
    the overlay maker it shares with its runs (sandbox/overlay.py share_maker); their
    children are counted."""
    yield
    maker = overlay._maker.proc
    server = forkserver_pid()
    kept = {maker.pid if maker is not None and maker.poll() is None else None, server}
    if server is not None:
        with contextlib.suppress(psutil.Error):
            kept |= {
                p.pid for p in psutil.Process(server).children() if overlay.HOLDER in p.cmdline()
            }
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in kept]
    assert not left, f"processes left behind: {[p.cmdline() for p in left]}"


@pytest.fixture
def polling(monkeypatch: pytest.MonkeyPatch) -> None:
    """The quota kept by the poll and RLIMIT_FSIZE, as where sandbox/overlay.py cannot build
    its overlays (Linux < 6.6: no user xattrs on tmpfs). The probe's cached answer is set to
    that: nothing else can stand in for an older kernel here."""
    monkeypatch.setitem(overlay._available, sys.executable, "the test asked for the poll")
