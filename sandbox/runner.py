"""Run one command in the sandbox: spawn bwrap, read capped output, enforce the wall clock.

The timeout and the caps are enforced out here, on bwrap's whole process group: SIGTERM,
then SIGKILL after a short grace. Ending the outer bwrap ends everything inside: the
sandbox's pid-1 has PDEATHSIG (--die-with-parent), and when a pid namespace's init dies the
kernel kills every process in it, however it double-forked or setsid'ed. run_shell returns
only once that pid-1 is gone (see _await_sandbox_end), so nothing outlives the call.

--die-with-parent fires when the *thread* that spawned bwrap ends; run_shell blocks its
caller until the sandbox is gone, so any calling thread is fine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sandbox import cgroup, seccomp
from sandbox.argv import argv_line, build_argv
from sandbox.copyback import Guard
from sandbox.host import Host
from sandbox.limits import MemoryWatch
from sandbox.netholder import EXIT_SETUP
from sandbox.netns import ProxyProcess, holder_argv, proxy_policy, uses_proxy
from sandbox.overlay import OverlayError, Overlays, overlay_unavailable
from sandbox.policy import ShellPolicy, UnsafeValue, check_path
from sandbox.probe import ROOT_REFUSAL, probe, warn_once
from sandbox.quota import QuotaWatch, open_dir_restoring

__all__ = ["STDERR_CAP", "STDOUT_CAP", "ShellResult", "open_dir_nofollow", "run_shell"]

STDOUT_CAP = 32 * 1024
STDERR_CAP = 8 * 1024
KILL_GRACE_SEC = 1.0  # between SIGTERM and SIGKILL
_DRAIN_SEC = 2.0  # reading what is left in the pipes once bwrap has exited
_SANDBOX_END_SEC = 10.0  # the kernel emptying the pid namespace after bwrap
_CHUNK = 65536
_NOT_COPIED_SHOWN = 20  # entries of not_copied the model sees


@dataclass(frozen=True, slots=True)
class ShellResult:
    """What one shell call did; `to_json()` is what the model sees as the tool result."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None  # None: it never ran, or was ended at the timeout or a cap
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    duration_sec: float = 0.0
    # The sandbox refused or could not run it (nothing ran), or a per-call limit ended it
    # (max_run_memory_mb, max_workspace_mb during the call) or failed it afterwards
    # (max_workspace_mb): the text says which.
    error: str | None = None
    # What the call made or changed in a write folder that was kept out of it (a dot-name,
    # a repository, a credential name, a link: sandbox/copyback.py Guard), with why.
    not_copied: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "timed_out": self.timed_out,
            "duration_sec": round(self.duration_sec, 3),
        }
        if self.not_copied:
            out["not_copied"] = list(self.not_copied[:_NOT_COPIED_SHOWN])
            if len(self.not_copied) > _NOT_COPIED_SHOWN:
                out["not_copied"].append(f"and {len(self.not_copied) - _NOT_COPIED_SHOWN} more")
            out["not_copied_why"] = (
                "a shell call never makes or changes a dot-name, a repository (HEAD), a "
                "credential-named file or a link in a write folder; the rest was written"
            )
        if self.error is not None:
            out["error"] = self.error
        elif self.timed_out:
            out["note"] = "the command was killed at the shell timeout"
        elif self.exit_code is None:
            out["note"] = "the output passed its cap, so the command was ended"
        elif self.stdout_truncated or self.stderr_truncated:
            out["note"] = "the output was cut at its cap"
        return out


