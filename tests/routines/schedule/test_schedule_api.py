"""The Schedule API the supervisor codes against: slots, bounds, counting after a long sleep,
compile-time rules (frequency, spacing, never fires, precedence) and the loader's messages."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routines.schedule import Schedule, ScheduleError, Slot, compile_schedule
from routines.spec import Kind, ScheduleSpec
from tests.helpers import AGENT, COMMAND, problems_of, write


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def cron(expr: str, zone: str = "UTC", kind: Kind = Kind.COMMAND, **kw: object) -> Schedule:
    return compile_schedule(ScheduleSpec(cron=expr, timezone=zone, **kw), kind)  # type: ignore[arg-type]


def test_slot_id_is_the_utc_instant_to_the_second_and_slots_are_frozen() -> None:
    slot = cron("30 9 * * *", "Europe/Berlin").next_after(utc("2026-07-01T00:00"))
    assert slot is not None
    assert slot.id == "2026-07-01T07:30:00Z"
    assert slot.local.isoformat() == "2026-07-01T09:30:00+02:00"
    assert slot.instant.tzinfo is UTC
    with pytest.raises(FrozenInstanceError):
        slot.local = slot.instant  # type: ignore[misc]


def test_next_after_is_strictly_after() -> None:
    s = cron("0 * * * *")
    on_a_slot = utc("2026-01-01T05:00")
    nxt = s.next_after(on_a_slot)
    assert nxt is not None and nxt.instant == utc("2026-01-01T06:00")
    nxt = s.next_after(on_a_slot - timedelta(microseconds=1))
    assert nxt is not None and nxt.instant == on_a_slot


def test_naive_instants_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="aware"):
        cron("0 * * * *").next_after(datetime(2026, 1, 1))


def test_slots_between_is_start_exclusive_end_inclusive_and_limited() -> None:
    s = cron("0 * * * *")
    got = s.slots_between(utc("2026-01-01T00:00"), utc("2026-01-01T03:00"), 10)
    assert [x.id for x in got] == [
        "2026-01-01T01:00:00Z",
        "2026-01-01T02:00:00Z",
        "2026-01-01T03:00:00Z",
    ]
    assert len(s.slots_between(utc("2026-01-01T00:00"), utc("2026-02-01T00:00"), 5)) == 5
    assert s.slots_between(utc("2026-01-01T00:00"), utc("2026-01-01T00:30"), 5) == []


def test_counting_months_of_sleep_is_exact_and_capped() -> None:
    s = cron("*/15 * * * *", "America/New_York")
    start, end = utc("2026-01-01T00:00"), utc("2026-04-01T00:00")  # across spring forward
    assert s.count_between(start, end, 10**6) == len(s.slots_between(start, end, 10**6))
    # every 15 minutes of elapsed time: the skipped wall-clock hour never passed
    assert s.count_between(start, end, 10**6) == 90 * 96
    assert s.count_between(start, end, 100) == 100
    assert s.count_between(end, start, 100) == 0


SHAPES = [
    "*/15 * * * *",
    "30 1 * * *",
    "30 2 * * *",
    "0,30 1,2 * * *",
    "0 */6 * * *",
    "5 0 * * 1-5",
    "0 0 1 * MON",
    "45 23 28-31 * *",
]
ZONES = ["UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Hebron"]


@settings(max_examples=60)
@given(
    shape=st.sampled_from(SHAPES),
    zone=st.sampled_from(ZONES),
    start=st.datetimes(datetime(2021, 1, 1), datetime(2027, 1, 1)),
    days=st.integers(0, 120),
    seconds=st.integers(0, 86399),
)
def test_count_between_agrees_with_walking_the_slots(
    shape: str, zone: str, start: datetime, days: int, seconds: int
) -> None:
    s = cron(shape, zone)
    a = start.replace(tzinfo=UTC)
    b = a + timedelta(days=days, seconds=seconds)
    assert s.count_between(a, b, 10**6) == len(s.slots_between(a, b, 10**6))


@settings(max_examples=40)
@given(
    shape=st.sampled_from(SHAPES),
    zone=st.sampled_from(ZONES),
    at=st.datetimes(datetime(2021, 1, 1), datetime(2027, 1, 1)),
)
def test_last_at_or_before(shape: str, zone: str, at: datetime) -> None:
    s = cron(shape, zone)
    x = at.replace(tzinfo=UTC)
    last = s.last_at_or_before(x)
    assert last is not None and last.instant <= x
    after = s.next_after(last.instant)
    assert after is not None and after.instant > x


def test_last_at_or_before_the_first_slot_is_none() -> None:
    s = compile_schedule(ScheduleSpec(oncalendar="2030-06-01 09:00", timezone="UTC"))
    assert s.last_at_or_before(utc("2029-01-01T00:00")) is None
    last = s.last_at_or_before(utc("2031-01-01T00:00"))
    assert last is not None and last.id == "2030-06-01T09:00:00Z"


def test_compiling_is_cached_per_spec() -> None:
    first = compile_schedule(ScheduleSpec(cron="0 9 * * 1-5", timezone="Europe/Berlin"))
    again = compile_schedule(ScheduleSpec(cron="0 9 * * 1-5", timezone="Europe/Berlin"))
    assert again is first


def test_precedence_oncalendar_then_cron_then_every() -> None:
    s = compile_schedule(
        ScheduleSpec(oncalendar="Sat 10:00", cron="0 9 * * *", every="every hour", timezone="UTC")
    )
    assert s.description == "Every Saturday at 10:00 AM" and s.cron is None
    s = compile_schedule(ScheduleSpec(cron="0 9 * * *", every="every hour", timezone="UTC"))
    assert s.description == "Every day at 9:00 AM" and s.cron == "0 9 * * *"


def test_the_oncalendar_form_carries_the_zone() -> None:
    s = cron("0 9 * * 1-5", "Europe/Berlin")
    assert s.oncalendar == ("Mon..Fri *-*-* 09:00:00 Europe/Berlin",)
    assert s.oncalendar_refusal is None
    both = cron("0 0 1 * MON", "UTC")
    assert both.oncalendar == ("Mon *-*-* 00:00:00 UTC", "*-*-01 00:00:00 UTC")
    own = compile_schedule(ScheduleSpec(oncalendar="Mon 09:00 Asia/Tokyo", timezone="UTC"))
    assert own.zone == "Asia/Tokyo"
    assert own.oncalendar == ("Mon *-*-* 09:00:00 Asia/Tokyo",)
    assert own.description == "Every Monday at 9:00 AM (Asia/Tokyo time)"
    slot = own.next_after(utc("2026-01-01T00:00"))
    assert slot is not None and slot.local.isoformat() == "2026-01-05T09:00:00+09:00"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            ScheduleSpec(cron="*/10 * * * *"),
            '"*/10 * * * *" fires every 10 minutes; an agent routine runs at most every 15 '
            "minutes, since each run costs money: set allow_frequent = true to allow it",
        ),
        (
            ScheduleSpec(oncalendar="*:00/5"),
            '"*:00/5" fires every 5 minutes; an agent routine runs at most every 15 minutes, '
            "since each run costs money: set allow_frequent = true to allow it",
        ),
        (
            ScheduleSpec(every="every 5 minutes"),
            '"every 5 minutes" fires every 5 minutes; an agent routine runs at most every 15 '
            "minutes, since each run costs money: set allow_frequent = true to allow it",
        ),
        (
            # 23:55 one day to 00:05 the next: ten minutes
            ScheduleSpec(oncalendar="*-*-* 00,23:05,55"),
            '"*-*-* 00,23:05,55" fires every 10 minutes; an agent routine runs at most every '
            "15 minutes, since each run costs money: set allow_frequent = true to allow it",
        ),
    ],
)
def test_agent_routines_closer_than_15_minutes_need_allow_frequent(
    spec: ScheduleSpec, message: str
) -> None:
    with pytest.raises(ScheduleError) as exc:
        compile_schedule(spec, Kind.AGENT)
    assert str(exc.value) == message
    compile_schedule(spec, Kind.COMMAND)
    compile_schedule(ScheduleSpec(**{**_fields(spec), "allow_frequent": True}), Kind.AGENT)


def _fields(spec: ScheduleSpec) -> dict[str, Any]:
    return {k: getattr(spec, k) for k in spec.__slots__}


def test_the_frequency_rule_counts_only_days_that_follow_each_other() -> None:
    compile_schedule(ScheduleSpec(oncalendar="Sun *-*-* 00,23:05,55"), Kind.AGENT)  # 50 min
    compile_schedule(ScheduleSpec(cron="*/15 * * * *"), Kind.AGENT)  # exactly 15: allowed


def test_nothing_runs_more_than_once_a_minute() -> None:
    for kind in Kind:
        with pytest.raises(ScheduleError) as exc:
            compile_schedule(ScheduleSpec(oncalendar="*:*:00/30", allow_frequent=True), kind)
        assert str(exc.value) == (
            '"*:*:00/30" fires every 30 seconds; routines run at most once a minute'
        )
    compile_schedule(ScheduleSpec(cron="* * * * *"), Kind.COMMAND)


def test_a_schedule_that_never_fires_is_refused() -> None:
    for spec in (ScheduleSpec(cron="0 0 30 2 *"), ScheduleSpec(oncalendar="*-02-30 09:00")):
        with pytest.raises(ScheduleError, match="never fires: no date matches it"):
            compile_schedule(spec)
    past = compile_schedule(ScheduleSpec(oncalendar="2020-01-01 09:00", timezone="UTC"))
    assert past.next_after(utc("2026-01-01T00:00")) is None  # a past one-off: no more runs


def test_the_loader_reports_the_message_under_the_key_in_force(tmp_path: Path) -> None:
    bad = AGENT.replace('cron = "0 6 * * *"', 'cron = "0 0 L * *"')
    assert problems_of(write(tmp_path, "a", bad)) == [
        f'{tmp_path}/a.toml: [schedule].cron: "L" in the day-of-month field is Quartz syntax '
        '(L or W), not cron; the last day of the month is oncalendar = "*-*~01 09:00"'
    ]
    frequent = COMMAND.replace('cron = "0 6 * * *"', 'oncalendar = "*:*:0/10"')
    assert problems_of(write(tmp_path, "b", frequent)) == [
        f'{tmp_path}/b.toml: [schedule].oncalendar: "*:*:0/10" fires every 10 seconds; '
        "routines run at most once a minute"
    ]


def test_public_names() -> None:
    import routines.schedule.slots as mod

    assert set(mod.__all__) == {
        "FREQUENT_SECONDS",
        "MIN_SPACING_SECONDS",
        "Schedule",
        "ScheduleError",
        "Slot",
        "compile_schedule",
        "explain",
        "summary",
    }
    assert issubclass(mod.ScheduleError, ValueError)
    assert Slot.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert Schedule.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_summary_is_what_a_routine_line_shows() -> None:
    from routines.schedule import summary
    from routines.spec import Kind, ScheduleSpec

    spec = ScheduleSpec(cron="0 6 * * *", timezone="UTC")
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert summary(spec, Kind.AGENT, "brief", True, now) == (
        "Every day at 6:00 AM",
        datetime(2026, 3, 2, 6, 0, tzinfo=UTC),
    )
    assert summary(spec, Kind.AGENT, "brief", False, now) == ("Every day at 6:00 AM", None)
    description, nxt = summary(
        ScheduleSpec(cron="* * * * *", timezone="UTC"), Kind.AGENT, "brief", True, now
    )
    assert description.startswith("invalid: ") and nxt is None


def test_explain_notes_what_an_agent_routine_could_not_use() -> None:
    from routines.schedule import explain
    from routines.spec import ScheduleSpec

    base = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    schedule, slots, note = explain(ScheduleSpec(cron="*/5 * * * *", timezone="UTC"), base, 3)
    assert [s.instant.minute for s in slots] == [5, 10, 15]
    assert schedule.cron == "*/5 * * * *"
    assert note is not None and note.startswith("as an agent routine: ")
    _, _, note = explain(ScheduleSpec(cron="0 6 * * *", timezone="UTC"), base, 1)
    assert note is None
