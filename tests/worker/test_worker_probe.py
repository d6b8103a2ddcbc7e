"""The sandbox probe, run once by the daemon (supervisor/engine/probecache.py) and handed to each
worker in its job (ipc Job.sandbox_probe), which takes it as its own (worker/main.py): a real
probe in a child Python, real workers running a command routine."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from msgspec.structs import replace

from ipc import Job, SandboxProbe
from supervisor.engine.probecache import ProbeCache
from tests.worker.worker_harness import command_toml, make_job, run_worker

BWRAP = "/usr/bin/bwrap"


def _probed(bwrap: str) -> SandboxProbe | None:
    async def go() -> SandboxProbe | None:
        cache = ProbeCache()
        assert cache.get(bwrap) is None  # not yet: the probe starts
        for _ in range(600):  # up to a minute, in tenths
            await asyncio.sleep(0.1)
            if (found := cache.get(bwrap)) is not None:
                return found
        return None

    return asyncio.run(go())


def test_the_daemon_probes_once_and_keeps_the_answer(not_root: None) -> None:
    assert _probed(BWRAP) == SandboxProbe(BWRAP, ok=True)


def test_a_bwrap_that_is_refused_is_cached_with_why(tmp_path: Path, not_root: None) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text('#!/bin/sh\nexec "$@"\n')
    fake.chmod(0o755 | stat.S_IXUSR)
    found = _probed(str(fake))
    assert found is not None and found.ok is False
    assert found.reason and found.fix


def _command_job(home: Path) -> Job:
    job = make_job(home, command_toml("echo from the sandbox"), name="disk")
    return replace(job, sandbox={"bwrap": BWRAP})


def test_the_worker_takes_the_daemons_probe_instead_of_its_own(home: Path, not_root: None) -> None:
    job = _command_job(home)
    refused = SandboxProbe(BWRAP, ok=False, reason="the daemon's probe said no", fix="x")
    r = run_worker(replace(job, sandbox_probe=refused))
    assert r.result.status == "failed"
    assert "the daemon's probe said no" in (r.result.error or "")
    fine = SandboxProbe(BWRAP, ok=True)
    assert run_worker(replace(job, sandbox_probe=fine)).result.status == "ok"


def test_a_probe_for_another_bwrap_is_not_taken(home: Path, not_root: None) -> None:
    job = _command_job(home)
    other = SandboxProbe("/opt/other/bwrap", ok=False, reason="not this one", fix="x")
    r = run_worker(replace(job, sandbox_probe=other))
    assert r.result.status == "ok" and os.path.exists(BWRAP)