def run_shell(
    command: str,
    policy: ShellPolicy,
    *,
    timeout_sec: float,
    stdout_cap: int = STDOUT_CAP,
    stderr_cap: int = STDERR_CAP,
    proxy_prefix: Sequence[str] = (),
    on_argv: Callable[[list[str]], None] | None = None,
    stdin: bytes | None = None,
    on_copy_back: Callable[[], None] | None = None,
) -> ShellResult:
    """Run `bash -c command` under bwrap with `policy`. Never raises for sandbox problems.

    The workspace quota is kept by the kernel (an overlay on a tmpfs of the quota, copied back
    after the call) for every call: a model's shell call, an action, a command routine's one
    long command (tests/worker/test_worker_command_quota.py). Where the kernel cannot build
    the overlay, by RLIMIT_FSIZE and the poll.

    With the network on, the egress proxy runs in a process of its own, started under
    `proxy_prefix` (default: none, so in this process's network; tests give a command that
    enters a network namespace of their own).

    A refusal (root, NUL/newline in the command or a path, no bwrap, no libseccomp, no user
    namespaces) comes back as ShellResult(error=...) with nothing run. `on_argv` is called
    with the argv just before it runs (VINOS_ROUTINE_DEBUG=1 shows it to the user);
    `on_copy_back` once the sandbox is gone, before what it wrote is copied back, which takes
    time in proportion to it, past the call's timeout.
    """
    if os.geteuid() == 0:
        return ShellResult(error=ROOT_REFUSAL)
    if any(c in command for c in "\0\n\r"):
        return ShellResult(error="refused: the command holds a NUL, newline or carriage return")
    check = probe(policy.bwrap)
    if not check.ok:
        warn_once(check)
        return ShellResult(error=f"shell tools are disabled on this machine: {check.reason}")
    # `closing` holds what is closed whatever happens; `info_r` outlives the spawn (it is how
    # the runner learns the sandbox's pid-1), so it is kept only once bwrap is running.
    with contextlib.ExitStack() as lasting:  # the egress proxy: until the sandbox is gone
        return _run(
            command,
            policy,
            lasting,
            timeout_sec,
            stdout_cap,
            stderr_cap,
            proxy_prefix,
            on_argv,
            stdin,
            on_copy_back,
        )


def _run(
    command: str,
    policy: ShellPolicy,
    lasting: contextlib.ExitStack,
    timeout_sec: float,
    stdout_cap: int,
    stderr_cap: int,
    proxy_prefix: Sequence[str],
    on_argv: Callable[[list[str]], None] | None,
    stdin: bytes | None = None,
    on_copy_back: Callable[[], None] | None = None,
) -> ShellResult:
    with contextlib.ExitStack() as closing, contextlib.ExitStack() as on_failure:
        try:
            host = Host.probe(policy)
            seccomp_fd = seccomp.write_fd()
            closing.callback(os.close, seccomp_fd)
            info_r, info_w = os.pipe2(os.O_CLOEXEC)
            closing.callback(os.close, info_w)
            on_failure.callback(os.close, info_r)
            rw_fds = []
            for path in policy.rw_binds:
                rw_fds.append(open_dir_nofollow(path))
                closing.callback(os.close, rw_fds[-1])
            quota = QuotaWatch(_quota_fds(policy, rw_fds, lasting), policy.limits.workspace_mb)
            left_mb = quota.start(time.monotonic())
            overlays = _overlays(policy, quota, _kept_fds(policy, rw_fds, lasting), lasting)
            limited = _file_size_limited(policy, left_mb, overlays is not None)
            shown = {} if overlays is None else overlays.shown()
            argv = build_argv(
                limited, host, seccomp_fd, command, info_fd=info_w, rw_fds=rw_fds, overlays=shown
            )
            egress = (
                proxy_policy(policy.network, policy.lan) if uses_proxy(policy.network) else None
            )
        except OverlayError as exc:
            return ShellResult(error=f"the sandbox's workspace could not be set up: {exc}")
        except (UnsafeValue, ValueError, OSError, seccomp.SeccompUnavailable) as exc:
            return ShellResult(error=f"refused: {exc}")
        # Invariant: no fd of an overlaid dir reaches bwrap (bwrap does not close what it is
        # given, so the sandbox would inherit it and write the real dir past the tmpfs), nor
        # anything of the overlays' namespaces (nsenter opens the holding child's /proc files):
        # test_overlay_quota.py's test_no_descriptor_of_the_real_dirs_reaches_the_sandbox.
        # Nor of a kept write folder, overlaid or bound read-only (sandbox/argv.py).
        bound = {} if overlays is None else overlays.shown()
        passed = [seccomp_fd, info_w]
        passed += [
            fd
            for path, fd in zip(policy.rw_binds, rw_fds, strict=True)
            if path not in bound and path not in policy.kept
        ]
        proxy: ProxyProcess | None = None
        if egress is not None:
            # Network on: bwrap runs in a holder namespace whose only way out is the proxy,
            # a process of its own (no secret of ours), started when the sandbox's first
            # connection is pending (it waits in the listen backlog meanwhile).
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
        stdin_fd: int = subprocess.DEVNULL
        if stdin is not None:
            # A file, not a pipe: the command reads it at its own pace while we pump its
            # output, and nothing blocks on a full pipe either way.
            stdin_fd = os.memfd_create("vinos-stdin", os.MFD_CLOEXEC)
            closing.callback(os.close, stdin_fd)
            view = memoryview(stdin)
            while view:
                view = view[os.write(stdin_fd, view) :]
            os.lseek(stdin_fd, 0, os.SEEK_SET)
        # The run's cgroup, when the daemon made one (sandbox/cgroup.py): bwrap enters it
        # before it execs, so the kernel counts every process of the call in it.
        joined = joined_cgroup(policy)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                joined.wrap(argv),
                stdin=stdin_fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                close_fds=True,  # nothing of the worker's beyond 0-2 and `passed`
                pass_fds=passed,
                start_new_session=True,  # its own process group, killed as one
                env=dict(policy.env),  # bwrap's own environ block holds no secret either
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return ShellResult(error=f"bubblewrap could not be started: {exc}")
        on_failure.pop_all()
        if proxy is not None:
            proxy.handed_over()
    watches = (MemoryWatch(policy.limits), quota)
    try:
        result = _supervise(proc, info_r, start, timeout_sec, stdout_cap, stderr_cap, watches)
    finally:
        os.close(info_r)
    killed = joined.problem()
    if killed is not None and result.error is None:
        result = dataclasses.replace(result, error=killed)
    result = _copied_back(_proxy_closed(result, proxy), overlays, quota, on_copy_back)
    return _after(result, quota)


