"""One row per routine file: what `list`, `status`, the bar and the dashboard show of it.

`routine_rows` builds them from a registry and a ledger (reads only); what it needs from
elsewhere comes in as plain data (the premium keys a routine lacks, the routines a fleet does
not run here, the next fires the daemon's scheduler already holds), so this package imports
nothing but routines. Tested as data: tests/routines/test_query.py.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime

TYPE_CHECKING = False  # typing's own flag, without importing typing (routines/query/rowclass.py)
if TYPE_CHECKING:
    from typing import Any, NamedTuple

    from routines.ledger.api import LedgerAPI
    from routines.spec.registry import Registry
    from routines.spec.routine import Routine
else:
    from routines.query.rowclass import NamedTuple

__all__ = ["KnownFire", "RoutineRow", "RowCache", "decode_rows", "encode_rows", "routine_rows"]

# The next fire the daemon's scheduler holds for a routine, when it is the one a fresh
# computation would give (supervisor/engine/scheduler.py `known_fire`); None: compute it.
KnownFire = Callable[[str, "Routine", datetime], "datetime | None"]


class RoutineRow(NamedTuple):
    """A routine file as the readers show it. An invalid file has kind "?" and no schedule.

    A NamedTuple: typed and immutable, and a client that decodes the daemon's rows loads
    nothing for it (msgspec would bring inspect, dataclasses, uuid and decimal: ~15 ms of a
    `list` whose budget is 2.5x `python -c pass`)."""

    name: str
    kind: str
    origin: str
    enabled: bool
    valid: bool
    schedule: str  # the description, or "invalid: why", or "on its triggers"
    expression: str
    next_run: datetime | None
    last_status: str | None
    last_outcome: str | None
    last_finished: str | None
    today_dollars: float
    disabled_reason: str | None
    errors: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    last_run_id: str | None = None
    last_failed: bool = False  # the last run counts as a strike (routines.runs.counts_as_strike)
    description: str = ""
    stale: bool = False  # invalid on disk; the daemon runs its last good version
    strikes: int = 0  # failures in a row (routines.runs.STRIKES turn it off)
    running: bool = False
    queued: bool = False
    max_dollars_per_day: float | None = None  # the daily budget, None when unlimited
    open_on_login: bool = False  # its outputs wait to be seen (`brief --unseen`)
    signature: str = "unsigned"  # routines.signing.SignatureState
    signature_note: str | None = None  # "signed by …", "signature invalid: …"
    signature_warning: bool = False  # the note is a problem (invalid, or auto_approve unsigned)
    not_here: str | None = None  # on a fleet: why this machine does not run it
    # The file's own `enabled` when `enable`/`disable` overrode it (None: they agree). The
    # command wins until that line is edited (tests/cli/test_cli_list.py::
    # test_list_says_when_enable_overrides_the_files_enabled).
    file_enabled: bool | None = None
    permissions: str | None = None  # [routine].permissions of an agent routine
    needs_you: str | None = None  # the run of it that waits for a person, if one does
    # `auto` that can escalate and has no premium key (supervisor.hostcheck.premium_key_missing)
    premium_key: str | None = None

    def as_json(self) -> dict[str, Any]:
        """`list --json`'s object for this routine (its keys are the CLI's interface)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "origin": self.origin,
            "enabled": self.enabled,
            "valid": self.valid,
            "schedule": self.schedule,
            "expression": self.expression,
            "next_run": self.next_run.isoformat() if self.next_run else None,
            "last_status": self.last_status,
            "last_outcome": self.last_outcome,
            "last_finished": self.last_finished,
            "today_dollars": round(self.today_dollars, 6),
            "disabled_reason": self.disabled_reason,
            "errors": list(self.errors),
            "warnings": list(self.warnings),
            "running": self.running,
            "queued": self.queued,
            "max_dollars_per_day": self.max_dollars_per_day,
            "open_on_login": self.open_on_login,
            "signature": self.signature,
            "signature_note": self.signature_note,
            "not_here": self.not_here,
            "file_enabled": self.file_enabled,
            "permissions": self.permissions,
            "needs_you": self.needs_you,
            "premium_key": self.premium_key,
        }


