"""`vinos-routine reply RUN_ID TEXT`: answer a run. A new manual run of its routine continues
that run's conversation with TEXT as the next user turn (supervisor/engine/reply.py), streamed like
`run`: through the daemon when it is up, in this process otherwise."""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.cli.commands.common import NoSuchRoutine, add_parser, die, find_entry

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "reply",
        "answer a run: continue its conversation as a new run",
        '  vinos-routine reply 20261203T070012-inbox-3f9a1c "make the second draft shorter"\n'
        "  vinos-routine history inbox      # the RUN column has the ids\n",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the run to answer (from `history`)")
    p.add_argument("text", nargs="+", metavar="TEXT", help="what to tell the routine")
    p.add_argument("--json", action="store_true", help="print the finished run as JSON")
    p.add_argument(
        "--no-daemon", action="store_true", help="run in this process even if the daemon is up"
    )
    p.set_defaults(func=run)


def _prepare(p: Any, run_id: str, text: str) -> tuple[Any, Any]:
    """The routine and the reply, checked here first to say what is wrong before anything
    starts (whoever runs it checks again: the files may change in between). ReplyRefused."""
    from contextlib import closing

    from routines.spec import Routine
    from supervisor.engine.reply import ReplyRefused, prepare_reply
    from supervisor.fleet.view import cli_ledger

    def routine_of(name: str) -> Routine:
        try:
            entry, _ = find_entry(name, p)
        except NoSuchRoutine as exc:
            raise ReplyRefused(f"the run's routine is gone: {exc}") from None
        if entry.routine is None:
            errors = "\n".join(str(e) for e in entry.errors)
            raise ReplyRefused(f"{name} is invalid now; fix it first:\n{errors}")
        return entry.routine

    with closing(cli_ledger(p)) as ledger:
        return prepare_reply(ledger, p, routine_of, run_id, text)


def run(args: argparse.Namespace) -> int:
    from ipc import Event
    from routines.safetext import one_line
    from routines.spec.paths import paths
    from supervisor.cli.client import DaemonError, try_daemon
    from supervisor.cli.commands.common import silence_stdout
    from supervisor.cli.commands.run import _daemon_up
    from supervisor.cli.present import format_event, use_color
    from supervisor.engine.reply import ReplyRefused

    p = paths()
    text = " ".join(args.text)
    try:
        routine, reply = _prepare(p, args.run_id, text)
    except ReplyRefused as exc:
        return die(str(exc))
    c = use_color()
    if not args.json:
        print(format_event("log", one_line(f"{routine.name}: {reply.detail()}"), c), flush=True)

    def show(ev: Event) -> None:
        if not args.json:
            try:
                print(format_event(ev.kind, ev.text, c), flush=True)
            except BrokenPipeError:
                silence_stdout()

    if args.no_daemon and (refused := _daemon_up(p, routine.name)):
        return die(refused)
    client = None if args.no_daemon else try_daemon(p)
    if client is None:
        from supervisor.cli.commands.run import run_here

        return run_here(
            routine=routine, p=p, show=show, c=c, as_json=args.json, reply=reply, done=_done
        )
    with client:
        try:
            fin = client.request("reply", {"run_id": args.run_id, "text": text}, on_event=show)
        except DaemonError as exc:
            return die(str(exc))
    return _done(fin, args.json, c)


def _done(fin: dict[str, Any], as_json: bool, c: bool) -> int:
    from supervisor.cli.commands.run import _print_result

    code = _print_result(fin, as_json, c)
    if not as_json and fin.get("run_id"):
        print(
            f"reply run: {fin['run_id']} (answer it in turn: vinos-routine reply {fin['run_id']} …)"
        )
    return code