def _proxy_closed(result: ShellResult, proxy: ProxyProcess | None) -> ShellResult:
    """`result` once the egress proxy is closed, with its failure if it failed."""
    if proxy is None:
        return result
    proxy.close()  # the sandbox is gone: so is every connection the proxy could serve
    if proxy.failed is not None and result.error is None:
        return dataclasses.replace(result, error=proxy.failed)
    return result


def joined_cgroup(policy: ShellPolicy) -> cgroup.Joined:
    """The run's sandbox cgroup for one spawn, limited to `policy`'s memory and processes."""
    return cgroup.join(policy.limits.run_memory_mb, policy.limits.processes)


def _copied_back(
    result: ShellResult,
    overlays: Overlays | None,
    quota: QuotaWatch,
    on_copy_back: Callable[[], None] | None,
) -> ShellResult:
    """The upper dirs copied into the real dirs when within the quota; else the quota error.
    `on_copy_back` is told first: the copy may outlast the call's timeout."""
    if overlays is None:
        return result
    if on_copy_back is not None:
        on_copy_back()
    # The sandbox is gone (run_shell's invariant): nothing writes the upper dirs now.
    problem = overlays.copy_back(quota.before, quota.max_mb)
    if overlays.refused:
        result = dataclasses.replace(result, not_copied=tuple(overlays.refused))
    if problem is not None and result.error is None:
        return dataclasses.replace(result, error=problem)
    return result


def _file_size_limited(policy: ShellPolicy, left_mb: int, overlaid: bool) -> ShellPolicy:
    """`policy` with its RLIMIT_FSIZE for this call.

    Polled, no larger than what the quota leaves (sandbox/quota.py says why rounded up to the
    MB), so one file cannot take the disk before the poll sees it. Overlaid, the tmpfs keeps
    the total, so a file may grow to max_file_size_mb there (a large file changed is copied up
    whole first: tests/sandbox/test_overlay_quota.py) and the result is checked after.
    """
    fsize_mb = policy.limits.file_size_mb if overlaid else min(policy.limits.file_size_mb, left_mb)
    return dataclasses.replace(
        policy, limits=dataclasses.replace(policy.limits, file_size_mb=fsize_mb)
    )


def _overlays(
    policy: ShellPolicy,
    quota: QuotaWatch,
    kept: list[tuple[str, int]],
    lasting: contextlib.ExitStack,
) -> Overlays | None:
    """The quota dirs as overlays on a tmpfs of the quota (sandbox/overlay.py), so the kernel
    keeps it, and the person's write folders (`kept`) on the same tmpfs, copied back through
    the guard; None where the kernel cannot (the poll and RLIMIT_FSIZE
    keep the quota then, and the write folders are read-only: sandbox/argv.py)."""
    dirs = [(path, fd) for path, fd in quota.dirs if path in policy.rw_binds]
    if not (dirs or kept):
        return None
    reason = overlay_unavailable()
    if reason is not None:
        _warn_overlay_once(reason)
        return None
    guard = Guard(policy.kept_names)
    overlays = Overlays(dirs, policy.limits.workspace_mb, kept, guard)
    lasting.callback(overlays.close)
    overlays.build()
    # Nothing the call writes reaches the real dirs before the check after it: no poll.
    quota.due = float("inf")
    return overlays


