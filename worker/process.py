"""Process set-up for `python -m worker`: not dumpable, a protected message pipe, death with
the parent, a process title. Kept free of heavy imports: this runs before anything else."""

from __future__ import annotations

import os
import signal
import sys
from typing import IO

__all__ = [
    "die_with_parent",
    "no_dumping",
    "protect_stdout",
    "quiet_stdin",
    "set_title",
    "set_title_text",
]

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4


def no_dumping() -> None:
    """PR_SET_DUMPABLE(0): no other process of the user may ptrace this one or read its
    /proc/PID/environ, mem, maps or fd while it holds the API key (in its environment or
    read from the key file), and it leaves no core dump. Its /proc files become root's.

    Called first in worker.main.main, the code every run's worker executes (also one forked
    from a server, which inherits the parent's setting only until an exec resets it).
    The sandbox is unaffected: bwrap and the holders are exec'd, which makes them dumpable
    again, so the runner still reads the sandbox's /proc. Held by
    tests/worker/test_worker_process.py::test_a_sibling_cannot_read_the_worker_environ.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_DUMPABLE): {os.strerror(err)}")


def protect_stdout() -> IO[bytes]:
    """A private copy of fd 1 for messages; fd 1 itself then points at stderr.

    A stray print, a library's warning or a child process writing to fd 1 lands in the run
    log instead of corrupting the protocol stream.
    """
    sys.stdout.flush()
    fd = os.dup(1)  # not inheritable (PEP 446): no child ever holds the message pipe
    os.dup2(2, 1)
    return open(fd, "wb", buffering=1 << 16)


def quiet_stdin() -> None:
    """Once the job is read, fd 0 is /dev/null: no child inherits the supervisor's pipe."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def die_with_parent() -> None:
    """SIGKILL this process when the supervisor (its parent) dies (Linux prctl)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if os.getppid() != parent:  # it died before the prctl took effect: no signal will come
        os._exit(1)


def set_title(name: str) -> None:
    """`vinos-routine worker NAME` in ps and top (best effort)."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(f"vinos-routine worker {name}")


def set_title_text(text: str) -> None:
    """`text` as the process title (best effort)."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(text)