def encode_rows(rows: Sequence[RoutineRow]) -> dict[str, list[Any]]:
    """The rows as the control socket carries them: columns, one list per field (the time as
    ISO 8601), each field's name said once rather than once a row, and decoded without a dict
    a row (`decode_rows`)."""
    if not rows:
        return {f: [] for f in RoutineRow._fields}
    fields = RoutineRow._fields
    defaults = RoutineRow._field_defaults
    n = len(rows)
    # A column that holds only its field's default is left out: `decode_rows` puts the
    # default back (most of 10,000 rows' columns are; a third of the bytes to parse).
    columns = {
        f: list(c)
        for f, c in zip(fields, zip(*rows, strict=True), strict=True)
        if f not in defaults or c.count(defaults[f]) != n
    }
    columns["next_run"] = [at.isoformat() if at is not None else None for at in columns["next_run"]]
    return columns


def decode_rows(data: bytes | object) -> list[RoutineRow]:
    """Rows back from the wire: JSON bytes, the columns `encode_rows` made, or a list of such
    batches (in order). A field this client does not know (a newer daemon's) is left out, one
    it knows but was not sent takes its default; ValueError when these are not rows."""
    if isinstance(data, bytes | bytearray | memoryview):
        import json

        data = json.loads(bytes(data))
    batches = data if isinstance(data, list) else [data]
    out: list[RoutineRow] = []
    for batch in batches:
        out.extend(_decode_batch(batch))
    return out


_TUPLES = ("errors", "warnings")


def _decode_batch(batch: object) -> list[RoutineRow]:
    if not isinstance(batch, dict) or not isinstance(batch.get("name"), list):
        raise ValueError("expected the rows' columns")
    n = len(batch["name"])
    defaults = RoutineRow._field_defaults
    columns = []
    for field in RoutineRow._fields:
        column = batch.get(field)
        if column is None:
            if field not in defaults:
                raise ValueError(f"the rows have no {field}")
            column = [defaults[field]] * n
        elif not isinstance(column, list) or len(column) != n:
            raise ValueError(f"the rows' {field} is not a column of {n}")
        elif field == "next_run":
            fromiso = datetime.fromisoformat
            column = [fromiso(at) if isinstance(at, str) else None for at in column]
        elif field in _TUPLES:
            column = [tuple(v) for v in column]
        columns.append(column)
    return list(map(RoutineRow, *columns))


def routine_rows(
    registry: Registry,
    ledger: LedgerAPI | None,
    now: datetime,
    *,
    names: Collection[str] | None = None,
    allowed_signers: Any = None,
    premium_keys: Mapping[str, str] | None = None,
    not_here: Mapping[str, str] | None = None,
    stale: Collection[str] = (),
    known_fire: KnownFire | None = None,
    states: Mapping[str, Any] | None = None,
    cache: RowCache | None = None,
) -> list[RoutineRow]:
    """A row per routine file (`names`: only those), by name; without a ledger yet, what the
    files alone say. `allowed_signers`: checks the signatures beside the files (None: not
    shown); `stale`: invalid files whose last good version the daemon runs; `states`: the
    ledger's, when the caller has just read them (None: read here); `cache`: what the files
    said last time (a daemon's, RowCache)."""
    wanted = sorted(registry.entries if names is None else set(names) & set(registry.entries))
    facts = _ledger_facts(registry, ledger, wanted, now, states)._replace(
        premium=premium_keys or {}, not_here=not_here or {}, stale=set(stale)
    )
    signed = (
        _signature_files(registry.entries[n].path for n in wanted)
        if allowed_signers is not None
        else set()
    )
    kept = cache.parts if cache is not None else {}
    parts: dict[int, tuple[Any, RoutineRow]] = {}
    out = []
    for name in wanted:
        entry = registry.entries[name]
        hit = kept.get(id(entry))
        part = hit[1] if hit is not None and hit[0] is entry else _file_part(name, entry)
        parts[id(entry)] = (entry, part)
        row = _row(name, entry, part, facts, now, known_fire)
        if allowed_signers is not None and entry.routine is not None:
            sig = _signature(entry.path, entry.routine, allowed_signers, signed)
            row = row._replace(**sig) if sig else row
        out.append(row)
    if cache is not None and names is None:
        cache.parts = parts  # only the entries in force: an edited file's old part goes
    return out


