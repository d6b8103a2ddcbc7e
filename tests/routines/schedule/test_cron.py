"""Five-field cron: the accepted forms, every refusal's text, Vixie's day-of-month/day-of-week
rule, and agreement with croniter (the pinned 7.0 line, `implement_cron_bug=True`)."""

from __future__ import annotations

import importlib.metadata
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given
from hypothesis import strategies as st

from routines.schedule.cron import parse_cron
from routines.schedule.error import ScheduleError
from routines.schedule.walltime import next_instant

HINT = "; for what cron cannot say, use [schedule].oncalendar"
UTC_ZONE = ZoneInfo("UTC")


def fires(expr: str, start: datetime, n: int) -> list[datetime]:
    pattern = parse_cron(expr).pattern()
    out = []
    t = start
    for _ in range(n):
        got = next_instant(pattern, UTC_ZONE, t)
        assert got is not None
        out.append(got)
        t = got
    return out


def croniter_fires(expr: str, start: datetime, n: int) -> list[datetime]:
    it = croniter(expr, start, implement_cron_bug=True)
    return [it.get_next(datetime).astimezone(UTC) for _ in range(n)]


def test_croniter_is_the_pinned_line() -> None:
    # pyproject pins croniter>=7.0,<7.1 (test extra): these tests pin its day-field rule.
    assert importlib.metadata.version("croniter").startswith("7.0.")


