"""What each page shows, gathered from the routine files, the read-only ledger and the
daemon's status. No web library here: plain dataclasses the templates render.

The routines' rows are the read model's (routines.query), the very rows `list`, `status` and
the bar show; this module adds what only the pages show (proposals, run pages, charts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from dashboard.charts import Layer, stacked_bars
from dashboard.files import MAX_OUTPUT, read_beneath, read_run_log
from dashboard.render import markdown
from ipc import RunStatus
from routines import proposals
from routines.ledger import RunRow, day_bounds, iso
from routines.ledger.api import LedgerAPI
from routines.query import RoutineRow, routine_rows
from routines.query.runs import one_run, run_history
from routines.safetext import one_line, visible
from routines.schedule import ScheduleError
from routines.schedule import explain as explain_schedule
from routines.spec import Routine, ScheduleSpec
from routines.spec.paths import Paths
from routines.spec.registry import Registry

__all__ = [
    "Explained",
    "Overview",
    "RoutinePage",
    "RunPage",
    "explain",
    "overview",
    "pulse",
    "routine_page",
    "run_page",
    "run_pulse",
]

CHART_DAYS = 30
HISTORY_ROWS = 5000
STATUS_ORDER = [s.value for s in RunStatus]


@dataclass(frozen=True, slots=True)
class Overview:
    routines: list[RoutineRow]
    daemon: dict[str, Any] | None  # the daemon's `status`, None when it is not running
    daemon_problem: str
    proposals: list[Waiting] = field(default_factory=list)  # newest first


@dataclass(frozen=True, slots=True)
class Waiting:
    """A proposed action waiting for a decision, as the overview lists it (its first lines)
    and as its own page shows it whole, with Approve and Deny (`full`)."""

    id: int
    routine: str
    action: str
    summary: str
    command: str
    input_head: str  # the first lines of the input
    input_bytes: int
    created_at: datetime
    expires_at: datetime
    edited: bool  # the routine file changed since: `approve` will refuse it (invalidated)
    paused: bool = False  # its run paused for this answer ("needs you"): it goes on once answered
    # A write_file request (permissions "ask"): `command` is the path, the input its content.
    write: bool = False
    # What Approve names: the input's fingerprint, so the action runs with the input this page
    # showed or not at all (supervisor/control/handlers.py decide, worker/actioncmd.py).
    shown: str = ""


INPUT_HEAD_LINES = 6


def waiting_proposals(
    registry: Registry,
    ledger: proposals.ProposalStore | None,
    now: datetime,
    paused: frozenset[str] = frozenset(),
) -> list[Waiting]:
    """Waiting, unexpired proposals, newest first; `paused`: the runs that wait for their
    answer. Reads
    only: the dashboard's ledger connection cannot write, so expiry and invalidation are
    shown, not recorded."""
    if ledger is None:
        return []
    out = []
    for p in proposals.waiting(ledger):
        w = _as_waiting(registry, p, paused, INPUT_HEAD_LINES)
        if w.expires_at > now:
            out.append(w)
    return out


def one_waiting(
    registry: Registry,
    ledger: proposals.ProposalStore | None,
    proposal_id: int,
    now: datetime,
    paused: frozenset[str] = frozenset(),
) -> Waiting | None:
    """One waiting, unexpired proposal with its whole input (its page), or None."""
    p = proposals.get(ledger, proposal_id) if ledger is not None else None
    if p is None or p.state is not proposals.ProposalState.WAITING:
        return None
    w = _as_waiting(registry, p, paused, None)
    return w if w.expires_at > now else None


def _as_waiting(
    registry: Registry, p: proposals.Proposal, paused: frozenset[str], head_lines: int | None
) -> Waiting:
    from routines.ledger import from_iso

    entry = registry.entries.get(p.routine)
    current = (
        proposals.fingerprint(entry.routine.text)
        if entry is not None and entry.valid and entry.routine is not None
        else None
    )
    # Escaped as the terminal shows them (routines.safetext): HTML escaping leaves bidi
    # controls and zero-width characters working, which could reorder or hide part of
    # the command or the input on the page.
    lines = [visible(line, newlines=False) for line in p.input.splitlines()]
    head = "\n".join(lines[:head_lines])
    if head_lines is not None and len(lines) > head_lines:
        head += f"\n… ({len(lines) - head_lines} more lines)"
    return Waiting(
        id=p.id,
        routine=p.routine,
        action=one_line(p.action),
        summary=one_line(p.summary),
        command=one_line(p.command),
        input_head=head,
        input_bytes=len(p.input.encode("utf-8", "surrogatepass")),
        created_at=from_iso(p.created_at),
        expires_at=from_iso(p.expires_at),
        edited=current != p.fingerprint,
        paused=p.run_id in paused,
        write=p.action == proposals.WRITE_ACTION,
        shown=proposals.fingerprint(p.input),
    )


def overview(
    registry: Registry,
    ledger: LedgerAPI | None,
    daemon: dict[str, Any] | None,
    daemon_problem: str,
    now: datetime,
) -> Overview:
    """The overview page: the routines' rows and what waits for the person, both from the
    run ledger (the fleet's on a fleet)."""
    # Only the daemon knows a last good version of a file that is invalid now.
    stale = daemon.get("stale", []) if daemon else ()
    lines = routine_rows(registry, ledger, now, stale=stale)
    return Overview(lines, daemon, daemon_problem, _waiting(registry, ledger, now))


def _waiting(registry: Registry, ledger: LedgerAPI | None, now: datetime) -> list[Waiting]:
    return waiting_proposals(registry, ledger, now, paused_runs(ledger))


def paused_runs(ledger: LedgerAPI | None) -> frozenset[str]:
    """The runs that wait for a person's answer (needs_you): their requests say so."""
    return frozenset(r.run_id for r in ledger.paused_runs()) if ledger is not None else frozenset()


def pulse(ledger: LedgerAPI | None) -> str:
    """Changes whenever a run is queued, starts or ends, or a routine is turned on or off:
    the overview's short poll compares it and refreshes only then."""
    if ledger is None:
        return "no-ledger"
    active = sorted((a.run_id, a.status) for a in ledger.active_runs())
    newest = [(r.id, r.status) for r in run_history(ledger, None, 1, days=False).runs]
    states = sorted(
        (s.routine, s.enabled_override, s.failure_streak) for s in ledger.states().values()
    )
    asked = [p.id for p in proposals.waiting(ledger)]
    import hashlib

    key = repr((active, newest, states, asked)).encode()
    return hashlib.blake2b(key, digest_size=8).hexdigest()


def run_pulse(p: Paths, ledger: LedgerAPI | None, run_id: str) -> str:
    """Changes when the run's status changes or its log grows (a run page follows it)."""
    run = one_run(ledger, run_id)
    if run is None:
        return "none"
    try:
        size = (p.routine_state(run.routine) / "runs" / f"{run_id}.jsonl").lstat().st_size
    except OSError:
        size = -1
    return f"{run.status}:{size}"


@dataclass(frozen=True, slots=True)
class Explained:
    """`schedule explain`'s content: the description, zone, OnCalendar form, next fires."""

    description: str
    zone: str
    cron: str | None
    oncalendar: tuple[str, ...]
    next: list[datetime]  # in `zone`
    note: str | None
    error: str | None


def explain(form: str, expression: str, zone: str, base: datetime, count: int = 5) -> Explained:
    """What `vinos-routine schedule explain` prints, for the playground and a routine page."""
    spec = ScheduleSpec(**{form: expression}, timezone=zone)  # type: ignore[arg-type]
    try:
        schedule, slots, note = explain_schedule(spec, base, count)
    except ScheduleError as exc:
        return Explained("", zone, None, (), [], None, str(exc))
    return Explained(
        schedule.description,
        schedule.zone,
        schedule.cron,
        tuple(schedule.oncalendar),
        [s.local for s in slots],
        note,
        None,
    )


@dataclass(frozen=True, slots=True)
class RoutinePage:
    line: RoutineRow
    path: Path
    explained: Explained | None
    history: list[RunRow]
    filters: dict[str, str]
    chart: str  # SVG
    tools: list[str]
    fire: bool = False  # [trigger] fire = true: the page offers a fire form with an input


def local_days(now: datetime, zone: ZoneInfo, count: int) -> list[date]:
    today = now.astimezone(zone).date()
    return [today - timedelta(days=n) for n in range(count - 1, -1, -1)]


def runs_by_status_chart(rows: list[RunRow], days: list[date], zone: ZoneInfo) -> str:
    counts: dict[str, dict[date, float]] = {}
    for r in rows:
        if not r.started_at or not r.status:
            continue
        day = datetime.fromisoformat(r.started_at.replace("Z", "+00:00")).astimezone(zone).date()
        per = counts.setdefault(r.status, {})
        per[day] = per.get(day, 0) + 1
    layers = [Layer(s, f"st-{s}", counts[s]) for s in STATUS_ORDER if s in counts]
    return stacked_bars(
        days, layers, fmt=lambda v: f"{v:.0f}", title=f"runs by status, last {len(days)} days"
    )


def routine_page(
    name: str,
    registry: Registry,
    ledger: LedgerAPI | None,
    now: datetime,
    zone: ZoneInfo,
    filters: dict[str, str],
    limit: int,
) -> RoutinePage | None:
    entry = registry.get(name)
    if entry is None:
        return None
    (line,) = routine_rows(registry, ledger, now, names=[name])
    r = entry.routine
    explained, tools = _routine_parts(r, now)
    # One read of the routine's newest runs serves the table and the chart (a routine that
    # ran more than HISTORY_ROWS times in 30 days shows its newest HISTORY_ROWS there).
    newest = run_history(ledger, name, HISTORY_ROWS, days=False).runs if ledger else ()
    rows = [h for h in newest if all(getattr(h, k) == v for k, v in filters.items() if v)]
    days = local_days(now, zone, CHART_DAYS)
    start = iso(day_bounds(days[0], zone)[0])
    recent = [h for h in newest if h.started_at and h.started_at >= start]
    rows = rows[:limit]
    return RoutinePage(
        line,
        entry.path,
        explained,
        rows,
        filters,
        runs_by_status_chart(recent, days, zone),
        tools,
        fire=bool(r is not None and r.trigger is not None and r.trigger.fire),
    )


def _routine_parts(r: Routine | None, now: datetime) -> tuple[Explained | None, list[str]]:
    """A routine page's schedule explained (none for a routine with only a [trigger]) and the
    tools it may use."""
    if r is None:
        return None, []
    explained = None
    if r.scheduled:
        explained = explain(r.schedule.form, r.schedule.expression, r.schedule.timezone, now)
    if r.agent:
        return explained, [str(t) for t in r.agent.tools]
    return explained, [f"command: {r.command.run}"] if r.command else []


@dataclass(frozen=True, slots=True)
class LogLine:
    ts: str
    kind: str
    text: str
    refused: bool


@dataclass(frozen=True, slots=True)
class RunPage:
    run: RunRow
    log: list[LogLine] | None
    tool_calls: list[LogLine]
    refused: list[LogLine]
    escalations: list[LogLine]
    output_html: str | None
    output_name: str | None


def run_page(p: Paths, ledger: LedgerAPI | None, run_id: str) -> RunPage | None:
    """The read model's run (whichever machine made it), its log and its output."""
    run = one_run(ledger, run_id)
    if run is None:
        return None
    state_dir = p.routine_state(run.routine)
    entries = read_run_log(state_dir, run_id)
    log = None
    if entries is not None:
        log = [
            LogLine(
                str(e.get("ts", ""))[11:23],
                str(e.get("kind", "")),
                str(e.get("text", "")),
                e.get("kind") == "tool_refused",
            )
            for e in entries
        ]
    lines = log or []
    output_html = output_name = None
    if run.output_file:
        output_name = Path(run.output_file).name
        data = read_beneath(state_dir, output_name, MAX_OUTPUT)
        if data is not None:
            output_html = markdown(data.decode("utf-8", "replace"))
    return RunPage(
        run=run,
        log=log,
        tool_calls=[ln for ln in lines if ln.kind in ("tool_call", "tool_refused")],
        refused=[ln for ln in lines if ln.refused],
        escalations=[ln for ln in lines if ln.kind == "escalated"],
        output_html=output_html,
        output_name=output_name,
    )
