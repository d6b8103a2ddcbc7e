"""`list`, `status` and `status --waybar`, on the client: the read model's rows asked of the
daemon when one answers (it sends data, supervisor/control/handlers.py), else read here from the
files
and the ledger (supervisor/overview.py `collect`), then rendered here (supervisor/cli/render/).
The same rows and the same renderers either way, so the text is the same
(tests/supervisor/test_thin_client.py).

Imported by the console script's first lines (supervisor/cli/thinclient.py): a `list` answered
by the daemon loads the socket, json, the row and its renderer, and nothing else.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

TYPE_CHECKING = False  # typing's own flag: `list` answered by the daemon loads no typing
if TYPE_CHECKING:
    from typing import Any

__all__ = ["request", "show_list", "show_status", "waybar"]


def request(cmd: str) -> Any:
    """The daemon's result for `cmd`, or None when no daemon answers it (none runs, it is
    stopped behind its socket unit, it refused, or an older one does not know `cmd`)."""
    from supervisor.cli.daemonsock import ask, request_args

    return ask(cmd, request_args(cmd))


def show_list(as_json: bool, answer: Any) -> int:
    """`list [--json]` from the daemon's `answer` (None: none answered, read here)."""
    from routines.collector import collector_paused

    # 10,000 rows and their cells all stay until printed: the collector would walk them again
    # and again while they are made (a process that ends after printing).
    with collector_paused():
        return _show_list(as_json, answer)


def _show_list(as_json: bool, answer: Any) -> int:
    from routines.query import decode_rows
    from supervisor.cli.present import print_json, use_color
    from supervisor.cli.render.listing import EMPTY, cells, json_value, render

    if isinstance(answer, dict) and "routines" in answer:
        rows, stale = decode_rows(answer["routines"]), answer.get("stale") or []
    else:
        from supervisor.overview import list_rows

        # No daemon: nothing runs a last good version of an invalid file (None: not asked).
        rows, stale = list_rows(), None
    if as_json:
        print_json(json_value(rows, stale))
        return 0
    if not rows:
        print(EMPTY)
        return 0
    c = use_color()
    print(render(cells(rows, stale, datetime.now(UTC), c), c), end="")
    return 0


def show_status(as_json: bool, answer: Any) -> int:
    """`status [--json]`: the daemon's `answer` with its problems, or without one (None) the
    status of a daemon that was starting, or of the files."""
    from supervisor.cli.present import print_json, use_color
    from supervisor.cli.render.status import lines

    st = answer
    if not isinstance(st, dict) or st.get("problems") is None:
        st = _offline_status()
    if as_json:
        print_json(st)
        return 0
    hint = ""
    if not st["daemon"]:
        from supervisor.cli.userunits import start_hint

        hint = start_hint()
    for line in lines(st, datetime.now(UTC), use_color(), hint):
        print(line)
    return 0


def _offline_status() -> dict[str, Any]:
    """The status from a daemon the quick ask missed (one starting: waited for) or, with none,
    from the files and the ledger; with the problems read here."""
    from contextlib import closing

    from routines.ledger import LedgerError, RoutineState
    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from supervisor.cli.client import DaemonError, try_daemon
    from supervisor.cli.daemonsock import request_args
    from supervisor.fleet.view import cli_ledger
    from supervisor.hostcheck import status_problems
    from supervisor.overview import collect, offline_status

    p = paths()
    st: dict[str, Any] | None = None
    client = try_daemon(p)
    if client is not None:
        with client:
            try:
                st = client.request("status", request_args("status"))
            except DaemonError:
                st = None
    if st is not None and st.get("problems") is not None:
        return st
    st = st or offline_status(collect())
    states: dict[str, RoutineState] = {}
    # A daemon paused because its ledger is away (a fleet's database down or hung) says so,
    # and that is what this prints: the routines' own `enabled` stands in for their states
    # meanwhile, without a read that would wait out the call deadline (tests/fleet/
    # test_fleet_cli.py: a fresh fleet machine; status answers within a second on a hang).
    if not (st.get("daemon") and st.get("health", "ok") != "ok"):
        try:
            with closing(cli_ledger(p)) as ledger:
                states = ledger.states()
        except LedgerError:
            if not st.get("daemon"):
                raise
    pid = st.get("pid") if st.get("daemon") else None
    st["problems"] = status_problems(p, scan(p).routines(), states, pid)
    return st


def waybar() -> int:
    """One line of JSON for waybar, from the files and the ledger (never the daemon: a bar
    that polls must not wait on it). An error is shown in the bar, with exit status 0,
    because waybar hides a module whose command fails."""
    import orjson

    from supervisor.cli.render.waybar import waybar_error, waybar_json

    try:
        from contextlib import closing

        from routines.spec.paths import paths
        from supervisor.fleet.view import cli_ledger
        from supervisor.overview import bar_facts, collect

        now = datetime.now(UTC)
        p = paths()
        with closing(cli_ledger(p)) as ledger:
            rows = collect(now, ledger=ledger)
            facts = bar_facts(p, rows, ledger, now)
        value = waybar_json(rows, facts["today_dollars"], now, facts["unseen"], facts["pending"])
    except Exception as exc:  # the bar shows any failure rather than going blank
        value = waybar_error(str(exc) or type(exc).__name__)
    sys.stdout.buffer.write(orjson.dumps(value) + b"\n")
    sys.stdout.flush()
    return 0