class RowCache:
    """What each routine file alone says of its row (`_file_part`), kept while the registry
    keeps that file's entry: an unchanged file keeps its Entry object (routines.spec.registry
    `_read`), an edited one gets a new one. A daemon holds one, so its `list` of 10,000
    routines builds anew only what the ledger and the clock say; the rows are the same with
    or without it (tests/routines/test_query.py::
    test_a_row_cache_gives_the_same_rows_and_forgets_an_edited_file).

    It also keeps the last rows whole (`keep`), for a caller that can tell the ledger has not
    changed since (a daemon, by its connection's data version and own writes): a repeat `list`
    is then those rows, until the clock reaches a moment that changes one (`settled_until`)
    (tests/routines/test_query.py::test_kept_rows_are_the_rows_until_an_input_or_the_clock_moves).
    """

    def __init__(self) -> None:
        # id(entry) -> (the entry, its part); the entry is held, so its id is not reused.
        self.parts: dict[int, tuple[Any, RoutineRow]] = {}
        # (the registry, the caller's inputs, made at, valid before, the rows); the registry
        # is held, so its id is not reused.
        self._rows: tuple[Registry, object, datetime, datetime, list[RoutineRow]] | None = None

    def kept(self, registry: Registry, inputs: object, now: datetime) -> list[RoutineRow] | None:
        """The rows `keep` kept, when made from this very registry (an edit makes a new one)
        and equal `inputs`, and `now` is before the first moment that changes one (and not
        before they were made: a clock set back); else None."""
        k = self._rows
        if k is None or k[0] is not registry or k[1] != inputs or not k[2] <= now < k[3]:
            return None
        # A signature put beside a file changes its row and not the registry: looked for each
        # time (one listing of each folder).
        if _signature_files(e.path for e in registry.entries.values()):
            return None
        return k[4]

    def keep(
        self, registry: Registry, inputs: object, now: datetime, rows: list[RoutineRow]
    ) -> None:
        """Keep `rows`, made at `now` from `registry` and `inputs` (what else made them: the
        ledger's version, the stale files), when only those and the clock made them
        (`depends_on_files_and_ledger`); otherwise forget the last ones."""
        mine = depends_on_files_and_ledger(registry)
        until = settled_until(registry, rows, now) if mine else None
        self._rows = (registry, inputs, now, until, rows) if until is not None else None


def depends_on_files_and_ledger(registry: Registry) -> bool:
    """Whether every row of `registry` is made from its file, the ledger and the clock alone
    (while no NAME.toml.sig is beside one, which `RowCache.kept` looks for): none asks for
    auto-approval (ssh-keygen and allowed_signers say what its row shows) and none can ask
    for a premium key (`auto` that can escalate: the key files and config.toml say)."""
    for entry in registry.entries.values():
        r = entry.routine
        if r is not None and ("auto_approve" in r.text or _needs_premium(r)):
            return False
    return not _signature_files(e.path for e in registry.entries.values())


def settled_until(registry: Registry, rows: Sequence[RoutineRow], now: datetime) -> datetime | None:
    """The first moment after `now` at which rows made at `now` would differ by the clock
    alone: the first next run they show, or the end of today in a routine's zone (today's
    spending starts again, routines.ledger `today_bounds`); None when that is not after `now`."""
    from zoneinfo import ZoneInfo

    from routines.ledger.model import today_bounds

    zones = {
        n: ZoneInfo(e.routine.schedule.timezone)
        for n, e in registry.entries.items()
        if e.routine is not None
    }
    moments = [end for _, end in today_bounds(zones, now)]
    moments.extend(r.next_run for r in rows if r.next_run is not None)
    # A `once` warns from its moment on, which its row shows as a next run only when it is on
    # (routines.spec.loader `once_past`; tests/routines/test_rowsnap.py::
    # test_the_kept_list_ends_when_a_once_routines_moment_passes).
    moments.extend(m for e in registry.entries.values() if (m := _once_moment(e, now)))
    until = min(moments, default=None)
    return until if until is not None and until > now else None


