"""Schedules: a routine's [schedule] compiled into something that yields slots.

    compile_schedule(spec, kind) -> Schedule          raises ScheduleError (user-readable)
    Schedule.next_after(instant) -> Slot | None       first slot strictly after an aware instant
    Schedule.slots_between(start, end, limit)         slots in (start, end], oldest first
    Schedule.count_between(start, end, cap)           how many, cheap over months
    Schedule.last_at_or_before(instant)               the latest slot at or before
    Schedule.fire_time(routine, slot)                 slot + deterministic jitter (UTC)

cron (`routines.schedule.cron`), OnCalendar (`routines.schedule.oncalendar`) and plain language
(`routines.schedule.every`, through cron) compile to one `Pattern`, evaluated in the routine's zone
by `routines.schedule.walltime` under the DST rule (tests/routines/schedule/test_dst.py). Compiling
is pure and cached
per spec, so the supervisor can call it on every tick.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from routines.runs import slot_id
from routines.schedule import walltime
from routines.schedule.cron import parse_cron
from routines.schedule.describe import describe
from routines.schedule.error import ScheduleError, never_fires
from routines.schedule.every import once_calendar, resolve_plain
from routines.schedule.pattern import Pattern
from routines.schedule.translate import translate
from routines.schedule.written import Kind, ScheduleSpec

__all__ = [
    "FREQUENT_SECONDS",
    "MIN_SPACING_SECONDS",
    "Schedule",
    "ScheduleError",
    "Slot",
    "compile_schedule",
    "explain",
    "summary",
]

FREQUENT_SECONDS = 15 * 60  # agent routines closer than this need allow_frequent (they cost)
MIN_SPACING_SECONDS = 60  # the supervisor ticks every 30 s: nothing runs more than once a minute
_SECOND = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Slot:
    """One scheduled fire: the wall time in the schedule's zone and the UTC instant."""

    local: datetime
    instant: datetime

    @property
    def id(self) -> str:
        """Stable across restarts and DST (a UTC instant, to the second): the run-fence key."""
        return slot_id(self.instant)


def _aware(instant: datetime, what: str) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"{what} must be an aware datetime, got {instant!r}")
    return instant


