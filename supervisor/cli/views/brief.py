"""`brief`: the day's outputs across routines, newest first, with their outcome.

`gather` reads the outputs (state/NAME/YYYY-MM-DD-HHMM.md) and their runs from the ledger;
`heading`, `pending_text`, `list_cells`, `json_value` and `render` build what `brief` shows
from that data alone (tests/supervisor/test_views.py). An output's text is read through the
`read` each takes, `read_output` by default, never through a symlink. Marking what was shown
seen and opening a pager stay in the command (supervisor/cli/commands/brief.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from routines.runs import Outcome, RunStatus

if TYPE_CHECKING:
    from routines.ledger import RunRow
    from routines.proposals import Proposal
    from routines.query.runs import DayRuns, Quiet
    from routines.spec.paths import Paths

__all__ = [
    "LIST_HEADERS",
    "Item",
    "document",
    "failure_json",
    "gather",
    "heading",
    "json_value",
    "label",
    "list_cells",
    "menu_lines",
    "pending_text",
    "quiet_line",
    "read_output",
    "render",
]

Reader = Callable[[Path], str]


@dataclass(frozen=True, slots=True)
class Item:
    """One output file and the run that wrote it."""

    routine: str
    path: Path
    day: date
    mtime: float
    title: str
    open_on_login: bool
    seen: bool
    status: str | None
    outcome: str | None
    summary: str
    started_at: str | None

    @property
    def key(self) -> str:
        return f"{self.routine}/{self.path.name}"

    @property
    def written(self) -> datetime:
        return datetime.fromtimestamp(self.mtime, UTC)

    def as_json(self) -> dict[str, Any]:
        return {
            "routine": self.routine,
            "file": str(self.path),
            "date": self.day.isoformat(),
            "written_at": self.written.isoformat(),
            "title": self.title,
            "status": self.status,
            "outcome": self.outcome,
            "summary": self.summary,
            "started_at": self.started_at,
            "open_on_login": self.open_on_login,
            "seen": self.seen,
            "text": read_output(self.path),
        }


def quiet_line(q: Quiet) -> str:
    """A routine's nothing-to-do runs as one line of the brief."""
    runs = "1 run" if q.runs == 1 else f"{q.runs} runs"
    return f"{q.routine}: nothing to do ({runs}; last {q.last_at[11:16]} UTC" + (
        f": {q.last})" if q.last else ")"
    )


def read_output(path: Path) -> str:
    """An output's text; never through a symlink (a link planted where an output was would
    otherwise print ~/.ssh/id_rsa or /proc/self/environ)."""
    from routines.store import read_regular

    data = read_regular(path)
    if data is None:
        return f"(cannot read {path}: missing, a symlink, or not a regular file)"
    return data.decode("utf-8", errors="replace")


def _title(path: Path) -> str:
    from routines.store import read_regular

    head = (read_regular(path, 4096, head=True) or b"").decode("utf-8", errors="replace")
    for line in head.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
        if line.strip():
            return line.strip()[:80]
    return ""


def gather(p: Paths, days: list[date]) -> tuple[list[Item], DayRuns]:
    """The outputs of `days`, newest first, without those of nothing-to-do runs, and the
    read model's runs of those days (routines.query.runs: what failed, the nothing-to-do
    runs a line per routine, who waits for a person, on a fleet the outputs elsewhere)."""
    from contextlib import closing
    from zoneinfo import ZoneInfo

    from routines.query.runs import day_runs
    from routines.schedule.tz import machine_timezone
    from routines.spec.outputs import output_files
    from routines.spec.registry import scan
    from supervisor.fleet.view import cli_ledger
    from supervisor.seen import load_seen

    files = output_files(p.state_dir, set(days))
    on_login = {
        name: e.routine.output.open_on_login
        for name, e in scan(p).entries.items()
        if e.routine is not None
    }
    with closing(cli_ledger(p)) as ledger:
        runs = day_runs(ledger, days, ZoneInfo(machine_timezone()))
    seen = load_seen(p.state_dir)
    items = []
    for routine, path, day, mtime in files:
        row = runs.by_output.get(str(path))
        if row is not None and row.outcome == Outcome.NOTHING_TO_DO:
            continue  # folded into the routine's quiet line
        items.append(
            Item(
                routine=routine,
                path=path,
                day=day,
                mtime=mtime,
                title=_title(path),
                open_on_login=on_login.get(routine, False),
                seen=f"{routine}/{path.name}" in seen,
                status=row.status if row else None,
                outcome=row.outcome if row else None,
                summary=(row.detail or "") if row else "",
                started_at=row.started_at if row else None,
            )
        )
    items.sort(key=lambda i: (i.mtime, i.key), reverse=True)
    return items, runs


def label(item: Item) -> str:
    outcome = (item.outcome or item.status or "").replace("-", " ")
    parts = [item.routine, item.written.astimezone().strftime("%H:%M")]
    if outcome:
        parts.append(outcome)
    return " · ".join(parts)


def document(items: Sequence[Item], heading: str, read: Reader = read_output) -> str:
    """One markdown document of the outputs, for a pager or a viewer."""
    parts = [f"# {heading}\n"]
    for item in items:
        parts.append(f"---\n\n*{label(item)}*\n\n{read(item.path).strip()}\n")
    return "\n".join(parts)


