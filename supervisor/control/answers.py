"""The daemon's side of the thin client (supervisor/cli/thinclient.py): `list`, `status`,
`history` and `cost` run here, in the daemon, on its parsed registry and compiled schedules
and its open ledger, and what they print goes back to the client as it would have been
written to its terminal.

The commands' flows in supervisor/views/ are the very functions the CLI runs in-process
(supervisor/source.py lends them the daemon's state; the daemon never imports the CLI
package, supervisor/cli/), so the output is byte-identical either way
(tests/supervisor/test_thin_client.py). Whatever this side cannot reproduce exactly (another home,
another time zone, a bad option) is answered with `fallback`, and the
client runs the command in-process as before.

Loaded on the first such request only: an idle daemon that is never asked carries none of it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ipc import Event, EventKind, Request, reply_json

if TYPE_CHECKING:
    from ipc import StatusReply
    from supervisor.control.api import Controlled
    from supervisor.control.server import Connection

__all__ = ["CHUNK", "answer", "fallback_reason", "namespace", "render", "send_output"]

# Bytes of output per event line. Sent as latin-1 text, a byte may take six characters of
# JSON ("\u001b"), so 128 KiB stays well under the wire's 1 MiB line limit (ipc.MAX_LINE).
CHUNK = 128 * 1024


def namespace(verb: str, opts: dict[str, Any]) -> SimpleNamespace | None:
    """The argparse Namespace the command's `run` would get, or None when `opts` is not
    something the thin client may send (then the client parses it the full way)."""
    flag = bool(opts.get("json"))
    if verb == "list":
        return SimpleNamespace(json=flag)
    if verb == "status":
        return SimpleNamespace(json=flag, waybar=bool(opts.get("waybar")))
    if verb == "history":
        name, n = opts.get("name"), opts.get("n", 20)
        if not isinstance(name, str) or not isinstance(n, int) or isinstance(n, bool):
            return None
        return SimpleNamespace(name=name, n=n, json=flag, thread=None)
    if verb == "cost":
        from supervisor.views.cost import days_arg, month_arg

        period = opts.get("period", "today")
        days, month = opts.get("days"), opts.get("month")
        if period not in ("today", "week") or (days is not None and month is not None):
            return None
        try:  # the parser's own checks; a bad value is the full parser's to report
            return SimpleNamespace(
                period=period,
                days=None if days is None else days_arg(str(days)),
                month=None if month is None else month_arg(str(month)),
                json=flag,
            )
        except Exception:
            return None
    return None


def fallback_reason(daemon: Controlled, args: dict[str, Any]) -> str | None:
    """Why the daemon cannot print what the client would print in-process, or None."""
    p = daemon.paths
    if args.get("home") != str(p.home) or args.get("system") != str(p.system_dir):
        return "another VINOS_HOME or VINOS_SYSTEM_DIR"
    if args.get("tz") != os.environ.get("TZ"):
        return "another TZ"  # times are printed in the client's local zone
    # A fleet machine's daemon holds the fleet's ledger, which the CLI would open itself
    # (fleetview.cli_ledger): it answers as any daemon does, within its call deadline while
    # the database hangs (tests/fleet/test_fleet_cli.py::
    # test_status_on_a_fleet_machine_answers_within_a_second_while_the_database_hangs).
    if daemon.serves_local_ledger() and not p.ledger.exists():
        return "no ledger file"  # the CLI says why (ledger_gone_beside_daemon), or makes one
    if daemon.lost() is not None:
        return "the ledger was lost"
    return None


def _registry_as_on_disk(daemon: Controlled) -> Any:
    """The daemon's registry as a fresh scan of the files reads it: a file that is invalid
    now has no routine (the daemon keeps running its last good version; `stale` says so)."""
    from routines.spec.registry import Registry

    entries = daemon.registry.entries
    if not any(e.stale for e in entries.values()):
        return daemon.registry
    return Registry({n: replace(e, routine=None) if e.stale else e for n, e in entries.items()})


def _run(verb: str, ns: SimpleNamespace) -> int:
    """The command's flow in supervisor/views/, which the CLI runs too: the same bytes."""
    if verb == "list":
        from supervisor.views import listing

        return listing.show(ns.json)
    if verb == "history":
        from supervisor.views import history

        return history.show(ns.name, ns.n, ns.json)
    if verb == "status":
        from supervisor.views import status

        return status.show(ns.json, ns.waybar)
    from supervisor.views import cost

    return cost.show(ns.days or ns.month or ns.period, ns.json)


def render(
    daemon: Controlled, status: Callable[[], StatusReply], args: dict[str, Any], rescan: bool = True
) -> tuple[int, bytes, bytes] | str:
    """Run the command `args` names: (exit code, stdout, stderr), or why it must run in the
    client instead. `rescan`: read the files now, as an in-process run would (a watch
    relies on the daemon's own rescans instead, which it is told of)."""
    import orjson

    from supervisor.source import Source, serving

    verb, opts = args.get("verb"), args.get("opts")
    ns = namespace(verb, opts) if isinstance(verb, str) and isinstance(opts, dict) else None
    if ns is None:
        return "not a request this side answers"
    if why := fallback_reason(daemon, args):
        return why
    env = {"PATH": str(args.get("path") or "")}
    if args.get("key"):
        env["ANTHROPIC_API_KEY"] = "set"  # only whether the client has one; never its value
    scanned: list[Any] = []

    def registry() -> Any:
        # Only for a command that reads the files (`history` with runs does not), and once.
        if not scanned:
            daemon.refresh(rescan=rescan)  # a file edited a moment ago shows, as in-process
            scanned.append(_registry_as_on_disk(daemon))
        return scanned[0]

    source = Source(
        registry=registry,
        ledger=daemon.ledger,
        status=lambda: orjson.loads(orjson.dumps(reply_json(status()))),
        color=bool(args.get("color")),
        env=env,
        known_fire=daemon.known_fire,
    )
    encoding = str(args.get("encoding") or "utf-8")
    errors = str(args.get("errors") or "strict")
    out, err = io.BytesIO(), io.BytesIO()
    out_text = io.TextIOWrapper(out, encoding=encoding, errors=errors, write_through=True)
    err_text = io.TextIOWrapper(err, encoding=encoding, errors=errors, write_through=True)
    try:
        with serving(source), redirect_stdout(out_text), redirect_stderr(err_text):
            code = _run(str(verb), ns)
    except (Exception, SystemExit) as exc:  # the client runs it and shows what happens
        return f"{type(exc).__name__}: {exc}"
    return code, out.getvalue(), err.getvalue()


def send_output(conn: Connection, fd: int, data: bytes) -> None:
    """`data` as events of at most CHUNK bytes each, for the client's file descriptor `fd`."""
    for i in range(0, len(data), CHUNK):
        conn.send(Event(EventKind.LOG, data[i : i + CHUNK].decode("latin-1"), {"fd": fd}))


def answer(
    daemon: Controlled, status: Callable[[], StatusReply], req: Request, conn: Connection
) -> dict[str, object]:
    """Run the command; its stdout and stderr go to `conn` as events, the exit code in the
    result. `{"fallback": why}` when it must run in the client instead."""
    done = render(daemon, status, req.args)
    if isinstance(done, str):
        return {"fallback": done}
    code, out, err = done
    send_output(conn, 1, out)
    send_output(conn, 2, err)
    del done, out, err
    # Rows of every routine and the text were made and freed here: once the text has left,
    # give the pages back (supervisor/control/memtrim.py says why), or the idle daemon keeps them.
    from supervisor.control.memtrim import release

    conn.after_sent(release)
    return {"code": code}
