"""The workspace quota (`[sandbox].max_workspace_mb`) of a running MCP server, where the
kernel cannot keep it.

Where it can, a server's writable dirs are overlays on a tmpfs of the quota for its whole life
(sandbox/stdio.py, as a shell call's: sandbox/overlay.py), checked after each call and copied
back within the quota when it ends; nothing here runs. Elsewhere (`overlay_unavailable()`), the
same QuotaWatch as a shell call's fallback is kept for the server's whole life, over the same
writable dirs (the workspace and the run's scratch dir, together):
- before it starts, RLIMIT_FSIZE is set to what the dirs have left (rounded up to the MB,
  as for a shell call: sandbox/stdio.py), so one file cannot fill the disk before a check
  sees it;
- while it runs, a thread measures the dirs every POLL_SEC (less often when a walk is slow:
  at most a tenth of a core) and kills the sandbox's pid-1 once they hold more than the
  quota: a server writing between calls is stopped;
- after each call, the dirs are measured again, and over the quota is that call's tool
  error and the end of the server for the run.
tests/worker/test_worker_mcp_quota.py holds all three.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from sandbox import ShellPolicy, open_dir_nofollow
from sandbox.quota import QuotaWatch
from sandbox.stdio import StdioChild

__all__ = ["POLL_SEC", "ServerQuota"]

POLL_SEC = 1.0  # as the server's memory watch: a server lives for the run, each walk costs
WALK_SHARE = 10  # the wait after a walk, in walks: at most a tenth of a core on them


class ServerQuota:
    """One server's polled quota: `watch()` once it runs, `problem()` after each call,
    `close()` with it."""

    def __init__(self, policy: ShellPolicy) -> None:
        self._fds: list[int] = []
        try:
            dirs = []
            for path in policy.quota_dirs:
                self._fds.append(open_dir_nofollow(path))  # the very dirs, never a path again
                dirs.append((path, self._fds[-1]))
        except BaseException:
            self.close()
            raise
        self._watch = QuotaWatch(dirs, policy.limits.workspace_mb)
        self._watch.start(time.monotonic())  # what the poll allows: the quota, or the start
        self._lock = threading.Lock()  # one walk at a time: the fds' offsets are shared
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, child: StdioChild) -> None:
        """Poll while `child` runs; over the quota, its sandbox is killed (`killed` says why)."""
        self._watch.root = child.sandbox_pid
        self._thread = threading.Thread(target=self._poll, args=(child,), daemon=True)
        self._thread.start()

    @property
    def killed(self) -> str | None:
        """Why the poll stopped the server, once it has."""
        killed = self._watch.killed
        return None if killed is None else killed.removeprefix("stopped during the call: ")

    def problem(self) -> str | None:
        """After a call: why the dirs are over the quota, or None."""
        if self.killed is not None:
            return self.killed
        with self._lock:
            return self._watch.problem()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def _poll(self, child: StdioChild) -> None:
        wait = POLL_SEC
        while not self._stop.wait(wait):
            if not child.running():
                return
            began = time.monotonic()
            with self._lock:
                if self._watch.sample(began):
                    return
            # A server may run for the whole run: its polls take at most a tenth of a core
            # (a shell call's, which end with the call, may take a quarter).
            wait = max(POLL_SEC, WALK_SHARE * (time.monotonic() - began))
