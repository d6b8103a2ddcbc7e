"""`history NAME`: a routine's runs, its compacted days and its proposed actions.

`gather` reads the ledger; `cells` and `thread_lines` build what is shown from that data
alone (tests/supervisor/test_views.py); `render` turns it into the text `history` prints.
`show` is the command's flow, run by the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from routines.runs import STRIKES, RunStatus, counts_as_strike

if TYPE_CHECKING:
    from collections.abc import Callable

    from routines.ledger import RunRow
    from routines.ledger.rundays import DaySummary
    from routines.proposals import Proposal
    from routines.query.runs import ThreadRun
    from routines.spec.paths import Paths

__all__ = [
    "History",
    "action_line",
    "cells",
    "gather",
    "headers",
    "json_values",
    "render",
    "said",
    "show",
    "thread_json",
    "thread_lines",
]

# What a compacted day's line counts besides `ok`, in this order.
_DAY_PROBLEMS = (RunStatus.FAILED, RunStatus.TIMEOUT, RunStatus.INTERRUPTED, RunStatus.BUDGET)


@dataclass(frozen=True, slots=True)
class History:
    """What `history NAME` shows: the newest runs, on a fleet each one's machine and this
    machine's name (None alone), the compacted days that follow them, and the proposals."""

    runs: Sequence[RunRow]
    machines: Sequence[str] | None
    this: str | None
    days: Sequence[DaySummary]
    actions: Sequence[Proposal]

    @property
    def empty(self) -> bool:
        return not self.runs and not self.days


def gather(ledger: Any, name: str, limit: int) -> History:
    """The newest `limit` lines of `name`'s history (the read model's, routines.query.runs)
    and the routine's proposed actions, from the same ledger (the fleet's on a fleet)."""
    from routines.proposals import for_routine
    from routines.query.runs import run_history

    h = run_history(ledger, name, limit)
    return History(h.runs, h.machines, h.this, h.days, for_routine(ledger, name, limit))


def json_values(h: History) -> list[dict[str, Any]]:
    """`history --json`: each run (with its machine on a fleet), each compacted day, then
    the proposed actions, as the text view lists them after the table."""
    if h.machines is None:
        runs = [r.as_json() for r in h.runs]
    else:
        runs = [{**r.as_json(), "machine": m} for r, m in zip(h.runs, h.machines, strict=True)]
    found = [{"kind": "proposal", **a.as_json(), "state": str(a.state)} for a in h.actions]
    return runs + [d.as_json() for d in h.days] + found


def headers(fleet: bool) -> list[str]:
    return [
        "RUN",
        "STARTED (UTC)",
        *(["MACHINE"] if fleet else []),
        "TRIGGER",
        "STATUS",
        "OUTCOME",
        "ROUTE",
        "TOKENS",
        "COST",
        "TIME",
        "DETAIL",
    ]


def _tokens(plain: int, local: int) -> str:
    return f"{plain}" + (f" (+{local} local)" if local else "")


def _status(status: str, c: bool) -> str:
    from supervisor.cli.present import color

    if counts_as_strike(status):
        return color(status, "red", c)
    if status == RunStatus.OK:
        return color(status, "green", c)
    return status


def _run_cells(r: RunRow, c: bool) -> list[str]:
    from routines.safetext import one_line

    # A reply names the run it answers (`history NAME --thread RUN_ID` shows them all).
    replied = f"↩ {r.parent_run_id} " if r.parent_run_id else ""
    return [
        r.run_id or "",
        (r.started_at or "")[:19].replace("T", " "),
        r.trigger or "",
        _status(r.status or "?", c),
        r.outcome or "",
        r.route or "",
        _tokens(
            (r.input_tokens or 0) + (r.output_tokens or 0),
            (r.local_input_tokens or 0) + (r.local_output_tokens or 0),
        ),
        f"${r.dollars or 0:.4f}",
        f"{r.duration_sec:.1f}s" if r.duration_sec is not None else "",
        one_line(replied + (r.detail or "")[:60]),  # a command's stderr can be in it
    ]


def _with_machine(cells: list[str], where: str, this: str | None, output: bool) -> list[str]:
    """A run's line on a fleet: its MACHINE after RUN and STARTED, and where its output is
    when another machine made it (outputs stay where they were made)."""
    from routines.safetext import one_line

    detail = cells[-1]
    if output and where != this:
        detail = f"(output on {one_line(where)}) " + detail
    return [*cells[:2], one_line(where), *cells[2:-1], detail]


