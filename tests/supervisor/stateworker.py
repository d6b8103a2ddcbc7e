"""A stand-in worker for tests/supervisor/test_forkserver.py: prints, as one JSON object on
stdout, the process state a worker starts with (what a forked worker must share with a
spawned one), then exits."""

from __future__ import annotations

import ctypes
import json
import os
import random
import resource
import signal
import sys
import threading
from pathlib import Path


def handler_name(h: object) -> str:
    if h is signal.SIG_DFL:
        return "SIG_DFL"
    if h is signal.SIG_IGN:
        return "SIG_IGN"
    if h is signal.default_int_handler:
        return "default_int_handler"
    return repr(h)


def state_fds(fds: list[int]) -> list[int]:
    """The fds still open (listing /proc/self/fd opened one, gone by now)."""
    return [fd for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")]


def described(fd: int) -> dict[str, object]:
    """An fd beyond stdio: what it is, and whether an exec'd program would inherit it."""
    return {
        "target": os.readlink(f"/proc/self/fd/{fd}").split(":")[0],
        "inheritable": os.get_inheritable(fd),
    }


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    pdeathsig = ctypes.c_int(0)
    libc.prctl(2, ctypes.byref(pdeathsig), 0, 0, 0)  # PR_GET_PDEATHSIG
    umask = os.umask(0)
    os.umask(umask)
    fds = state_fds(sorted(int(n) for n in os.listdir("/proc/self/fd")))
    state = {
        "fds": fds,
        "fd_targets": {fd: os.readlink(f"/proc/self/fd/{fd}").split(":")[0] for fd in (0, 1, 2)},
        "session_leader": os.getsid(0) == os.getpid(),
        "group_leader": os.getpgid(0) == os.getpid(),
        "cwd": os.getcwd(),
        "umask": umask,
        "rlimits": {
            n: resource.getrlimit(getattr(resource, n))
            for n in dir(resource)
            if n.startswith("RLIMIT_")
        },
        "env": dict(os.environ),
        "signals": {
            s.name: handler_name(signal.getsignal(s))
            for s in signal.valid_signals()
            if isinstance(s, signal.Signals) and s not in (signal.SIGKILL, signal.SIGSTOP)
        },
        "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "pdeathsig": pdeathsig.value,
        "threads": threading.active_count(),
        "cgroup": Path("/proc/self/cgroup").read_text(),
        "argv": sys.argv,
        "path0": sys.path[0],
        "random": random.random(),
        "has_anthropic": "anthropic" in sys.modules,
        "beyond_stdio": {fd: described(fd) for fd in fds if fd > 2},
    }
    print(json.dumps(state))


main()
