"""A long-lived program in the sandbox, spoken to over its stdin and stdout (an MCP server).

The same bwrap argv, seccomp filter, limits and egress proxy as a shell call
(sandbox/runner.py), for a program started with its own argv (argv.build_exec_argv) that
runs until `close()`. The memory cap is watched for as long as it runs; its stderr is
drained into a capped tail (a program blocked on a full stderr pipe would hang its caller).

The disk quota is a shell call's, for the program's whole life: its writable dirs are
overlays on a tmpfs of max_workspace_mb (sandbox/overlay.py), so the kernel stops its writes at
the quota whenever it makes them; `quota_problem()` judges what it wrote so far (after each
MCP call), and `close()` copies it back within the quota once the sandbox is gone, never while
it may still write (tests/sandbox/test_stdio_quota.py). Where the overlay cannot be built, the
caller polls (worker/mcpquota.py).

`close()` ends the whole process tree, whatever it forked or setsid'ed: stdin closed first
(an MCP server's cue to exit), then SIGTERM and SIGKILL to bwrap's group, and it returns
only once the sandbox's pid-1 is gone, which takes the pid namespace with it
(tests/worker/test_worker_mcp.py checks no process outlives a run).

--die-with-parent fires when the *thread* that spawned bwrap ends: call start_stdio from a
thread that lives as long as the program should (the worker's main thread).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from sandbox import seccomp
from sandbox.argv import argv_line, build_exec_argv
from sandbox.cgroup import Joined
from sandbox.host import Host
from sandbox.limits import MemoryWatch
from sandbox.netns import ProxyProcess, holder_argv, proxy_policy, uses_proxy
from sandbox.overlay import OverlayError, Overlays
from sandbox.policy import ShellPolicy, UnsafeValue
from sandbox.probe import ROOT_REFUSAL, probe, warn_once
from sandbox.quota import QuotaWatch
from sandbox.runner import (
    _await_sandbox_end,
    _Capped,
    _child_pid,
    _end_group,
    _Exited,
    _file_size_limited,
    _killpg,
    _overlays,
    _pump,
    _quota_fds,
    joined_cgroup,
    open_dir_nofollow,
)

__all__ = ["STDERR_TAIL", "StdioChild", "StdioRefused", "start_stdio"]

STDERR_TAIL = 8 * 1024  # the last bytes of its stderr kept, for the log line of a failure
_INFO_SEC = 10.0  # bwrap writing the sandbox's pid-1 to --info-fd
_EXIT_GRACE_SEC = 1.0  # after stdin closes, before SIGTERM
_DRAIN_GRACE_SEC = 1.0  # how long exit_note waits for the stderr pipe's EOF
# The memory watch's period: a shell call's watch samples faster, but a server lives for the
# whole run, and each sample reads every process's smaps.
_SAMPLE_SEC = 1.0


class StdioRefused(Exception):
    """The program could not be started in the sandbox; `str()` says why. Nothing runs."""


class StdioChild:
    """A running sandboxed program: write requests to `stdin`, read replies from `stdout`
    (raw fds, non-blocking), then `close()`."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        info: _Capped,
        lasting: contextlib.ExitStack,
        watch: MemoryWatch,
        joined: Joined | None = None,
        disk: tuple[Overlays, QuotaWatch] | None = None,
    ) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._proc = proc
        # The quota dirs as overlays on a tmpfs of the quota, for the program's whole life
        # (sandbox/overlay.py), and the watch that measures the real dirs: None where the
        # kernel cannot build them (the caller polls then: worker/mcpquota.py).
        self._disk = disk
        self.not_kept: str | None = None  # once closed: why its writes were not copied back
        self._info = info
        self._lasting = lasting
        self._watch = watch
        self._joined = joined  # the run's cgroup it entered (sandbox/cgroup.py), if any
        self._exited = _Exited(proc.pid)
        self.stdin = proc.stdin.fileno()
        self.stdout = proc.stdout.fileno()
        os.set_blocking(self.stdin, False)
        os.set_blocking(self.stdout, False)
        self._tail = bytearray()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._drain_stderr, daemon=True),
            threading.Thread(target=self._watch_memory, daemon=True),
        ]
        for t in self._threads:
            t.start()

    @property
    def pid(self) -> int:
        """bwrap's pid on the host (its process group)."""
        return self._proc.pid

    @property
    def sandbox_pid(self) -> int | None:
        """The sandbox's pid-1 on the host."""
        return _child_pid(self._info)

    @property
    def overlaid(self) -> bool:
        """Whether the kernel keeps its quota: its writable dirs are overlays on a tmpfs of
        max_workspace_mb, copied back within the quota when it ends."""
        return self._disk is not None

    def quota_problem(self) -> str | None:
        """Why what it wrote so far could not be copied back (over the quota, or the tmpfs
        filled: ENOSPC stopped a write), or None; copies nothing. Not overlaid: None."""
        if self._disk is None:
            return None
        overlays, quota = self._disk
        try:
            before = [u for _, u in quota.measure()]
        except OSError:
            return None  # the copy back at its end decides
        return overlays.check(before, quota.max_mb)

    def running(self) -> bool:
        return not self._closed.is_set() and not self._exited()

    def wait(self, timeout: float) -> bool:
        """Whether it has exited within `timeout` seconds (a closed pipe comes first)."""
        return self._exited.wait(timeout)

    def exit_note(self) -> str:
        """Why it is gone, if it is: the memory cap, its exit status, then its stderr tail."""
        if self._watch.killed:
            return self._watch.killed
        if not self._exited():
            return ""
        killed = None if self._joined is None else self._joined.problem()
        if killed is not None:
            return killed
        code = self._proc.poll() if self._closed.is_set() else _status(self.pid)
        # The program is gone, but its last words may still be in the pipe: let the drain reach
        # EOF first (bounded: a grandchild may hold the pipe open), or a busy machine reports an
        # exit without the line that says why
        # (test_a_server_that_cannot_start_is_a_tool_error_and_a_log_line).
        self._threads[0].join(timeout=_DRAIN_GRACE_SEC)
        tail = self.stderr_tail().strip().splitlines()[-3:]
        said = f"; its stderr ends: {' | '.join(tail)}" if tail else ""
        return f"it exited ({_describe(code)}){said}"

    def stderr_tail(self) -> str:
        with self._lock:
            return self._tail.decode("utf-8", "replace")

    def close(self) -> None:
        """End the program and everything it started; idempotent, never raises."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            os.close(self.stdin)
        self._proc.stdin = None  # closed above: Popen must not close the fd number again
        try:
            if not self._exited.wait(_EXIT_GRACE_SEC):
                _end_group(self.pid, self._exited)
            _killpg(self.pid, signal.SIGKILL)  # exited, not reaped: pgid ours
            _await_sandbox_end(self._info)
            if self._disk is not None:
                # The sandbox is gone: nothing writes the upper dirs now. The real dirs are
                # measured now, not at the start: the run's shell calls changed them since.
                self.not_kept = _copied_back(*self._disk)
        finally:
            self._proc.wait()
            for t in self._threads:
                t.join(timeout=5)
            for f in (self._proc.stdout, self._proc.stderr):
                if f is not None:
                    f.close()
            if self._exited.fd is not None:
                os.close(self._exited.fd)
            self._lasting.close()

    def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self._tail += chunk
                del self._tail[:-STDERR_TAIL]

    def _watch_memory(self) -> None:
        self._watch.root = self.sandbox_pid
        while not self._closed.wait(_SAMPLE_SEC):
            if self._exited() or self._watch.sample(time.monotonic()):
                return


def start_stdio(
    program: Sequence[str],
    policy: ShellPolicy,
    *,
    proxy_prefix: Sequence[str] = (),
    on_argv: Callable[[list[str]], None] | None = None,
) -> StdioChild:
    """Start `program` (an argv) under bwrap with `policy`; raises StdioRefused. With the
    network on, the egress proxy is a process of its own started under `proxy_prefix`, as
    for run_shell."""
    if os.geteuid() == 0:
        raise StdioRefused(ROOT_REFUSAL)
    check = probe(policy.bwrap)
    if not check.ok:
        warn_once(check)
        raise StdioRefused(f"sandboxed tools are disabled on this machine: {check.reason}")
    lasting = contextlib.ExitStack()  # the egress proxy and the info pipe: until close()
    try:
        return _start(program, policy, lasting, proxy_prefix, on_argv)
    except BaseException:
        lasting.close()
        raise


def _start(
    program: Sequence[str],
    policy: ShellPolicy,
    lasting: contextlib.ExitStack,
    proxy_prefix: Sequence[str],
    on_argv: Callable[[list[str]], None] | None,
) -> StdioChild:
    with contextlib.ExitStack() as closing:
        try:
            host = Host.probe(policy)
            seccomp_fd = seccomp.write_fd()
            closing.callback(os.close, seccomp_fd)
            info_r, info_w = os.pipe2(os.O_CLOEXEC)
            closing.callback(os.close, info_w)
            lasting.callback(os.close, info_r)
            rw_fds = []
            for path in policy.rw_binds:
                rw_fds.append(open_dir_nofollow(path))
                closing.callback(os.close, rw_fds[-1])
            limited, quota, overlays = _disk(policy, rw_fds, lasting)
            shown = {} if overlays is None else overlays.shown()
            argv = build_exec_argv(
                limited, host, seccomp_fd, program, info_fd=info_w, rw_fds=rw_fds, overlays=shown
            )
            egress = (
                proxy_policy(policy.network, policy.lan) if uses_proxy(policy.network) else None
            )
        except OverlayError as exc:
            raise StdioRefused(f"the sandbox's workspace could not be set up: {exc}") from exc
        except (UnsafeValue, ValueError, OSError, seccomp.SeccompUnavailable) as exc:
            raise StdioRefused(f"refused: {exc}") from exc
        # A kept write folder is bound read-only here (sandbox/argv.py): never its fd; nor an
        # overlaid dir's (the program would write the real dir past the tmpfs).
        passed = [seccomp_fd, info_w, *_bound_fds(policy, rw_fds, shown)]
        proxy: ProxyProcess | None = None
        if egress is not None:
            proxy = ProxyProcess(egress, proxy_prefix, policy.bwrap)
            lasting.callback(proxy.close)
            pass_fd = proxy.start()
            argv = holder_argv(argv, pass_fd)
            passed.append(pass_fd)
        if overlays is not None:
            argv = overlays.argv(argv)  # bwrap (or the network holder) joins the overlays
        if os.environ.get("VINOS_ROUTINE_DEBUG") == "1":
            print(f"vinos-routine: sandbox argv: {argv_line(argv)}", file=sys.stderr, flush=True)
        if on_argv is not None:
            on_argv(argv)
        # The run's cgroup, as a shell call's (sandbox/runner.py): the server's processes
        # are held to max_run_memory_mb with the rest of the run's.
        joined = joined_cgroup(policy)
        try:
            proc = subprocess.Popen(
                joined.wrap(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                close_fds=True,  # nothing of the worker's beyond 0-2 and `passed`
                pass_fds=passed,
                start_new_session=True,  # its own process group, ended as one
                env=dict(policy.env),  # bwrap's own environ holds no secret either
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise StdioRefused(f"bubblewrap could not be started: {exc}") from exc
        if proxy is not None:
            proxy.handed_over()
    info = _Capped(info_r, 4096)
    kept = lasting.pop_all()  # the info pipe and the proxy: StdioChild.close() closes them
    exited = _Exited(proc.pid)
    until = time.monotonic() + _INFO_SEC
    while _child_pid(info) is None and not info.done and time.monotonic() < until:
        _pump([info], min(0.25, until - time.monotonic()), exited)
        if exited():
            break
    if exited.fd is not None:
        os.close(exited.fd)
    disk = None if overlays is None else (overlays, quota)
    return StdioChild(proc, info, kept, MemoryWatch(policy.limits), joined, disk)


def _bound_fds(policy: ShellPolicy, rw_fds: list[int], shown: Mapping[str, str]) -> list[int]:
    """The writable dirs' fds bwrap binds: neither a kept write folder's nor an overlaid dir's."""
    return [
        fd
        for p, fd in zip(policy.rw_binds, rw_fds, strict=True)
        if p not in policy.kept and p not in shown
    ]