def _once_moment(entry: Any, now: datetime) -> datetime | None:
    """A `once` routine's moment when it is after `now`, else None (a kept row's stand-in,
    routines/query/rowsnap.py, is never a `once`: its parse depends on the clock)."""
    r = entry.routine
    if r is None or getattr(r.schedule, "form", None) != "once":
        return None
    from routines.schedule import ScheduleError, compile_schedule

    try:
        slot = compile_schedule(r.schedule, r.kind).next_after(now)
    except ScheduleError:
        return None
    return None if slot is None else slot.instant


def _needs_premium(r: Routine) -> bool:
    """Whether `r` is `auto` and can escalate to its premium leg (whose key may be missing)."""
    from routines.spec.routine import Route

    a = r.agent
    return a is not None and a.route is Route.AUTO and a.escalation.possible


class _Facts(NamedTuple):
    """What the ledger and the caller said, for every row."""

    states: Mapping[str, Any]
    last: Mapping[str, Any]
    active: set[tuple[str, str]]
    paused: Mapping[str, str]
    spent: Mapping[str, float]
    premium: Mapping[str, str]
    not_here: Mapping[str, str]
    stale: set[str]


def _ledger_facts(
    registry: Registry,
    ledger: LedgerAPI | None,
    wanted: list[str],
    now: datetime,
    states: Mapping[str, Any] | None,
) -> _Facts:
    """What the ledger says of the `wanted` routines (nothing without a ledger yet); `states`:
    read by the caller already (None: read here)."""
    if ledger is None:
        return _Facts(states or {}, {}, set(), {}, {}, {}, {}, set())
    from zoneinfo import ZoneInfo

    zones = {}
    for n in wanted:
        r = registry.entries[n].routine
        if r is not None:
            zones[n] = ZoneInfo(r.schedule.timezone)
    return _Facts(
        ledger.states() if states is None else states,
        ledger.last_runs(),
        {(a.routine, str(a.status)) for a in ledger.active_runs()},
        {a.routine: a.run_id for a in ledger.paused_runs()},
        # Today's spending of every routine in one query per zone, not one per routine.
        ledger.spent_today_many(zones, now) if zones else {},
        {},
        {},
        set(),
    )


def _file_part(name: str, entry: Any) -> RoutineRow:
    """The row as the file alone says it: no ledger (the file's `enabled`, nothing run, nothing
    spent), no next run, not stale. (A kept row's part may hold its next run: `_row` puts the
    one the ledger and the clock say in its place.)"""
    from routines.schedule import summary

    r = entry.routine
    problems = entry.errors  # a property that builds its tuple: once a row, not thrice
    errors = tuple(str(e) for e in problems)
    if r is None:
        return RoutineRow(
            name=name,
            kind="?",
            origin=entry.origin.value,
            enabled=False,
            valid=False,
            schedule="",
            expression="",
            next_run=None,
            last_status=None,
            last_outcome=None,
            last_finished=None,
            today_dollars=0.0,
            disabled_reason=None,
            errors=errors,
        )
    valid = not problems  # Entry.valid, Entry.warnings
    description, _ = summary(r.schedule, r.kind, name, False, datetime.min)
    return RoutineRow(
        name=name,
        kind=r.kind.value,
        origin=entry.origin.value,
        enabled=r.enabled,
        valid=valid,
        schedule=description,
        expression=r.schedule.expression,
        next_run=None,
        last_status=None,
        last_outcome=None,
        last_finished=None,
        today_dollars=0.0,
        disabled_reason=None,
        errors=errors,
        warnings=r.warnings if valid else (),
        description=r.description,
        max_dollars_per_day=r.budget.max_dollars_per_day,
        open_on_login=r.output.open_on_login,
        # [routine].permissions of an agent routine (a command routine has no model to ask)
        permissions=str(r.permissions.value) if r.agent is not None else None,
    )


