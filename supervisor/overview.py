"""Where the read model's routine rows come from on this side: `collect` gathers what
routines.query needs (the registry, the ledger the CLI reads, the premium keys a routine lacks,
what a fleet does not run here) and builds the rows; the daemon calls it with its own registry
and ledger. Also the status when no daemon answers (`offline_status`), the bar's other facts
(`bar_facts`), and the daemon's registry as the files read now (`as_on_disk`).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from routines.query import RoutineRow

if TYPE_CHECKING:
    from routines.ledger.api import LedgerAPI
    from routines.query.routines import KnownFire, RowCache
    from routines.spec.registry import Registry

__all__ = [
    "RoutineRow",
    "as_on_disk",
    "bar_facts",
    "collect",
    "list_rows",
    "offline_status",
]


def collect(
    now: datetime | None = None,
    *,
    registry: Registry | None = None,
    ledger: LedgerAPI | None = None,
    known_fire: KnownFire | None = None,
    stale: Collection[str] = (),
    cache: RowCache | None = None,
    ledger_mark: tuple[object, ...] | None = None,
) -> list[RoutineRow]:
    """One row per routine file (routines.query), from the files and the ledger the CLI reads
    (the fleet's on a fleet machine), or from the daemon's own registry and ledger when it
    answers `list` (supervisor/control/handlers.py). `ledger_mark`: what moves whenever the
    ledger's content may have (supervisor/control/watch.py); with it, `cache` keeps the rows
    whole, and the same registry, mark and stale files give them back while the clock allows
    (routines.query RowCache.kept)."""
    from contextlib import closing, nullcontext

    from routines.query import routine_rows
    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from supervisor.fleet.view import cli_ledger, held_here

    now = now or datetime.now(UTC)
    p = paths()
    registry = registry if registry is not None else scan(p)
    opened = closing(cli_ledger(p)) if ledger is None else nullcontext(ledger)
    with opened as db:
        inputs = None
        # Not on a fleet (its definitions and leases are not in the mark), nor when the store
        # cannot count its own writes.
        local = getattr(db, "definitions", None) is None
        if cache is not None and ledger_mark is not None and None not in ledger_mark and local:
            inputs = (ledger_mark, tuple(stale))
            kept = cache.kept(registry, inputs, now)
            if kept is not None:
                return kept
        states = db.states()
        rows = routine_rows(
            registry,
            db,
            now,
            allowed_signers=p.allowed_signers,
            premium_keys=_premium_keys(p, registry, states),
            not_here=held_here(db, registry),  # on a fleet: pinned elsewhere, or divergent
            stale=stale,
            known_fire=known_fire,
            states=states,  # read once: 10,000 routines' states are ~10 ms a read
            cache=cache,
        )
        if inputs is not None and cache is not None:
            cache.keep(registry, inputs, now, rows)
        return rows


def list_rows(now: datetime | None = None) -> list[RoutineRow]:
    """`list`'s rows without a daemon: those of the last such `list` when nothing they were
    made from changed (routines/query/listsnap.py); else `collect`, with the files unchanged
    since the last `list` taken from the row snapshot (routines/query/rowsnap.py) rather than
    parsed; on a fleet, `collect` itself."""
    from routines.query.listsnap import ListSnapshot
    from routines.spec.paths import paths

    now = now or datetime.now(UTC)
    p = paths()
    whole = ListSnapshot(p, now)  # its inputs read before the ledger is
    kept = whole.rows()
    if kept is not None:
        return kept
    from contextlib import closing

    from routines.query.rowsnap import RowSnapshot
    from supervisor.fleet.view import cli_ledger

    with closing(cli_ledger(p)) as db:
        if getattr(db, "definitions", None) is not None:  # a fleet's: held_here reads its text
            return collect(now, ledger=db)
        snap = RowSnapshot(p, now, whole.found())
        registry = snap.registry()
        rows = collect(
            now, registry=registry, ledger=db, known_fire=snap.known_fire, cache=snap.cache
        )
    snap.save()
    if not snap.read_a_secret():
        whole.save(registry, rows)
    return rows


def _premium_keys(p: Any, registry: Any, states: Any) -> dict[str, str]:
    """What each enabled `auto` routine that can escalate lacks for its premium leg's key
    (the starters, off until enabled, say nothing). The key lookups are the same for every
    routine: made once (Anthropic's), and config.toml read only when a routine escalates to a
    provider it declares."""
    from routines.ledger import is_enabled
    from routines.spec import Route

    autos = [
        e.routine
        for e in registry.entries.values()
        if e.routine is not None
        and is_enabled(states, e.routine)
        and e.routine.agent is not None
        and e.routine.agent.route is Route.AUTO
        and e.routine.agent.escalation.possible
    ]
    if not autos:
        return {}
    from supervisor.hostcheck import premium_key_missing

    providers = None
    if any(r.agent.premium_provider != "anthropic" for r in autos):
        from routines.spec.checks import RoutineInvalid
        from routines.spec.config import load_config

        try:
            providers = load_config(p.config_file).providers
        except RoutineInvalid:
            providers = None
    out: dict[str, str] = {}
    anthropic_found = False
    for r in autos:
        on_anthropic = r.agent.premium_provider == "anthropic"
        if on_anthropic and anthropic_found:
            continue
        missing = premium_key_missing(p, r, providers)
        anthropic_found = anthropic_found or (on_anthropic and missing is None)
        if missing:
            out[r.name] = missing
    return out


def offline_status(rows: list[RoutineRow]) -> dict[str, Any]:
    """`status` from the files and the ledger alone, for when no daemon answers: the shape
    of the daemon's reply (ipc.StatusReply)."""
    from ipc import ActiveEntry, NextFire, StatusReply, reply_json

    nxt = sorted((r.next_run, r.name) for r in rows if r.next_run is not None)
    reply = StatusReply(
        daemon=False,
        running=[ActiveEntry(r.name) for r in rows if r.running],
        queued=[ActiveEntry(r.name) for r in rows if r.queued],
        next=[NextFire(n, at.isoformat()) for at, n in nxt[:20]],
        routines=len(rows),
        enabled=sum(1 for r in rows if r.enabled),
        invalid=[r.name for r in rows if r.errors],
    )
    return reply_json(reply)


def bar_facts(p: Any, rows: list[RoutineRow], ledger: Any, now: datetime) -> dict[str, Any]:
    """What the bar shows besides the routines' rows: today's dollars in the machine's zone,
    the outputs waiting to be read, the proposals waiting for a decision. The daemon sends it
    with the rows to `status --waybar --follow`; the client reads it itself without one."""
    from zoneinfo import ZoneInfo

    from routines.proposals import waiting_count
    from routines.query.costs import spent_by_day
    from routines.schedule.tz import machine_timezone
    from supervisor.seen import unseen_count

    zone = ZoneInfo(machine_timezone())
    day = now.astimezone(zone).date()
    today = spent_by_day(ledger, [day], zone)
    # The proposals are the run ledger's (the fleet's on a fleet).
    pending = waiting_count(ledger, now)
    unseen = unseen_count(p.state_dir, {r.name for r in rows if r.open_on_login}, day)
    return {"today_dollars": sum(today.values()), "unseen": unseen, "pending": pending}


def as_on_disk(registry: Registry) -> Registry:
    """The daemon's registry as a fresh scan of the files reads it: a file that is invalid
    now has no routine (the daemon keeps running its last good version; `stale` says so)."""
    from dataclasses import replace

    from routines.spec.registry import Registry

    entries = registry.entries
    if not any(e.stale for e in entries.values()):
        return registry
    return Registry({n: replace(e, routine=None) if e.stale else e for n, e in entries.items()})
