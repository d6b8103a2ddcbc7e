"""`vinos-routine run NAME`: run a routine now and watch it live.

Through the daemon when it is up, so the concurrency limit, the fence and the ledger apply;
in this process otherwise (the same code path). Refused when the routine is already running.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from routines.runs import RunStatus
from supervisor.cli.commands.common import (
    NoSuchRoutine,
    add_parser,
    die,
    find_routine,
    silence_stdout,
)

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "run",
        "run a routine now and stream what it does",
        "  vinos-routine run day-brief\n  vinos-routine run day-brief --json   # the result only\n"
        "  vinos-routine run day-brief --dry-run   # what it would do and cost, not run\n",
    )
    p.add_argument("name", help="routine name")
    p.add_argument("--json", action="store_true", help="print the finished run as JSON")
    p.add_argument("--detach", action="store_true", help="queue it in the daemon and return")
    p.add_argument(
        "--no-daemon", action="store_true", help="run in this process even if the daemon is up"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved job and its estimated cost; call no model, run no tool",
    )
    p.add_argument("--gate", action="store_true", help="with --dry-run: run the [gate] check")
    p.set_defaults(func=run)


def _print_result(fin: dict[str, Any], as_json: bool, c: bool) -> int:
    try:
        _show_result(fin, as_json, c)
    except BrokenPipeError:
        silence_stdout()
    # A paused run did not fail: it waits for the person (exit status 0, as `ok`).
    return 0 if fin["status"] in (RunStatus.OK, RunStatus.NEEDS_YOU) else 1


def _show_result(fin: dict[str, Any], as_json: bool, c: bool) -> None:
    from routines.safetext import one_line
    from supervisor.cli.present import color, print_json

    if as_json:
        print_json(fin)
    else:
        status = fin["status"]
        line = status + (f" · {fin['outcome']}" if fin.get("outcome") else "")
        line += f" · ${fin.get('dollars') or 0:.4f}"
        name = {RunStatus.OK: "green", RunStatus.NEEDS_YOU: "yellow"}.get(status, "red")
        print(color(line, name, c))
        if fin.get("detail") and status != RunStatus.OK:
            # Indented and escaped: a command's stderr in the detail cannot pass for a line
            # of our own, nor move the cursor.
            for n, text in enumerate(str(fin["detail"]).splitlines()):
                print(("" if n == 0 else "  ") + one_line(text))
        if status == RunStatus.NEEDS_YOU:
            print("  paused until you answer: vinos-routine pending (then approve or deny)")
        if fin.get("output"):
            print(f"output: {one_line(str(fin['output']))}")
        if fin.get("disabled"):
            print(color(f"{fin['routine']} was disabled after 3 failures in a row", "red", c))


def _daemon_up(p: Any, name: str) -> str | None:
    """Why `--no-daemon` may not run now: a daemon holds its lock. Never beside a live daemon,
    outside its queue, max_concurrent and overlap rule
    (test_reliability_flood.py::test_a_daemon_holding_its_lock_but_silent_is_never_not_running)."""
    from supervisor.cli.client import daemon_locks, lock_holder

    holder = lock_holder(daemon_locks(p))
    if holder is None:
        return None
    return (
        f"the daemon (pid {holder or '?'}) is running: --no-daemon runs only when it is "
        f"not; run it through the daemon: vinos-routine run {name}"
    )


def run(args: argparse.Namespace) -> int:
    from ipc import Event
    from routines.spec.paths import paths
    from supervisor.cli.client import DaemonError, try_daemon
    from supervisor.cli.present import format_event, use_color

    p = paths()
    try:
        _, routine = find_routine(args.name, p, fix="")
    except NoSuchRoutine as exc:
        return die(str(exc))
    if args.dry_run:
        from supervisor.cli.commands.dryrun import dry_run

        return dry_run(routine, p, as_json=args.json, gate=args.gate)
    if args.gate:
        return die("--gate goes with --dry-run (a real run always runs its gate)")
    c = use_color()

    def show(ev: Event) -> None:
        # Called from inside the run (the in-process pool, or the daemon's stream): a reader
        # that left ends the streaming, never the run, which goes on and is recorded as it ends.
        if not args.json:
            try:
                status = ev.data.get("status")
                print(format_event(ev.kind, ev.text, c, status=status), flush=True)
            except BrokenPipeError:
                silence_stdout()

    if args.no_daemon and (refused := _daemon_up(p, args.name)):
        return die(refused)
    client = None if args.no_daemon else try_daemon(p)
    if client is not None:
        with client:
            try:
                fin = client.request(
                    "run",
                    # VINOS_ROUTINE_DEBUG=1 reaches the worker through its job, not the
                    # daemon's environment (tests/supervisor/test_daemon_debug.py).
                    {"name": args.name, "detach": args.detach, "debug": _debug()},
                    on_event=show,
                )
            except DaemonError as exc:
                return die(str(exc))
        if args.detach:
            print(f"queued: {fin['run_id']} (follow it: vinos-routine logs {args.name} --follow)")
            return 0
        return _print_result(fin, args.json, c)

    return run_here(routine=routine, p=p, show=show, c=c, as_json=args.json, detach=args.detach)


def _debug() -> bool:
    return os.environ.get("VINOS_ROUTINE_DEBUG") == "1"


def run_here(
    *,
    routine: Any,
    p: Any,
    show: Any,
    c: bool,
    as_json: bool,
    detach: bool = False,
    reply: Any = None,
    done: Callable[[dict[str, Any], bool, bool], int] | None = None,
) -> int:
    """The run (`reply`: a reply run, for `reply`) in this process: no daemon holds the lock
    (checked by the caller). `done` prints the finished run (default `_print_result`)."""
    from routines.spec.config import ConfigInvalid, load_config
    from supervisor.cli.present import format_event

    if os.geteuid() == 0:
        from routines.product import ROOT_REFUSAL

        return die(ROOT_REFUSAL)
    if detach:
        return die(
            "--detach needs the daemon; start it: systemctl --user enable --now vinos-routined"
        )
    try:
        config = load_config(p.config_file)
    except ConfigInvalid as exc:
        return die(f"config.toml is invalid:\n{exc}")
    from supervisor.cli.inproc import Busy, run_in_process

    if not as_json:
        print(
            format_event("log", f"no daemon running: running {routine.name} in this process", c),
            file=sys.stderr,
        )
    try:
        fin = run_in_process(routine, p, config, show, reply=reply)
    except Busy as exc:
        return die(str(exc))
    return (done or _print_result)(fin, as_json, c)