def _disk(
    policy: ShellPolicy, rw_fds: list[int], lasting: contextlib.ExitStack
) -> tuple[ShellPolicy, QuotaWatch, Overlays | None]:
    """The quota as a shell call's (sandbox/runner.py): the quota dirs as overlays on a tmpfs
    of the quota, here for the program's life (a kept write folder stays read-only), and the
    policy with its RLIMIT_FSIZE; no overlays where the kernel cannot build them. Raises
    OverlayError, OSError."""
    quota = QuotaWatch(_quota_fds(policy, rw_fds, lasting), policy.limits.workspace_mb)
    left_mb = quota.start(time.monotonic())
    overlays = _overlays(policy, quota, [], lasting)
    return _file_size_limited(policy, left_mb, overlays is not None), quota, overlays


def _copied_back(overlays: Overlays, quota: QuotaWatch) -> str | None:
    """Copy the program's writes back within the quota (sandbox/overlay.py); why not, or None."""
    try:
        before = [u for _, u in quota.measure()]
    except OSError as exc:
        overlays.close()
        return f"its writable dirs could not be measured, so nothing it wrote was kept: {exc}"
    return overlays.copy_back(before, quota.max_mb)


def _status(pid: int) -> int | None:
    """The exit status of an exited, unreaped child (waitid WNOWAIT)."""
    try:
        res = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if res is None:
        return None
    return res.si_status if res.si_code == os.CLD_EXITED else -res.si_status


def _describe(code: int | None) -> str:
    if code is None:
        return "status unknown"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit status {code}"