@dataclass(frozen=True)
class Schedule:
    """A compiled schedule. Equal specs give equal (and, through the cache, the same) objects."""

    spec: ScheduleSpec
    description: str  # "Every weekday at 9:00 AM", written by code
    oncalendar: tuple[str, ...]  # the equivalent OnCalendar line(s), with the zone; or ()
    oncalendar_refusal: str | None = None  # why there is no OnCalendar form, when there is none
    cron: str | None = None  # the cron in force: as written, or what a phrase resolved to
    zone: str = "UTC"  # where slots are computed: the routine's, or the OnCalendar one's
    pattern: Pattern = field(kw_only=True, repr=False, compare=False)  # the wall times
    _tz: zoneinfo.ZoneInfo = field(kw_only=True, repr=False, compare=False)

    def _slot(self, instant: datetime) -> Slot:
        return Slot(instant.astimezone(self._tz), instant)

    def next_after(self, instant: datetime) -> Slot | None:
        """The first slot strictly after `instant` (aware), or None if there is none."""
        got = walltime.next_instant(self.pattern, self._tz, _aware(instant, "instant"))
        return None if got is None else self._slot(got)

    def slots_between(self, start: datetime, end: datetime, limit: int) -> list[Slot]:
        """Slots in (start, end], oldest first, at most `limit`."""
        out: list[Slot] = []
        cursor = _aware(start, "start")
        end = _aware(end, "end")
        while len(out) < limit:
            got = walltime.next_instant(self.pattern, self._tz, cursor)
            if got is None or got > end:
                break
            out.append(self._slot(got))
            cursor = got
        return out

    def count_between(self, start: datetime, end: datetime, cap: int) -> int:
        """How many slots in (start, end], stopping at `cap`; about one date check a day."""
        return walltime.count_instants(
            self.pattern, self._tz, _aware(start, "start"), _aware(end, "end"), cap
        )

    def last_at_or_before(self, instant: datetime) -> Slot | None:
        """The latest slot at or before `instant`, or None (searched back to 1970)."""
        instant = _aware(instant, "instant").astimezone(UTC)
        floor = datetime(1970, 1, 1, tzinfo=UTC)
        back = timedelta(hours=1)
        lo = instant - back
        while True:
            got = self.next_after(lo)
            if got is not None and got.instant <= instant:
                break
            if lo <= floor:
                return None
            back *= 4
            lo = max(floor, instant - back)
        # Some slot lies in (lo, instant]; the last one p is the least x with next_after(x)
        # beyond `instant`. Slots are whole seconds, so bisect over seconds.
        hi = instant.replace(microsecond=0)
        lo = lo.replace(microsecond=0)
        while hi - lo > _SECOND:
            mid = lo + timedelta(seconds=((hi - lo) // _SECOND) // 2)
            probe = self.next_after(mid)
            if probe is not None and probe.instant <= instant:
                lo = mid
            else:
                hi = mid
        last = self.next_after(lo)
        assert last is not None and last.instant <= instant
        return last

    def next_fire(self, routine_name: str, instant: datetime) -> datetime | None:
        """When the routine next runs after `instant`: its next slot, jittered; None if none."""
        nxt = self.next_after(instant)
        return self.fire_time(routine_name, nxt) if nxt else None

    def fire_time(self, routine_name: str, slot: Slot) -> datetime:
        """When to run `slot` (aware UTC): its instant moved by the routine's jitter.

        The offset is uniform in [-jitter, +jitter] and a function of (routine, slot id) only,
        so a restart does not re-roll it. Where slots are closer than twice the jitter the
        window shrinks to half the distance to each neighbour: a run never reaches the next
        slot or the previous one, and runs keep the order of their slots.
        """
        jitter = self.spec.jitter_sec
        if jitter <= 0:
            return slot.instant
        after = before = jitter
        nxt = self.next_after(slot.instant)
        if nxt is not None:
            after = min(after, (int((nxt.instant - slot.instant) // _SECOND) - 1) // 2)
        near = self.next_after(slot.instant - timedelta(seconds=2 * jitter))
        if near is not None and near.instant < slot.instant:
            prev = self.last_at_or_before(slot.instant - _SECOND)
            if prev is not None:
                before = min(before, (int((slot.instant - prev.instant) // _SECOND) - 1) // 2)
        before, after = max(before, 0), max(after, 0)
        import hashlib  # here, not at the top: loading OpenSSL costs `list` ~5 ms otherwise

        digest = hashlib.blake2b(
            f"{routine_name}\0{slot.id}".encode(), digest_size=8, person=b"vinos-jitter"
        ).digest()
        fraction = int.from_bytes(digest, "big") / 2**64  # uniform in [0, 1)
        offset = int(fraction * (before + after + 1)) - before  # whole seconds in [-b, +a]
        return (slot.instant + timedelta(seconds=offset)).astimezone(UTC)


def _zone(name: str) -> zoneinfo.ZoneInfo:
    from routines.schedule.tz import UnknownZone, zone_info

    try:
        return zone_info(name)
    except UnknownZone as exc:
        # A zone tzdata no longer has makes the routine invalid, never UTC.
        raise ScheduleError(str(exc)) from None


def _spacing(seconds: int) -> str:
    if seconds % 3600 == 0:
        n = seconds // 3600
        return "every hour" if n == 1 else f"every {n} hours"
    if seconds % 60 == 0:
        n = seconds // 60
        return "every minute" if n == 1 else f"every {n} minutes"
    return "every second" if seconds == 1 else f"every {seconds} seconds"


def compile_schedule(spec: ScheduleSpec, kind: Kind = Kind.AGENT) -> Schedule:
    """Compile `spec` (precedence oncalendar > cron > every > once); ScheduleError names what
    is wrong.

    Also refused: a schedule that never fires, one that fires less than a minute apart, and
    for agent routines one that fires less than 15 minutes apart unless allow_frequent.
    """
    return _compile(spec, kind)


# Big enough for every routine of a large home: `list` compiles each schedule when it loads
# the file and again for its next run, and with more routines than entries the LRU evicts
# each one before its second use. The daemon's scheduler holds the same objects, so the
# entries cost it only the keys.
@lru_cache(maxsize=1 << 16)
def _compile(spec: ScheduleSpec, kind: Kind) -> Schedule:
    form = spec.form
    if not spec.expression.strip():
        raise ScheduleError("empty schedule: set one of cron, oncalendar, every or once")
    _zone(spec.timezone)
    cron_text: str | None = None
    refusal: str | None = None
    calendar = spec.expression if form == "oncalendar" else None
    if form == "once":
        calendar = once_calendar(spec.expression)
    elif form == "every":
        plain = resolve_plain(spec.expression)
        calendar = plain.oncalendar
        cron_text = plain.cron
    if calendar is not None:
        from routines.schedule.oncalendar import parse_oncalendar  # ~2 ms a cron-only `list` spares

        event = parse_oncalendar(calendar)
        pattern = event.pattern
        zone = event.zone or spec.timezone
        lines: tuple[str, ...] = (
            (event.normalized,) if event.zone else (f"{event.normalized} {zone}",)
        )
    else:
        cron_text = spec.expression if form == "cron" else cron_text
        assert cron_text is not None
        expr = parse_cron(cron_text)
        pattern = expr.pattern()
        zone = spec.timezone
        lines = translate(expr, zone)
    tz = _zone(zone)
    if pattern.next_date(datetime(1970, 1, 1).date()) is None:
        raise never_fires(spec.expression)
    gap = pattern.min_gap_seconds()
    if gap is not None and gap < MIN_SPACING_SECONDS:
        raise ScheduleError(
            f'"{spec.expression.strip()}" fires {_spacing(gap)}; routines run at most once a minute'
        )
    if (
        kind is Kind.AGENT
        and not spec.allow_frequent
        and gap is not None
        and gap < FREQUENT_SECONDS
    ):
        raise ScheduleError(
            f'"{spec.expression.strip()}" fires {_spacing(gap)}; an agent routine runs at most '
            "every 15 minutes, since each run costs money: set allow_frequent = true to allow it"
        )
    description = describe(pattern)
    if form == "oncalendar" and zone != spec.timezone:
        description += f" ({zone} time)"
    if form == "once":
        description = "Once, " + description[:1].lower() + description[1:]
    return Schedule(
        spec=spec,
        description=description,
        oncalendar=lines,
        oncalendar_refusal=refusal,
        cron=cron_text,
        zone=zone,
        pattern=pattern,
        _tz=tz,
    )


def summary(
    spec: ScheduleSpec, kind: Kind, routine_name: str, enabled: bool, now: datetime
) -> tuple[str, datetime | None]:
    """What a routine's line shows (`list`, the dashboard): the description, and the next fire
    time while it is enabled; a schedule that no longer compiles reads "invalid: why"; a
    routine with no [schedule] (started by its [trigger] only) reads "on its triggers"."""
    if not spec.expression:
        return "on its triggers", None
    try:
        schedule = compile_schedule(spec, kind)
    except ScheduleError as exc:
        return f"invalid: {exc}", None
    return schedule.description, schedule.next_fire(routine_name, now) if enabled else None


def explain(
    spec: ScheduleSpec, base: datetime, count: int
) -> tuple[Schedule, list[Slot], str | None]:
    """`schedule explain`'s content: the schedule compiled as for a command routine (which may
    fire every minute), its next `count` slots after `base`, and a note when an agent routine
    could not use it. Raises ScheduleError when even a command routine could not."""
    schedule = compile_schedule(spec, Kind.COMMAND)
    note = None
    try:
        compile_schedule(spec, Kind.AGENT)
    except ScheduleError as exc:
        note = f"as an agent routine: {exc}"
    return schedule, schedule.slots_between(base, datetime.max.replace(tzinfo=UTC), count), note