def _day_cells(d: DaySummary, fleet: bool, c: bool) -> list[str]:
    from supervisor.cli.present import color

    counts = d.counts
    bad = sum(counts[s] for s in STRIKES)
    parts = ", ".join(
        [f"{counts['ok']} ok"] + [f"{counts[s]} {s}" for s in _DAY_PROBLEMS if counts[s]]
    )
    return [
        "",
        f"{d.day} (day)",
        *([""] if fleet else []),
        f"{d.runs} runs",
        color(parts, "red", c) if bad else parts,
        "",
        "",
        _tokens(
            counts["input_tokens"] + counts["output_tokens"],
            counts["local_input_tokens"] + counts["local_output_tokens"],
        ),
        f"${d.dollars:.4f}",
        f"{counts['duration_ms'] / 1000:.0f}s",
        "compacted: one line for the day",
    ]


def cells(h: History, c: bool) -> list[list[str]]:
    """The table's rows, under `headers(h.machines is not None)`; `c`: with colour."""
    out = [_run_cells(r, c) for r in h.runs]
    if h.machines is not None:
        out = [
            _with_machine(row, where, h.this, bool(r.output_file))
            for row, r, where in zip(out, h.runs, h.machines, strict=True)
        ]
    fleet = h.machines is not None
    return out + [_day_cells(d, fleet, c) for d in h.days]


def action_line(a: Proposal) -> str:
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


def _action_lines(actions: Sequence[Proposal]) -> list[str]:
    from routines.safetext import one_line

    if not actions:
        return []
    out = ["", f"Actions proposed ({len(actions)}, newest first):"]
    for a in actions:
        out.append("  " + action_line(a))
        if a.output:
            first = next((ln for ln in a.output.splitlines() if ln.strip()), "")
            out.append(f"      output: {one_line(first[:100])}")
    return out


def render(h: History, c: bool) -> str:
    """The text of `history NAME` for a routine with runs or days."""
    import io

    from supervisor.cli.present import table

    out = io.StringIO()
    table(headers(h.machines is not None), cells(h, c), out)
    return out.getvalue() + "".join(line + "\n" for line in _action_lines(h.actions))


def show(name: str, n: int, as_json: bool) -> int:
    """`history NAME -n N [--json]`: gather, then print."""
    from contextlib import closing

    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from supervisor.cli.present import die, print_json_lines, use_color
    from supervisor.fleet.view import cli_ledger

    p = paths()
    with closing(cli_ledger(p)) as ledger:
        h = gather(ledger, name, max(1, n))
    if h.empty and (registry := scan(p)).get(name) is None:
        return die(registry.unknown(name))
    if as_json:
        print_json_lines(json_values(h))
        return 0
    if h.empty:
        print(f"{name} has not run yet")
        return 0
    print(render(h, use_color()), end="")
    return 0


def said(p: Paths) -> Callable[[RunRow], str]:
    """What the person wrote to start a reply, read from the run's conversation record."""
    from routines import conversation

    def read(r: RunRow) -> str:
        try:
            record = conversation.load(p.routine_state(r.routine), r.run_id or "")
        except conversation.ConversationInvalid:
            record = None
        texts = record.user_texts() if record else []
        return texts[-1] if texts else ""

    return read


def thread_json(items: Sequence[ThreadRun]) -> list[dict[str, Any]]:
    return [{**i.row.as_json(), "depth": i.depth, "reply_text": i.said} for i in items]


def thread_lines(items: Sequence[ThreadRun]) -> list[str]:
    """The run that began the conversation, then each reply under the run it answers."""
    from routines.safetext import one_line

    out = []
    for i in items:
        r, d = i.row, i.depth
        pad = "  " * d + ("↳ " if d else "")
        status = (r.status or "?") + (f" · {r.outcome}" if r.outcome else "")
        started = (r.started_at or "")[:19].replace("T", " ")
        out.append(one_line(f"{pad}{r.run_id}  {started}  {r.trigger or ''}  {status}"))
        if i.said:
            out.append(one_line(f"{'  ' * d}    you: {i.said[:200]}"))
        if r.detail:
            out.append(one_line(f"{'  ' * d}    {r.detail[:200]}"))
    return out
