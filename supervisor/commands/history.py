"""`vinos-routine history NAME`: the ledger's rows for a routine, newest first.

Runs older than `[ledger].keep_runs_days`, or beyond a routine's newest `keep_runs_max`, were
compacted into one line per day (the count by status, dollars, tokens); those days follow the
runs, as summary lines.

On a fleet (config.toml [fleet]) the runs are every machine's, with a MACHINE column; an
output stays on the machine that ran it, and the line says where.
"""

from __future__ import annotations

import argparse
from typing import Any

from routines.runs import STRIKES, RunStatus, counts_as_strike
from supervisor.commands.common import NoSuchRoutine, add_parser, die, find_entry

__all__ = ["register"]

# What a compacted day's line counts besides `ok`, in this order.
_DAY_PROBLEMS = (RunStatus.FAILED, RunStatus.TIMEOUT, RunStatus.INTERRUPTED, RunStatus.BUDGET)


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "history",
        "a routine's runs from the ledger, newest first",
        "  vinos-routine history day-brief -n 5\n"
        "  vinos-routine history day-brief --json | jq .dollars\n",
    )
    p.add_argument("name", help="routine name")
    p.add_argument("-n", type=int, default=20, metavar="N", help="how many runs (default 20)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument(
        "--thread",
        metavar="RUN_ID",
        help="the conversation RUN_ID belongs to: its first run and every reply (`reply`)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from contextlib import closing

    from routines.safetext import one_line
    from routines.spec.paths import paths
    from supervisor.fleetview import cli_ledger
    from supervisor.present import color, print_json_lines, table, use_color

    p = paths()
    if args.thread:
        return _thread(args, p)
    limit = max(1, args.n)
    with closing(cli_ledger(p)) as ledger:
        rows, machines, this, actions = _runs(ledger, args.name, limit)
        # Compacted days are older than every whole run (the compaction line is a day
        # boundary): they fill what the runs leave of the -n lines.
        days = ledger.days(args.name, limit - len(rows)) if len(rows) < limit else []
    if not rows and not days:
        try:
            find_entry(args.name, p)
        except NoSuchRoutine as exc:
            return die(str(exc))
    if args.json:
        # Then the routine's proposed actions, as the text view lists them after the table.
        found = [{"kind": "proposal", **a.as_json(), "state": str(a.state)} for a in actions]
        print_json_lines(_json(rows, machines) + [d.as_json() for d in days] + found)
        return 0
    if not rows and not days:
        print(f"{args.name} has not run yet")
        return 0
    c = use_color()
    out = []
    for i, r in enumerate(rows):
        status = r.status or "?"
        if counts_as_strike(status):
            status = color(status, "red", c)
        elif status == RunStatus.OK:
            status = color(status, "green", c)
        tokens = (r.input_tokens or 0) + (r.output_tokens or 0)
        local = (r.local_input_tokens or 0) + (r.local_output_tokens or 0)
        # A reply names the run it answers (`history NAME --thread RUN_ID` shows them all).
        replied = f"↩ {r.parent_run_id} " if r.parent_run_id else ""
        out.append(
            [
                r.run_id or "",
                (r.started_at or "")[:19].replace("T", " "),
                r.trigger or "",
                status,
                r.outcome or "",
                r.route or "",
                f"{tokens}" + (f" (+{local} local)" if local else ""),
                f"${r.dollars or 0:.4f}",
                f"{r.duration_sec:.1f}s" if r.duration_sec is not None else "",
                one_line(replied + (r.detail or "")[:60]),  # a command's stderr can be in it
            ]
        )
        if machines is not None:
            _add_machine(out[-1], machines[i], this, bool(r.output_file))
    for d in days:
        counts = d.counts
        extra = [""] if machines is not None else []
        bad = sum(counts[s] for s in STRIKES)
        parts = [f"{counts['ok']} ok"] + [f"{counts[s]} {s}" for s in _DAY_PROBLEMS if counts[s]]
        tokens = counts["input_tokens"] + counts["output_tokens"]
        local = counts["local_input_tokens"] + counts["local_output_tokens"]
        out.append(
            [
                "",
                f"{d.day} (day)",
                *extra,
                f"{d.runs} runs",
                color(", ".join(parts), "red", c) if bad else ", ".join(parts),
                "",
                "",
                f"{tokens}" + (f" (+{local} local)" if local else ""),
                f"${d.dollars:.4f}",
                f"{counts['duration_ms'] / 1000:.0f}s",
                "compacted: one line for the day",
            ]
        )
    table(
        [
            "RUN",
            "STARTED (UTC)",
            *(["MACHINE"] if machines is not None else []),
            "TRIGGER",
            "STATUS",
            "OUTCOME",
            "ROUTE",
            "TOKENS",
            "COST",
            "TIME",
            "DETAIL",
        ],
        out,
    )
    if actions:
        print()
        print(f"Actions proposed ({len(actions)}, newest first):")
        for a in actions:
            print("  " + _action_line(a))
            if a.output:
                first = next((ln for ln in a.output.splitlines() if ln.strip()), "")
                print(f"      output: {one_line(first[:100])}")
    return 0


def _action_line(a: Any) -> str:
    """`#3 2026-12-03 13:29 send-reply · done by cli, exit 0 · Reply to Bob`."""
    from routines.safetext import one_line

    state = str(a.state)
    if state == "done":
        state += f" by {a.decided_by}, " + (
            f"exit {a.exit_status}" if a.exit_status is not None else "did not run to the end"
        )
    elif state == "denied" and a.why:
        state += f": {a.why}"
    elif state == "waiting":
        state += f": vinos-routine approve {a.id} | deny {a.id}"
    when = a.created_at[:16].replace("T", " ")
    return one_line(f"#{a.id} {when} {a.action} · {state} · {a.summary}")


def _json(rows: list[Any], machines: list[str] | None) -> list[dict[str, Any]]:
    """Each run as JSON, with its machine on a fleet."""
    if machines is None:
        return [r.as_json() for r in rows]
    return [{**r.as_json(), "machine": m} for r, m in zip(rows, machines, strict=True)]


def _add_machine(cells: list[str], where: str, this: str | None, output: bool) -> None:
    """A run's line on a fleet: its MACHINE after RUN and STARTED, and where its output is
    when another machine made it (outputs stay where they were made)."""
    from routines.safetext import one_line

    if output and where != this:
        cells[-1] = f"(output on {one_line(where)}) " + cells[-1]
    cells.insert(2, one_line(where))


def _runs(
    ledger: Any, name: str, limit: int
) -> tuple[list[Any], list[str] | None, str | None, list[Any]]:
    """The newest runs, each one's machine and this machine's name on a fleet (None alone),
    and the routine's proposed actions."""
    from routines.ledger import Ledger
    from routines.proposals import for_routine
    from routines.spec.paths import paths

    fleet_history = getattr(ledger, "fleet_history", None)
    if fleet_history is None:
        rows = ledger.history(name, limit)
        return rows, None, None, for_routine(ledger, name, limit)
    found = fleet_history(name, limit)
    # Proposed actions are kept in each machine's own ledger file (a fleet does not share them).
    actions: list[Any] = []
    if paths().ledger.exists():
        with Ledger(paths().ledger) as local:
            actions = for_routine(local, name, limit)
    return [f.row for f in found], [f.machine for f in found], ledger.machine, actions


def _thread(args: argparse.Namespace, p: Any) -> int:
    """One conversation: the run that began it, then each reply under the run it answers,
    with what the person said and what the run answered."""
    from contextlib import closing

    from routines import conversation
    from routines.safetext import one_line
    from supervisor.fleetview import cli_ledger
    from supervisor.present import print_json_lines

    with closing(cli_ledger(p)) as ledger:
        rows = ledger.thread(args.thread)
    rows = [r for r in rows if r.routine == args.name]
    if not rows:
        return die(f"{args.name} has no run {args.thread} (`vinos-routine history {args.name}`)")
    depth: dict[str | None, int] = {}
    items = []
    for r in rows:
        depth[r.run_id] = depth.get(r.parent_run_id, -1) + 1 if r.parent_run_id else 0
        said = ""
        if r.parent_run_id and r.run_id:
            try:
                record = conversation.load(p.routine_state(r.routine), r.run_id)
            except conversation.ConversationInvalid:
                record = None
            texts = record.user_texts() if record else []
            said = texts[-1] if texts else ""
        items.append((r, depth[r.run_id], said))
    if args.json:
        print_json_lines([{**r.as_json(), "depth": d, "reply_text": said} for r, d, said in items])
        return 0
    for r, d, said in items:
        pad = "  " * d + ("↳ " if d else "")
        status = (r.status or "?") + (f" · {r.outcome}" if r.outcome else "")
        started = (r.started_at or "")[:19].replace("T", " ")
        print(one_line(f"{pad}{r.run_id}  {started}  {r.trigger or ''}  {status}"))
        if said:
            print(one_line(f"{'  ' * d}    you: {said[:200]}"))
        if r.detail:
            print(one_line(f"{'  ' * d}    {r.detail[:200]}"))
    return 0
