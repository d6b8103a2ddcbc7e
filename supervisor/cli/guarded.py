"""What every command runs inside, after its arguments are read: the user's umask, the refusal
to open a ledger gone beside a live daemon, and the errors that are said rather than shown as a
traceback. supervisor/cli/main.py runs each parsed command in it; supervisor/cli/thinclient.py
runs `list` without a daemon in it before argparse is imported. Light: nothing at import.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

TYPE_CHECKING = False  # typing's own flag, without importing typing at start-up
if TYPE_CHECKING:
    from routines.spec.paths import Paths

__all__ = ["NO_LEDGER", "guarded", "ledger_gone_beside_daemon", "silence_stdout"]

# Commands that never open the ledger: they run even when it is gone beside a live daemon.
NO_LEDGER = frozenset(
    {"schedule", "validate", "daemon", "sandbox", "sign", "trust", "setup", "doctor"}
)


def guarded(command: str, call: Callable[[], int]) -> int:
    """`call` (the command `command`, its arguments read), with what every command has."""
    # Whatever the shell's umask (022 makes ledger.db 0644 and routines/ 0755), everything this
    # program, its daemon and their workers create under VINOS_HOME is the user's alone:
    # directories 0700, files 0600 (the unit's UMask=0077 agrees;
    # test_reliability_permissions.py::test_files_and_dirs_are_private_under_umask_022).
    os.umask(0o077)
    if command not in NO_LEDGER:
        from routines.spec.paths import paths
        from supervisor.cli.present import die

        if problem := ledger_gone_beside_daemon(paths()):
            return die(problem)
    try:
        return call()
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `vinos-routine list | head`: the reader left, which is not an error.
        silence_stdout()
        return 0
    except Exception as exc:
        # A ledger that cannot be used, or a daemon that holds its lock but does not answer,
        # says what to do about it: that, not a traceback (and never "not running").
        from routines.ledger import LedgerError
        from supervisor.cli.client import DaemonUnresponsive

        if not isinstance(exc, LedgerError | DaemonUnresponsive):
            raise
        print(f"vinos-routine: {exc}", file=sys.stderr)
        return 1


def ledger_gone_beside_daemon(p: Paths) -> str | None:
    """Why this command must not open the ledger: it is missing while a daemon holds its
    lock (the state dir was deleted under it). Opening it would create a second, empty ledger
    beside the live daemon's, and with it a second run fence.

    On a fleet the ledger is the fleet's database: this machine's file is not the daemon's
    ledger (a machine that joined with none never has one), so its absence says nothing
    (test_reliability_lost.py::test_a_deleted_routines_dir_stops_scheduling_and_no_second_ledger_appears;
    tests/fleet/test_fleet_cli.py, a fresh fleet machine)."""
    if p.ledger.exists():
        return None
    from supervisor.fleet.view import config_or_default

    if config_or_default(p).fleet is not None:
        return None
    from supervisor.cli.client import daemon_locks, lock_holder  # only now: it costs ~10 ms

    holder = lock_holder(daemon_locks(p))
    if holder is None:
        return None
    return (
        f"the ledger {p.ledger} is gone, but the daemon (pid {holder or '?'}) is still "
        "running on it, so no new ledger is created beside it. Move the file back if it was "
        "moved, or restart the daemon (systemctl --user restart vinos-routined): it then "
        "uses the ledger in place, or starts a new one"
    )


def silence_stdout() -> None:
    """The reader of stdout went away (`vinos-routine run NAME | head -3`): send whatever is still
    printed to /dev/null, so that neither a later print nor the interpreter's last flush fails
    (Python ignores SIGPIPE and raises BrokenPipeError instead). What the command does goes on: a
    run is still run to its end and recorded
    (test_reliability_pipe.py::test_a_closed_stdout_ends_the_stream_not_the_run)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
