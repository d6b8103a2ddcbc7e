"""`vinos-routine`'s entry point: `list` and `status` (with or without `--json`) go to
supervisor/cli/reads.py before argparse is imported: it asks the daemon for the read model's
rows (`ask`: data, never text) and renders them here; `list` with no daemon answering is read
from the files here too. Every other command, any other spelling of these, and `status` with
no daemon go to supervisor/cli/main.py.

This module and `ask` (supervisor/cli/daemonsock.py) import only `_socket` and `json` beyond
what Python has loaded at start; a daemon that is not there costs one stat of its socket file.
"""

from __future__ import annotations

import os
import sys

from supervisor.cli.daemonsock import ask, request_args, socket_path

__all__ = ["ask", "main", "socket_path"]


# The read commands answered from the read model before argparse is loaded; any other
# spelling (`--help`, an abbreviation, a bad option) goes to the full parser.
_QUICK = {
    ("list",): ("list", False),
    ("list", "--json"): ("list", True),
    ("status",): ("status", False),
    ("status", "--json"): ("status", True),
}


def _plain(argv: list[str]) -> bool:
    try:
        return all(len(a) <= 4096 and a.encode("utf-8") is not None for a in argv)
    except UnicodeEncodeError:
        return False


def main() -> int:
    """Entry point of the `vinos-routine` console script."""
    argv = sys.argv[1:]
    if argv in (["status", "--waybar", "--follow"], ["status", "--follow", "--waybar"]):
        from supervisor.cli.waybarfollow import follow

        return follow()
    # `sandbox NAME [--argv] -- CMD` execs the sandbox before argparse and the command modules;
    # an argument no command takes (too long, not UTF-8) goes to the full CLI, which refuses it
    # in one place (supervisor.cli.main.bad_argument).
    if argv[:1] == ["sandbox"] and _plain(argv):
        from supervisor.cli.sandboxexec import exact_form, exec_sandboxcli, through_daemon

        if (form := exact_form(argv[1:])) is not None:
            # The daemon's warm forkserver runs it when a daemon is up; else this process
            # becomes the call (supervisor/cli/sandboxexec.py).
            code = through_daemon(*form)
            if code is not None:
                return code
            exec_sandboxcli(*form)  # never returns
    quick = _QUICK.get(tuple(argv))
    answer = None if quick is None else ask(quick[0], request_args(quick[0]))
    if quick is not None and answer is None and quick[0] == "list":
        # No daemon: `list` reads the files here (its row snapshot, routines/query/rowsnap.py)
        # inside what every command runs in (the ledger-gone refusal, the errors said), without
        # argparse. `status` without a daemon goes to the full CLI.
        from supervisor.cli import reads
        from supervisor.cli.guarded import guarded

        as_json = quick[1]
        return guarded("list", lambda: reads.show_list(as_json, None))
    # Otherwise only a daemon's answer is rendered here; without one, the full CLI runs the
    # command (in supervisor/cli/guarded.py too).
    if quick is not None and answer is not None:
        from supervisor.cli import reads

        try:
            if quick[0] == "list":
                return reads.show_list(quick[1], answer)
            return reads.show_status(quick[1], answer)
        except BrokenPipeError:  # `vinos-routine list | head`: the reader left, not an error
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return 0
    from supervisor.cli.main import main as full

    return full(argv)
