"""`vinos-routine brief`: the day's outputs across routines, newest first, with their outcome.

Outputs are the files state/NAME/YYYY-MM-DD-HHMM.md; their run (status, outcome, summary) comes
from the ledger. Showing an output in full marks it seen (see supervisor/seen.py);
`--unseen` lists what routines with open_on_login left for you, `--open` pages it ($PAGER) on
a terminal and hands it to xdg-open elsewhere (a launcher, waybar, a login hook).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from routines.runs import Outcome, RunStatus, counts_as_strike
from supervisor.commands.common import add_parser, die
from supervisor.seen import UNSEEN_DAYS

if TYPE_CHECKING:
    from routines.ledger import RunRow
    from routines.spec.paths import Paths

__all__ = ["Item", "gather", "register"]


def _day(text: str) -> date:
    today = datetime.now().astimezone().date()
    if text == "today":
        return today
    if text == "yesterday":
        return today - timedelta(days=1)
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected YYYY-MM-DD, today or yesterday, found {text!r}"
        ) from None


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "brief",
        "the day's outputs across routines, newest first, with their outcome",
        "  vinos-routine brief                  # today's, in full\n"
        "  vinos-routine brief --date yesterday --list\n"
        "  vinos-routine brief --unseen --open  # at login: what waits for you, in a viewer\n",
    )
    p.add_argument("--date", type=_day, metavar="D", help="YYYY-MM-DD, today or yesterday")
    p.add_argument(
        "--unseen",
        action="store_true",
        help=f"only outputs of open_on_login routines not shown yet (last {UNSEEN_DAYS} days "
        "unless --date)",
    )
    p.add_argument("--open", action="store_true", help="page them, or open them with xdg-open")
    p.add_argument("--list", action="store_true", help="one line per output, not the text")
    p.add_argument("--json", action="store_true", help="print JSON (marks nothing seen)")
    p.set_defaults(func=run)


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
            "text": _read(self.path),
        }


def _read(path: Path) -> str:
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


def gather(p: Paths, days: list[date]) -> tuple[list[Item], list[RunRow]]:
    """The outputs of `days`, newest first, and the runs of those days that failed."""
    from contextlib import closing
    from zoneinfo import ZoneInfo

    from routines.ledger import day_bounds
    from routines.schedule.tz import machine_timezone
    from routines.spec.outputs import output_files
    from routines.spec.registry import scan
    from supervisor.fleetview import cli_ledger
    from supervisor.seen import load_seen

    zone = ZoneInfo(machine_timezone())
    wanted = set(days)
    files = output_files(p.state_dir, wanted)
    on_login = {
        name: e.routine.output.open_on_login
        for name, e in scan(p).entries.items()
        if e.routine is not None
    }
    # Outputs are named in their routine's zone: look a day either side in the ledger.
    start = day_bounds(min(days), zone)[0] - timedelta(days=1)
    end = day_bounds(max(days), zone)[1] + timedelta(days=1)
    with closing(cli_ledger(p)) as ledger:
        rows = ledger.runs_between(start, end)
    by_file = {r.output_file: r for r in rows if r.output_file}
    seen = load_seen(p.state_dir)
    items = []
    for routine, path, day, mtime in files:
        row = by_file.get(str(path))
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
    failed = [
        r
        for r in rows
        if counts_as_strike(r.status)
        and r.started_at
        and datetime.fromisoformat(r.started_at.replace("Z", "+00:00")).astimezone(zone).date()
        in wanted
    ]
    return items, failed


def _label(item: Item) -> str:
    outcome = (item.outcome or item.status or "").replace("-", " ")
    parts = [item.routine, item.written.astimezone().strftime("%H:%M")]
    if outcome:
        parts.append(outcome)
    return " · ".join(parts)


def _combined(items: list[Item], heading: str) -> str:
    """One markdown document of the outputs, for a pager or a viewer."""
    parts = [f"# {heading}\n"]
    for item in items:
        parts.append(f"---\n\n*{_label(item)}*\n\n{_read(item.path).strip()}\n")
    return "\n".join(parts)


def run(args: argparse.Namespace) -> int:
    from routines.spec.paths import paths
    from supervisor.present import print_json

    p = paths()
    today = datetime.now().astimezone().date()
    if args.date:
        days = [args.date]
    elif args.unseen:
        days = [today - timedelta(days=n) for n in range(UNSEEN_DAYS)]
    else:
        days = [today]
    items, failed = gather(p, days)
    away = elsewhere(p, days)
    waiting = _waiting(p)
    if args.unseen:
        items = [i for i in items if i.open_on_login and not i.seen]
    heading = _heading(days, today)
    note = _pruned(p, days, today)
    if args.json:
        print_json(
            {
                "dates": [d.isoformat() for d in days],
                "outputs": [i.as_json() for i in items],
                "failed": [_failure_json(r) for r in failed],
                "pending": [{**w.as_json(), "state": str(w.state)} for w in waiting],
                "pruned": note,
                "elsewhere": away,
            }
        )
        return 0
    if note:
        print(note, file=sys.stderr)
    if args.open:
        if not items and not waiting:
            print("nothing new to show" if args.unseen else f"no outputs for {heading}")
            return 0
        code = _open(p, _pending_text(waiting) + _combined(items, heading), days[0])
        if code == 0:
            _mark(p, items)
        return code
    if waiting:
        print(_pending_text(waiting), end="")
    _print(items, failed, heading, args)
    if away:
        where = ", ".join(f"{n} on {m}" for m, n in sorted(away.items()))
        print(f"\nOn other machines (outputs stay where they were made): {where}")
    if not args.list:
        _mark(p, items)
    return 0


def elsewhere(p: Paths, days: list[date]) -> dict[str, int]:
    """On a fleet: how many outputs of `days` other machines made, per machine; {} alone."""
    from zoneinfo import ZoneInfo

    from routines.ledger import day_bounds
    from routines.schedule.tz import machine_timezone
    from supervisor.fleetview import config_or_default

    fleet = config_or_default(p).fleet
    if fleet is None:
        return {}
    from routines.ledger.postgres import PgLedger

    zone = ZoneInfo(machine_timezone())
    start, end = day_bounds(min(days), zone)[0], day_bounds(max(days), zone)[1]
    with PgLedger(fleet.database, fleet.machine) as ledger:
        found = ledger.fleet_runs_between(start, end)
    out: dict[str, int] = {}
    for f in found:
        if f.machine != fleet.machine and f.row.output_file:
            out[f.machine] = out.get(f.machine, 0) + 1
    return out


def _waiting(p: Paths) -> list[Any]:
    """The proposals waiting for a decision (expired and invalidated ones marked first)."""
    from routines.ledger import Ledger
    from supervisor.commands.approvals import fresh_waiting

    if not p.ledger.exists():
        return []
    with Ledger(p.ledger) as ledger:
        waiting, _ = fresh_waiting(ledger, datetime.now(UTC))
    return waiting


def _pending_text(waiting: list[Any]) -> str:
    """The top of the brief: each waiting proposal with the commands that decide it."""
    from routines.safetext import one_line

    if not waiting:
        return ""
    n = len(waiting)
    lines = [f"{n} action{'s' if n != 1 else ''} wait{'s' if n == 1 else ''} for your decision:"]
    for w in waiting:
        lines.append(
            f"  #{w.id} {one_line(w.routine)} · {one_line(w.action)}: {one_line(w.summary)}"
        )
        lines.append(f"      vinos-routine approve {w.id}   ·   vinos-routine deny {w.id}")
    return "\n".join(lines) + "\n\n"


def _pruned(p: Paths, days: list[date], today: date) -> str | None:
    """A note when a day asked for is past output retention (its outputs were deleted)."""
    from supervisor.retention import keep_days, pruned_note

    keep = keep_days(p.config_file)
    if min(days) >= today - timedelta(days=keep):
        return None
    return pruned_note("outputs", keep)


def _mark(p: Paths, items: list[Item]) -> None:
    from supervisor.seen import mark_seen

    try:
        mark_seen(p.state_dir, [i.key for i in items])
    except OSError as exc:  # a read-only state dir: the brief was shown all the same
        print(
            f"vinos-routine: could not record what was shown ({exc.strerror}: {exc.filename})",
            file=sys.stderr,
        )


def _heading(days: list[date], today: date) -> str:
    if len(days) > 1:
        return f"Brief · {days[-1].strftime('%a %d %b')} – {days[0].strftime('%a %d %b %Y')}"
    day = days[0]
    name = "today" if day == today else "yesterday" if day == today - timedelta(1) else ""
    return f"Brief · {day.strftime('%a %d %b %Y')}" + (f" ({name})" if name else "")


def _failure_json(r: RunRow) -> dict[str, Any]:
    return {
        "routine": r.routine,
        "status": r.status,
        "started_at": r.started_at,
        "detail": r.detail,
        "run_id": r.run_id,
    }


def _print(items: list[Item], failed: list[RunRow], heading: str, args: argparse.Namespace) -> None:
    from routines.safetext import one_line
    from supervisor.present import color, table, use_color, visible

    c = use_color()
    new = sum(1 for i in items if not i.seen)
    count = f"{len(items)} output{'s' if len(items) != 1 else ''}"
    print(color(heading, "bold", c) + f" · {count}" + (f" ({new} new)" if new else ""))
    if not items:
        hint = "nothing new" if args.unseen else "no routine wrote an output on this day"
        print(f"  {hint}")
    elif args.list:
        rows = [
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
        table(["TIME", "ROUTINE", "OUTCOME", "TITLE", "", "FILE"], rows)
    else:
        for item in items:
            rule = f"── {_label(item)}" + ("" if item.seen else " · new") + " "
            print()
            print(color(rule.ljust(72, "─"), _outcome_color(item), c))
            # Outputs hold what a model wrote: its escape sequences show, they do not act.
            print(visible(_read(item.path).rstrip()))
    for r in failed:
        when = (r.started_at or "")[11:16]
        line = f"{r.routine} {r.status} (started {when} UTC): {(r.detail or '')[:200]}"
        print(color(f"! {one_line(line)}", "red", c))


def _outcome_color(item: Item) -> str:
    if item.outcome == Outcome.NEEDS_ATTENTION:
        return "yellow"
    if item.status not in (None, RunStatus.OK):
        return "red"
    return "dim"


def _outcome_text(item: Item, c: bool) -> str:
    from supervisor.present import color

    text = (item.outcome or item.status or "—").replace("-", " ")
    return color(text, _outcome_color(item), c) if item.outcome == Outcome.NEEDS_ATTENTION else text


def _open(p: Paths, text: str, day: date) -> int:
    """Page `text` on a terminal; elsewhere write it to a private file and xdg-open it."""
    import shutil
    import subprocess

    if sys.stdout.isatty():
        pager = os.environ.get("PAGER") or ("less" if shutil.which("less") else "more")
        env = dict(os.environ)
        env.setdefault("LESS", "FRX")
        try:
            subprocess.run(pager, shell=True, input=text.encode("utf-8"), env=env, check=False)
        except OSError as exc:
            return die(f"cannot start the pager {pager!r}: {exc.strerror}")
        return 0
    from routines.store import write_atomic

    p.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = p.runtime_dir / f"brief-{day.isoformat()}.md"
    write_atomic(target, text.encode("utf-8"), mode=0o600)
    opener = shutil.which("xdg-open")
    if opener is None:
        return die(f"xdg-open not found (install xdg-utils); the brief is at {target}")
    try:
        code = subprocess.run(
            [opener, str(target)], stdin=subprocess.DEVNULL, check=False
        ).returncode
    except OSError as exc:
        return die(f"cannot run xdg-open: {exc.strerror}; the brief is at {target}")
    if code != 0:
        return die(f"xdg-open failed (exit {code}); the brief is at {target}")
    return 0