@pytest.mark.parametrize(
    ("expr", "minutes", "hours", "days", "months", "weekdays"),
    [
        ("0 6 * * *", {0}, {6}, set(range(1, 32)), set(range(1, 13)), set(range(7))),
        ("*/15 9-17 * * 1-5", {0, 15, 30, 45}, set(range(9, 18)), None, None, {1, 2, 3, 4, 5}),
        ("0 9,17 1,15 JAN,jul mon-fri", {0}, {9, 17}, {1, 15}, {1, 7}, {1, 2, 3, 4, 5}),
        ("5/20 */6 10-20/5 */3 *", {5, 25, 45}, {0, 6, 12, 18}, {10, 15, 20}, {1, 4, 7, 10}, None),
        ("0 0 * * 0", {0}, {0}, None, None, {0}),
        ("0 0 * * 7", {0}, {0}, None, None, {0}),  # 7 is Sunday too
        ("0 0 * * 5-7", {0}, {0}, None, None, {5, 6, 0}),
        ("0 0 * * SUN,sat", {0}, {0}, None, None, {0, 6}),
        ("00 06 * * *", {0}, {6}, None, None, None),
        ("@hourly", {0}, set(range(24)), None, None, None),
        ("@daily", {0}, {0}, None, None, None),
        ("@midnight", {0}, {0}, None, None, None),
        ("@weekly", {0}, {0}, None, None, {0}),
        ("@monthly", {0}, {0}, {1}, None, None),
        ("@yearly", {0}, {0}, {1}, {1}, None),
        ("@ANNUALLY", {0}, {0}, {1}, {1}, None),
    ],
)
def test_accepted_forms(
    expr: str,
    minutes: set[int],
    hours: set[int],
    days: set[int] | None,
    months: set[int] | None,
    weekdays: set[int] | None,
) -> None:
    c = parse_cron(expr)
    assert c.minutes == minutes
    assert c.hours == hours
    assert c.days == (days if days is not None else set(range(1, 32)))
    assert c.months == (months if months is not None else set(range(1, 13)))
    assert c.weekdays == (weekdays if weekdays is not None else set(range(7)))


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        # Jenkins
        ("H * * * *", '"H" in the minute field is Jenkins\' hash syntax (H), not cron' + HINT),
        ("H/5 * * * *", '"H/5" in the minute field is Jenkins\' hash syntax (H), not cron' + HINT),
        # Quartz
        (
            "0 0 ? * *",
            '"?" in the day-of-month field is Quartz syntax ("?"), not cron; write *' + HINT,
        ),
        (
            "0 0 L * *",
            '"L" in the day-of-month field is Quartz syntax (L or W), not cron; '
            'the last day of the month is oncalendar = "*-*~01 09:00"',
        ),
        (
            "0 0 15W * *",
            '"15W" in the day-of-month field is Quartz syntax (L or W), not cron; '
            'the last day of the month is oncalendar = "*-*~01 09:00"',
        ),
        (
            "0 0 * * MON#2",
            '"MON#2" in the day-of-week field is Quartz syntax (nth weekday "#"), not cron; '
            'for example the second Monday is oncalendar = "Mon *-*-08..14 09:00"',
        ),
        (
            "0 0 * * 5L",
            '"5L" in the day-of-week field is Quartz syntax (L, the last weekday), not cron; '
            'for example the last Friday is oncalendar = "Fri *-*~07/1 09:00"',
        ),
        # seconds or year fields
        (
            "0 0 9 * * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 6 in "
            '"0 0 9 * * *": a seconds or year field is not cron' + HINT,
        ),
        (
            "0 9 * * * * 2026",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 7 in "
            '"0 9 * * * * 2026": a seconds or year field is not cron' + HINT,
        ),
        # out of range
        ("60 * * * *", 'minute "60" is out of range 0-59' + HINT),
        ("0-99 * * * *", 'minute "99" is out of range 0-59 (in "0-99")' + HINT),
        ("0 24 * * *", 'hour "24" is out of range 0-23' + HINT),
        ("0 0 0 * *", 'day-of-month "0" is out of range 1-31' + HINT),
        ("0 0 * 13 *", 'month "13" is out of range 1-12' + HINT),
        ("0 0 * * 8", 'day-of-week "8" is out of range 0-7' + HINT),
        ("*/61 * * * *", 'step "/61" in "*/61" is longer than the minute field (0-59)' + HINT),
        # shortcuts
        ("@reboot", '"@reboot" is not supported: routines run on a clock, not at boot' + HINT),
        (
            "@rand",
            'unknown shortcut "@rand": expected one of @hourly, @daily, @midnight, @weekly, '
            "@monthly, @yearly, @annually" + HINT,
        ),
        # empty and mangled
        ("", 'empty cron expression: expected five fields such as "0 9 * * 1-5"' + HINT),
        ("  ", 'empty cron expression: expected five fields such as "0 9 * * 1-5"' + HINT),
        (
            "0 9 * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 4 in "
            '"0 9 * *"' + HINT,
        ),
        ("5,,6 * * * *", 'empty list item in "5,,6" (minute field)' + HINT),
        (
            "5- * * * *",
            'cannot read "5-" in the minute field: expected a number, a range such as 1-5, '
            "a list such as 1,15, or a step such as */15" + HINT,
        ),
        (
            "+5 * * * *",
            'cannot read "+5" in the minute field: expected a number, a range such as 1-5, '
            "a list such as 1,15, or a step such as */15" + HINT,
        ),
        ("a 9 * * *", 'cannot read "a" in the minute field: expected numbers 0-59' + HINT),
        ("*/0 * * * *", 'step "/0" in "*/0" (minute): a step must be at least 1' + HINT),
        (
            "30-10 * * * *",
            'range "30-10" in the minute field runs backwards (cron ranges do not wrap '
            "around); write 10-30, or 30-59,0-10 to wrap" + HINT,
        ),
        (
            "0 0 * * FRI-SUN",
            'range "FRI-SUN" in the day-of-week field runs backwards (cron ranges do not wrap '
            "around); 7 is Sunday too, so write 5-7" + HINT,
        ),
        (
            "0 0 * * MONDAY",
            'unknown day-of-week name "MONDAY" (three-letter names only): expected one of '
            "SUN, MON, TUE, WED, THU, FRI, SAT" + HINT,
        ),
        (
            "0 0 * FOO *",
            'unknown month name "FOO": expected one of JAN, FEB, MAR, APR, MAY, JUN, JUL, AUG, '
            "SEP, OCT, NOV, DEC" + HINT,
        ),
    ],
)
def test_refusals_name_the_token_and_point_at_oncalendar(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError) as exc:
        parse_cron(expr)
    assert str(exc.value) == message
    assert "oncalendar" in str(exc.value)


def test_either_day_field_when_both_are_restricted() -> None:
    got = fires("0 0 1 * MON", datetime(2026, 1, 1, tzinfo=UTC), 6)
    assert [d.strftime("%a %m-%d") for d in got] == [
        "Mon 01-05",
        "Mon 01-12",
        "Mon 01-19",
        "Mon 01-26",
        "Sun 02-01",  # the 1st, not a Monday
        "Mon 02-02",
    ]