_warned: list[str] = []


def _warn_overlay_once(reason: str) -> None:
    if not _warned:
        _warned.append(reason)
        print(
            "vinos-routine: max_workspace_mb is kept by polling, not by the kernel, on this "
            f"machine: {reason}",
            file=sys.stderr,
            flush=True,
        )


def _kept_fds(
    policy: ShellPolicy, rw_fds: list[int], lasting: contextlib.ExitStack
) -> list[tuple[str, int]]:
    """(path, dir fd) of each kept write folder, open until the copy-back: a dup of the very
    dir opened for the call."""
    out = []
    for path, fd in zip(policy.rw_binds, rw_fds, strict=True):
        if path in policy.kept:
            out.append((path, os.dup(fd)))
            lasting.callback(os.close, out[-1][1])
    return out


def _quota_fds(
    policy: ShellPolicy, rw_fds: list[int], lasting: contextlib.ExitStack
) -> list[tuple[str, int]]:
    """(path, dir fd) of each quota dir, open until the call's last check: the very dirs
    bound (a dup of their fd), never a path looked up again after the sandbox ran."""
    out = []
    for path in policy.quota_dirs:
        if path in policy.rw_binds:
            fd = os.dup(rw_fds[policy.rw_binds.index(path)])
        else:
            fd = open_dir_nofollow(path)
        lasting.callback(os.close, fd)
        out.append((path, fd))
    return out


def _after(result: ShellResult, quota: QuotaWatch) -> ShellResult:
    """The per-call check made once the sandbox is gone: the quota of its writable dirs."""
    if result.error is not None:
        return result
    problem = quota.problem()
    return result if problem is None else dataclasses.replace(result, error=problem)


def open_dir_nofollow(path: str) -> int:
    """A directory fd on the absolute, normalised `path`, opened one component at a time from
    `/` with O_NOFOLLOW: a symlink anywhere on the way fails (ELOOP/ENOTDIR), never followed.
    The last component gets its owner's rwx back if a sandbox took them (a `chmod 000` of
    the workspace must not lock the runtime out of it; sandbox/quota.py).

    The fd is what bwrap binds (--bind-fd): the directory opened here, whatever a sandbox
    later renames or links in its place. Raises OSError or UnsafeValue.
    """
    check_path(path, "writable bind")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", flags)
    try:
        parts = path.split("/")[1:]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nfd = open_dir_restoring(part, fd) if last else os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _supervise(
    proc: subprocess.Popen[bytes],
    info_fd: int,
    start: float,
    timeout: float,
    out_cap: int,
    err_cap: int,
    watches: tuple[MemoryWatch, QuotaWatch],
) -> ShellResult:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Capped(proc.stdout.fileno(), out_cap), _Capped(proc.stderr.fileno(), err_cap)
    info = _Capped(info_fd, 4096)  # bwrap's --info-fd JSON: the host pid of the sandbox's init
    deadline = start + timeout
    ended_by_us = timed_out = False
    try:
        with _exit_watch(proc.pid) as exited:
            while not exited():
                if out.over or err.over:
                    ended_by_us = True
                    break
                now = time.monotonic()
                if now >= deadline:
                    ended_by_us = timed_out = True
                    break
                for watch in watches:
                    if watch.root is None:
                        watch.root = _child_pid(info)
                    if now >= watch.due and watch.sample(now):
                        ended_by_us = True
                if ended_by_us:
                    break
                wait = min(deadline, *(w.due for w in watches)) - time.monotonic()
                _pump([out, err, info], wait, exited)
            if ended_by_us:
                _end_group(proc.pid, exited)
            # Exited but not yet reaped, so the group id cannot have been reused.
            _killpg(proc.pid, signal.SIGKILL)
        _await_sandbox_end(info)
        drain_until = time.monotonic() + _DRAIN_SEC
        while not (out.done and err.done) and time.monotonic() < drain_until:
            _pump([out, err], drain_until - time.monotonic(), None)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                _killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    code = proc.returncode
    if code is not None and code < 0:
        code = 128 - code  # bwrap itself killed by a signal: the shell's convention
    stderr_text = err.text()
    error = _setup_error(code, stderr_text) or next(
        (w.killed for w in watches if w.killed is not None), None
    )
    return ShellResult(
        stdout=out.text(),
        stderr=stderr_text,
        exit_code=None if ended_by_us else code,
        stdout_truncated=out.over,
        stderr_truncated=err.over,
        timed_out=timed_out,
        duration_sec=time.monotonic() - start,
        error=error,
    )


