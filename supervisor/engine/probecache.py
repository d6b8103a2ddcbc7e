"""The sandbox probe, run once per daemon start (per bwrap path) instead of once per worker.

Whether sandboxed shell calls can run here (sandbox/probe.py: bwrap present and trusted,
libseccomp, a real isolating sandbox) does not change from one run to the next, and finding
out costs a bwrap run (~90 ms) of every command routine's start. The daemon may not import
`sandbox` (its process keeps to the supervisor's modules), so the probe runs in a child
Python, as a worker would, and its answer goes into each Job (`sandbox_probe`); the worker
takes it as its own probe's result (tests/worker/test_worker_probe.py).

Until the first answer is in, a job carries none and its worker probes for itself, as before.
A probe that could not run at all is not cached: the next job asks again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys

from ipc import SandboxProbe

__all__ = ["PROBE_CODE", "ProbeCache"]

log = logging.getLogger("vinos.probe")

PROBE_CODE = (
    "import json, sys\n"
    "from sandbox.probe import probe\n"
    "r = probe(sys.argv[1])\n"
    "print(json.dumps({'ok': r.ok, 'reason': r.reason, 'fix': r.fix}))\n"
)
PROBE_TIMEOUT_SEC = 60.0


class ProbeCache:
    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self.results: dict[str, SandboxProbe] = {}
        self._running: dict[str, asyncio.Task[None]] = {}

    def get(self, bwrap: str) -> SandboxProbe | None:
        """The cached result for `bwrap`, or None; starts
        the probe when there is none yet (needs a running event loop)."""
        found = self.results.get(bwrap)
        if found is None and bwrap not in self._running:
            # No event loop (a caller outside the daemon): the worker probes for itself.
            with contextlib.suppress(RuntimeError):
                self._running[bwrap] = asyncio.ensure_future(self._probe(bwrap))
        return found

    async def _probe(self, bwrap: str) -> None:
        from supervisor.engine.spawn import worker_env

        try:
            proc = await asyncio.create_subprocess_exec(
                self.python,
                "-P",
                "-c",
                PROBE_CODE,
                bwrap,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=worker_env(),
                close_fds=True,
            )
            try:
                out, _ = await asyncio.wait_for(proc.communicate(), PROBE_TIMEOUT_SEC)
            except (TimeoutError, asyncio.CancelledError):
                # Cancelled too when the loop ends first (a one-off `run` without a daemon is
                # done before its probe): ended and reaped here, so no probe outlives its loop
                # (tests/cli runs `run` in pytest's process, where a transport left open is
                # reported as "Event loop is closed" when it is collected).
                proc.kill()
                await proc.wait()
                raise
            value = json.loads(out)
            if proc.returncode == 0 and isinstance(value, dict) and isinstance(value["ok"], bool):
                self.results[bwrap] = SandboxProbe(
                    bwrap, value["ok"], str(value.get("reason", "")), str(value.get("fix", ""))
                )
        except (OSError, ValueError, KeyError, TimeoutError) as exc:
            log.info("the sandbox probe did not run (%s); each worker probes for itself", exc)
        finally:
            self._running.pop(bwrap, None)