def _row(
    name: str,
    entry: Any,
    part: RoutineRow,
    f: _Facts,
    now: datetime,
    known_fire: KnownFire | None,
) -> RoutineRow:
    """`part` (the file's) with what the ledger, the caller and the clock say."""
    from routines.ledger.model import is_enabled
    from routines.runs import counts_as_strike

    r = entry.routine
    changes: dict[str, Any] = {}
    lr = f.last.get(name)
    if lr is not None:
        changes.update(
            last_status=lr.status,
            last_outcome=lr.outcome,
            last_finished=lr.finished_at,
            last_run_id=lr.run_id,
            last_failed=bool(counts_as_strike(lr.status)),
        )
    if name in f.stale:
        changes["stale"] = True
    if r is None:
        return part._replace(**changes) if changes else part
    state = f.states.get(name)
    enabled = is_enabled(f.states, r)
    if enabled != part.enabled:
        changes.update(enabled=enabled, file_enabled=r.enabled)
    if enabled:
        known = _next_run(name, r, now, known_fire)
        # A part may hold its next run already (a kept row's, routines/query/rowsnap.py): the
        # same is no change, and 10,000 rows copied for none is most of building them.
        if known is not None and known != part.next_run:
            changes["next_run"] = known
    else:
        if part.next_run is not None:
            changes["next_run"] = None
        if state is not None and state.disabled_reason is not None:
            changes["disabled_reason"] = state.disabled_reason
    if state is not None and state.failure_streak:
        changes["strikes"] = state.failure_streak
    for key, value in (
        ("today_dollars", f.spent.get(name)),
        ("running", (name, "running") in f.active or None),
        ("queued", (name, "queued") in f.active or None),
        ("not_here", f.not_here.get(name)),
        ("needs_you", f.paused.get(name)),
        ("premium_key", f.premium.get(name)),
    ):
        if value is not None and value != getattr(part, key):  # 0.0 spent: the part's
            changes[key] = value
    return part._replace(**changes) if changes else part


def _next_run(name: str, r: Any, now: datetime, known_fire: KnownFire | None) -> datetime | None:
    """An enabled routine's next run: the one the caller knows, else computed."""
    known = known_fire(name, r, now) if known_fire is not None else None
    if known is None:
        from routines.schedule import summary

        known = summary(r.schedule, r.kind, name, True, now)[1]
    return known


def _signature_files(paths: Iterable[Any]) -> set[str]:
    """Every routines.spec.paths.signature_path (NAME.toml.sig) beside the routine files, as
    `os.path.lexists` sees them (a dangling link too), from one listing of each directory:
    not an lstat a row (with 10,000 routines, most of `list`'s system time)."""
    import os

    out: set[str] = set()
    # Each absolute file path's directory (as os.path.dirname says it), at a third of its cost.
    for d in {os.fspath(p).rpartition("/")[0] or "/" for p in paths}:
        try:
            found = os.listdir(d)
        except OSError:
            continue
        out.update(os.path.join(d, n) for n in found if n.endswith(".toml.sig"))
    return out


def _signature(path: Any, routine: Any, allowed_signers: Any, sigs: set[str]) -> dict[str, Any]:
    """The signature fields of a routine's row. ssh-keygen runs only for a file that has a
    .sig (`sigs`, from _signature_files)."""
    import os

    signed = os.fspath(path) + ".sig" in sigs
    if not signed and "auto_approve" not in routine.text:
        return {}  # the common case, without importing routines.signing (~3 ms)
    from routines.signing import auto_approve_requested, signature_note, verify_routine

    auto = auto_approve_requested(routine)  # permissions = "everything", or auto_approve
    if not auto and not signed:
        return {}
    check = verify_routine(path, allowed_signers, data=routine.text.encode())
    note = signature_note(check, auto, routine.name)
    return {
        "signature": check.state.value,
        "signature_note": note[0] if note else None,
        "signature_warning": bool(note and note[1]),
    }