def test_a_day_field_starting_with_a_star_is_unrestricted() -> None:
    # Vixie cron and cronie: */2 counts as "*", so the fields are ANDed: Mondays on odd days.
    got = fires("0 0 */2 * MON", datetime(2026, 1, 1, tzinfo=UTC), 4)
    assert [d.strftime("%a %m-%d") for d in got] == [
        "Mon 01-05",
        "Mon 01-19",
        "Mon 02-09",
        "Mon 02-23",
    ]
    # ... and a restricted field that happens to cover every day still ORs: every day.
    got = fires("0 0 1-31 * MON", datetime(2026, 1, 1, tzinfo=UTC), 3)
    assert [d.day for d in got] == [2, 3, 4]


@pytest.mark.parametrize(
    "expr", ["0 0 1 * MON", "0 0 */2 * MON", "0 0 1-31 * MON", "0 0 1,*/2 * 1", "0 0 13 * FRI"]
)
def test_day_fields_agree_with_croniter(expr: str) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert fires(expr, start, 30) == croniter_fires(expr, start, 30)


@pytest.mark.parametrize("expr", ["0 0 * * 7-7", "0 0 * * 0-0", "0 0 * * SUN-SUN", "0 0 * * 7/2"])
def test_degenerate_weekday_ranges_mean_sunday_as_in_vixie_cron(expr: str) -> None:
    # croniter 7.0.0 expands these to every day (or every other day): one reason the
    # evaluator is ours and croniter is the oracle only where it is right.
    assert parse_cron(expr).weekdays == {0}
    assert croniter.expand(expr)[0][4] != [0]


def test_a_one_value_range_is_that_value() -> None:
    # "5-5" is minute 5 in Vixie cron; croniter 7.0.0 reads it as every minute.
    assert parse_cron("5-5 * * * *").minutes == {5}
    assert croniter.expand("5-5 * * * *")[0][0] == ["*"]


def _field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    value = st.integers(low, high).map(str)
    if names:
        value = value | st.sampled_from(names)
    # a < b: croniter 7.0.0 reads a degenerate range "a-a" as "*" (see the test above).
    pair = (
        st.tuples(st.integers(low, high), st.integers(low, high))
        .filter(lambda ab: ab[0] != ab[1])
        .map(sorted)
    )
    span = high - low + 1
    element = st.one_of(
        st.just("*"),
        st.integers(1, span).map(lambda k: f"*/{k}"),
        value,
        pair.map(lambda ab: f"{ab[0]}-{ab[1]}"),
        st.tuples(pair, st.integers(1, span)).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
        st.tuples(st.integers(low, high - 1), st.integers(1, span)).map(lambda t: f"{t[0]}/{t[1]}"),
    )
    return st.lists(element, min_size=1, max_size=3).map(",".join)


WEEKDAY = st.lists(
    st.one_of(
        st.just("*"),
        st.sampled_from(["MON-FRI", "SAT,SUN", "sun", "1-5", "0", "7", "1,3,5", "*/2", "2-6/2"]),
    ),
    min_size=1,
    max_size=2,
).map(",".join)


def _star_first(field: str) -> bool:
    # Vixie cron looks at a day field's first character ("MON,*" is restricted, so it ORs);
    # croniter looks at whether the expansion holds "*" (a later "*/2" too). They differ only
    # on a "*" or "*/k" that is not first, which the comparison leaves out.
    return not any(e.startswith("*") for e in field.split(",")[1:])


CRON = st.tuples(
    _field(0, 59),
    _field(0, 23),
    _field(1, 28).filter(_star_first),
    _field(1, 12, ("JAN", "feb", "Jun", "DEC")),
    WEEKDAY.filter(_star_first),
).map(" ".join)


@given(expr=CRON, start=st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1)))
def test_fires_at_the_same_instants_as_croniter(expr: str, start: datetime) -> None:
    base = start.replace(tzinfo=UTC, microsecond=0)
    assert fires(expr, base, 20) == croniter_fires(expr, base, 20)


@given(expr=CRON)
def test_fields_expand_as_croniter_expands_them(expr: str) -> None:
    c = parse_cron(expr)
    fields, _ = croniter.expand(expr)
    full = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
    ours = (c.minutes, c.hours, c.days, c.months, c.weekdays)
    for (low, high), theirs, mine in zip(full, fields, ours, strict=True):
        expected = set(range(low, high + 1)) if "*" in theirs else set(map(int, theirs))
        assert mine == expected, expr