def _setup_error(code: int | None, stderr_text: str) -> str | None:
    """What bwrap or a holder said when it could not build the sandbox (nothing ran)."""
    first = stderr_text.splitlines()[0] if stderr_text else ""
    if code == 1 and first.startswith("bwrap: "):
        return f"the sandbox could not be set up: {first}"
    if code == EXIT_SETUP and first.startswith("vinos-netholder: "):
        return f"the sandbox's network could not be set up: {first}"
    if (code == EXIT_SETUP and first.startswith("vinos-overlay: ")) or (
        code == 1 and first.startswith("nsenter: ")
    ):
        return f"the sandbox's workspace could not be set up: {first}"
    return None


def _await_sandbox_end(info: _Capped) -> None:
    """Return once every process of the sandbox is gone, not merely bwrap.

    bwrap reports the command's exit as soon as the command's own process ends; its pid-1
    then dies (PDEATHSIG), and the kernel kills the rest of the pid namespace before that
    pid-1 is fully gone. So the end of pid-1 (a pidfd, read from --info-fd) is the end of
    everything: a backgrounded or setsid'ed child cannot outlive run_shell.
    """
    until = time.monotonic() + _DRAIN_SEC
    while not info.done and time.monotonic() < until:
        _pump([info], until - time.monotonic(), None)
    child = _child_pid(info)
    if child is None:
        return  # bwrap failed before it started a sandbox: nothing to wait for
    try:
        fd = os.pidfd_open(child)
    except ProcessLookupError:
        return
    except OSError:  # no pidfd (kernel < 5.3): poll for the pid instead
        end = time.monotonic() + _SANDBOX_END_SEC
        while time.monotonic() < end:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return
            time.sleep(0.005)
        return
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            sel.select(_SANDBOX_END_SEC)
    finally:
        os.close(fd)


def _child_pid(info: _Capped) -> int | None:
    """The sandbox's pid-1 on the host, once bwrap has written its --info-fd JSON."""
    try:
        return int(json.loads(info.buf.decode())["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


class _Capped:
    """One pipe read up to cap + 1 bytes: enough to know it was cut, never more."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd, self.cap = fd, cap
        self.buf = bytearray()
        self.over = False
        self.eof = False
        os.set_blocking(fd, False)

    @property
    def done(self) -> bool:
        return self.eof or self.over

    def read(self) -> None:
        try:
            chunk = os.read(self.fd, min(_CHUNK, self.cap + 1 - len(self.buf)))
        except BlockingIOError:
            return
        if not chunk:
            self.eof = True
            return
        self.buf += chunk
        if len(self.buf) > self.cap:
            del self.buf[self.cap :]
            self.over = True

    def text(self) -> str:
        return self.buf.decode("utf-8", "replace")


def _pump(streams: list[_Capped], timeout: float, exited: _Exited | None) -> None:
    live = [s for s in streams if not s.done]
    with selectors.DefaultSelector() as sel:
        for s in live:
            sel.register(s.fd, selectors.EVENT_READ, s)
        if exited is not None and exited.fd is not None:
            sel.register(exited.fd, selectors.EVENT_READ, None)
        if not sel.get_map():
            time.sleep(max(0.0, min(timeout, 0.02)))
            return
        for key, _ in sel.select(max(0.0, min(timeout, 0.25) if exited else timeout)):
            if key.data is not None:
                key.data.read()


class _Exited:
    """Whether a child has exited, without reaping it (a pidfd, or waitid WNOWAIT)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None
        try:
            self.fd = os.pidfd_open(pid)
        except OSError:  # kernel < 5.3, or a seccomp'd container: poll instead
            self.fd = None

    def __call__(self) -> bool:
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        try:
            return os.waitid(os.P_PID, self.pid, flags) is not None
        except ChildProcessError:
            return True

    def wait(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not self():
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)
        return True


@contextlib.contextmanager
def _exit_watch(pid: int) -> Iterator[_Exited]:
    watch = _Exited(pid)
    try:
        yield watch
    finally:
        if watch.fd is not None:
            os.close(watch.fd)


def _end_group(pgid: int, exited: _Exited) -> None:
    """SIGTERM the group, SIGKILL it after the grace; returns once the leader has exited."""
    _killpg(pgid, signal.SIGTERM)
    if not exited.wait(KILL_GRACE_SEC):
        _killpg(pgid, signal.SIGKILL)
        exited.wait(10.0)


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