def pending_text(waiting: Sequence[Proposal], paused: Collection[str] = ()) -> str:
    """The top of the brief: each waiting proposal with the commands that decide it; those
    whose run paused for the answer (`paused`: run ids) counted first as "needs you"."""
    from routines.safetext import one_line

    if not waiting:
        return ""
    n = len(waiting)
    needs = sum(1 for w in waiting if w.run_id in paused)
    lines = [f"Needs you: {needs} paused run{'s' if needs != 1 else ''}"] if needs else []
    lines.append(
        f"{n} action{'s' if n != 1 else ''} wait{'s' if n == 1 else ''} for your decision:"
    )
    for w in waiting:
        mark = " (its run is paused)" if w.run_id in paused else ""
        lines.append(
            f"  #{w.id} {one_line(w.routine)} · {one_line(w.action)}: {one_line(w.summary)}{mark}"
        )
        lines.append(f"      vinos-routine approve {w.id}   ·   vinos-routine deny {w.id}")
    return "\n".join(lines) + "\n\n"


def heading(days: Sequence[date], today: date) -> str:
    if len(days) > 1:
        return f"Brief · {days[-1].strftime('%a %d %b')} – {days[0].strftime('%a %d %b %Y')}"
    day = days[0]
    name = "today" if day == today else "yesterday" if day == today - timedelta(1) else ""
    return f"Brief · {day.strftime('%a %d %b %Y')}" + (f" ({name})" if name else "")


def failure_json(r: RunRow) -> dict[str, Any]:
    return {
        "routine": r.routine,
        "status": r.status,
        "started_at": r.started_at,
        "detail": r.detail,
        "run_id": r.run_id,
    }


def json_value(
    days: Sequence[date],
    items: Sequence[Item],
    failed: Sequence[RunRow],
    waiting: Sequence[Proposal],
    pruned: str | None,
    away: Mapping[str, int],
    quiet: Sequence[Quiet] = (),
) -> dict[str, Any]:
    """`brief --json` (each output with its text)."""
    return {
        "quiet": [q.as_json() for q in quiet],
        "dates": [d.isoformat() for d in days],
        "outputs": [i.as_json() for i in items],
        "failed": [failure_json(r) for r in failed],
        "pending": [{**w.as_json(), "state": str(w.state)} for w in waiting],
        "pruned": pruned,
        "elsewhere": dict(away),
    }


def list_cells(items: Sequence[Item], c: bool) -> list[list[str]]:
    """`brief --list`: one row an output, under LIST_HEADERS."""
    from supervisor.cli.present import color, visible

    return [
        [
            i.written.astimezone().strftime("%H:%M"),
            i.routine,
            _outcome_text(i, c),
            visible(i.title),
            "" if i.seen else color("new", "blue", c),
            str(i.path),
        ]
        for i in items
    ]


LIST_HEADERS = ("TIME", "ROUTINE", "OUTCOME", "TITLE", "", "FILE")


def menu_lines(items: Sequence[Item]) -> list[str]:
    """`brief --menu`: one line an output for a launcher's menu (packaging/walker's provider
    pipes the labels to `walker --dmenu` and opens the path of the one chosen): the label, a
    tab, the file. The label is one safe line without a tab (a title is the model's text);
    a file whose path could break the line is left out (ours never can: routine names and
    output names are [a-z0-9-.]). Tested as data: tests/supervisor/test_views.py."""
    from routines.safetext import one_line

    out = []
    for i in items:
        path = str(i.path)
        if "\t" in path or "\n" in path:
            continue
        parts = [i.written.astimezone().strftime("%H:%M"), i.routine]
        if outcome := (i.outcome or i.status or "").replace("-", " "):
            parts.append(outcome)
        parts.append(one_line(i.title).replace("\t", " ") or i.path.name)
        if not i.seen:
            parts.append("new")
        out.append(" · ".join(parts) + "\t" + path)
    return out


def render(
    items: Sequence[Item],
    failed: Sequence[RunRow],
    heading: str,
    *,
    unseen: bool,
    as_list: bool,
    c: bool,
    read: Reader = read_output,
    quiet: Sequence[Quiet] = (),
) -> str:
    """The brief under its heading: a line an output (`as_list`) or each output in full,
    then a line per failed run; `unseen`: only what waits to be seen was asked for."""
    import io

    from routines.safetext import one_line
    from supervisor.cli.present import color, table, visible

    out = io.StringIO()
    new = sum(1 for i in items if not i.seen)
    count = f"{len(items)} output{'s' if len(items) != 1 else ''}"
    out.write(color(heading, "bold", c) + f" · {count}" + (f" ({new} new)" if new else "") + "\n")
    if not items and not quiet:
        hint = "nothing new" if unseen else "no routine wrote an output on this day"
        out.write(f"  {hint}\n")
    elif as_list:
        table(LIST_HEADERS, list_cells(items, c), out)
    else:
        for item in items:
            rule = f"── {label(item)}" + ("" if item.seen else " · new") + " "
            out.write("\n" + color(rule.ljust(72, "─"), _outcome_color(item), c) + "\n")
            # Outputs hold what a model wrote: its escape sequences show, they do not act.
            out.write(visible(read(item.path).rstrip()) + "\n")
    for q in quiet:  # nothing to report: one line per routine, whatever the count
        out.write(color(f"· {one_line(quiet_line(q))}", "dim", c) + "\n")
    for r in failed:
        when = (r.started_at or "")[11:16]
        line = f"{r.routine} {r.status} (started {when} UTC): {(r.detail or '')[:200]}"
        out.write(color(f"! {one_line(line)}", "red", c) + "\n")
    return out.getvalue()


def _outcome_color(item: Item) -> str:
    if item.outcome == Outcome.NEEDS_ATTENTION:
        return "yellow"
    if item.status not in (None, RunStatus.OK):
        return "red"
    return "dim"


def _outcome_text(item: Item, c: bool) -> str:
    from supervisor.cli.present import color

    text = (item.outcome or item.status or "—").replace("-", " ")
    return color(text, _outcome_color(item), c) if item.outcome == Outcome.NEEDS_ATTENTION else text
