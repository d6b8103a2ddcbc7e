"""cron → OnCalendar: the coverage matrix (a repetition keeps its start, as systemd needs), the
two-line form for cron's day OR, every refusal, and a property test against systemd-analyze (accepts
each line) and croniter (same instants over 20 steps from random bases)."""

from __future__ import annotations

import heapq
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import event, given, settings
from hypothesis import strategies as st

from routines.schedule.cron import parse_cron
from routines.schedule.error import ScheduleError
from routines.schedule.translate import translate_cron
from tests.helpers.systemd_calendar import (
    analyze,
    require_systemd_analyze,
    systemd_model,
    transitions,
)

# A repetition needs a start in systemd (`systemd-analyze calendar` refuses `*:*/30`), and cron's
# @weekly is Sunday while systemd's `weekly` is Monday.
MATRIX = [
    ("0 6 * * *", ("*-*-* 06:00:00",)),
    ("*/30 * * * *", ("*-*-* *:00/30:00",)),  # the naive *-*-* *:*/30:00 is refused by systemd
    ("0 6 * * MON-FRI", ("Mon..Fri *-*-* 06:00:00",)),
    ("@hourly", ("hourly",)),
    ("@daily", ("daily",)),
    ("@midnight", ("daily",)),
    ("@weekly", ("Sun *-*-* 00:00:00",)),  # not systemd's weekly, which is Monday 00:00
    ("@monthly", ("monthly",)),
    ("@yearly", ("yearly",)),
    ("@annually", ("yearly",)),
    ("0 0 1 * *", ("*-*-01 00:00:00",)),
    ("15 3 * * 0", ("Sun *-*-* 03:15:00",)),
    ("15 3 * * 7", ("Sun *-*-* 03:15:00",)),
    ("0 9,17 * * 1-5", ("Mon..Fri *-*-* 09,17:00:00",)),
    ("0 */6 * * *", ("*-*-* 00/6:00:00",)),  # the naive *-*-* */6:00:00 is refused by systemd
    ("0 12 1 JAN *", ("*-01-01 12:00:00",)),
    ("0 12 1 1,7 *", ("*-01,07-01 12:00:00",)),
    ("0 6,18 * * mon,wed,fri", ("Mon,Wed,Fri *-*-* 06,18:00:00",)),
    # where cron and systemd differ
    ("0 0 1 * MON", ("Mon *-*-* 00:00:00", "*-*-01 00:00:00")),  # cron ORs, systemd ANDs
    ("30 8 1,15 * 1-5", ("Mon..Fri *-*-* 08:30:00", "*-*-01,15 08:30:00")),
    ("0 0 */2 * MON", ("Mon *-*-01..31/2 00:00:00",)),  # */2 counts as *: ANDed, one line
    ("0 0 1-31 * MON", ("*-*-* 00:00:00",)),  # restricted but full: OR means every day
    ("5-50/15 9-17 * */3 *", ("*-01/3-* 09..17:05..50/15:00",)),
    ("10-40/15 * * * *", ("*-*-* *:10..40/15:00",)),
    # systemd 252 skips values after a carry out of a bare repetition: give the end instead
    ("*/7 */23 * * *", ("*-*-* 00..23/23:00..56/7:00",)),
    ("0 */5 * * *", ("*-*-* 00..20/5:00:00",)),
    ("0 0 */16 * *", ("*-*-01..17/16 00:00:00",)),
    ("0 0 * * 6,0", ("Sat,Sun *-*-* 00:00:00",)),
    ("0 0 * * */2", ("Tue,Thu,Sat,Sun *-*-* 00:00:00",)),
    # a bare repetition that does not start at the field's first value makes systemd 252
    # fail in DST zones: the end is always written (test_steps_with_a_start_elapse_over_dst)
    ("0 12 1 4-12/6 *", ("*-04..10/6-01 12:00:00",)),
    ("45 3-23/6 * * *", ("*-*-* 03..21/6:45:00",)),
]
SEED_REFUSALS = [
    "H * * * *",
    "H/5 * * * *",
    "0 0 ? * *",
    "0 0 L * *",
    "0 0 15W * *",
    "0 0 * * MON#2",
    "0 0 0 * * *",  # six fields
    "0 0 0 * * * 2026",  # seven fields
    "60 * * * *",
    "0-99 * * * *",
    "@reboot",
    "@rand",
    "",
    "not a schedule",
    "5,,6 * * * *",
]
BASE = datetime(2026, 1, 1, tzinfo=UTC)


def merged(exprs: tuple[str, ...], base: datetime, n: int) -> list[datetime]:
    """systemd's elapses of several OnCalendar lines together (a timer with several lines)."""
    runs = [analyze(e, "UTC", base, n) for e in exprs]
    for e, r in zip(exprs, runs, strict=True):
        assert r.normalized is not None, f"systemd refused {e!r}: {r.stderr}"
    out: list[datetime] = []
    for t in heapq.merge(*(r.elapses for r in runs)):
        if not out or t != out[-1]:
            out.append(t)
    return out[:n]


def croniter_fires(expr: str, base: datetime, n: int) -> list[datetime]:
    it = croniter(expr, base, implement_cron_bug=True)
    return [it.get_next(datetime).astimezone(UTC) for _ in range(n)]


@pytest.mark.parametrize(("cron", "lines"), MATRIX)
def test_coverage_matrix(cron: str, lines: tuple[str, ...]) -> None:
    assert translate_cron(cron) == lines


@pytest.mark.parametrize(("cron", "lines"), MATRIX)
def test_each_translation_is_accepted_by_systemd_and_fires_as_croniter(
    cron: str, lines: tuple[str, ...]
) -> None:
    require_systemd_analyze()
    assert merged(lines, BASE, 20) == croniter_fires(cron, BASE, 20)


def test_the_naive_translations_systemd_refuses() -> None:
    for line in ("*-*-* *:*/30:00", "*-*-* */6:00:00"):
        assert analyze(line, "UTC", BASE, 1).normalized is None
    # and systemd's `weekly` is not cron's @weekly
    assert analyze("weekly", "UTC", BASE, 1).elapses[0].strftime("%a") == "Mon"
    assert croniter_fires("@weekly", BASE, 1)[0].strftime("%a") == "Sun"


def test_a_zone_is_appended_to_every_line() -> None:
    assert translate_cron("0 0 1 * MON", "Europe/Berlin") == (
        "Mon *-*-* 00:00:00 Europe/Berlin",
        "*-*-01 00:00:00 Europe/Berlin",
    )
    assert translate_cron("@daily", "UTC") == ("daily UTC",)


@pytest.mark.parametrize("cron", SEED_REFUSALS)
def test_refusals_are_crons_and_point_at_oncalendar(cron: str) -> None:
    with pytest.raises(ScheduleError) as parsed:
        parse_cron(cron)
    with pytest.raises(ScheduleError) as translated:
        translate_cron(cron)
    assert str(translated.value) == str(parsed.value)
    assert "oncalendar" in str(translated.value)


def _field(low: int, high: int) -> st.SearchStrategy[str]:
    span = high - low + 1
    value = st.integers(low, high)
    pair = st.tuples(value, value).filter(lambda ab: ab[0] != ab[1]).map(sorted)
    element = st.one_of(
        st.just("*"),
        st.integers(1, span).map(lambda k: f"*/{k}"),
        value.map(str),
        pair.map(lambda ab: f"{ab[0]}-{ab[1]}"),
        st.tuples(pair, st.integers(1, span)).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
    )
    # "*" or "*/k" only first in a list: that is where Vixie cron and croniter agree
    # (test_cron.py). Vixie reads only a field's first character for its day rule; croniter
    # also treats a later "*/k" (as in "0,*/1") as unrestricted.
    return (
        st.lists(element, min_size=1, max_size=3)
        .map(",".join)
        .filter(lambda f: not any(e.startswith("*") for e in f.split(",")[1:]))
    )


REFUSED_TOKEN = st.sampled_from(["L", "?", "H", "15W", "MON#2", "60", "*/0", "5L"])
CRON = st.one_of(
    st.tuples(_field(0, 59), _field(0, 23), _field(1, 28), _field(1, 12), _field(0, 6)).map(
        " ".join
    ),
    st.tuples(st.integers(0, 4), REFUSED_TOKEN).map(
        lambda t: " ".join(t[1] if i == t[0] else "*" for i in range(5))
    ),
)


def _month_end(t: tuple[int, int, int]) -> datetime:
    year, month, minute = t
    first_of_next = datetime(year + month // 12, month % 12 + 1, 1)
    return first_of_next - timedelta(minutes=60 - minute)  # 23:mm on the month's last day


# Random instants, and late evenings on the last day of a month, where carries happen.
BASES = st.one_of(
    st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1)),
    st.tuples(st.integers(2000, 2099), st.integers(1, 12), st.integers(0, 59)).map(_month_end),
)


@settings(max_examples=60)
@given(cron=CRON, start=BASES)
def test_translations_fire_as_croniter_or_are_refused(cron: str, start: datetime) -> None:
    require_systemd_analyze()
    try:
        lines = translate_cron(cron)
    except ScheduleError as exc:
        event("refused")
        assert "oncalendar" in str(exc)
        return
    event(f"{len(lines)} line(s)")
    base = start.replace(tzinfo=UTC, microsecond=0)
    assert merged(lines, base, 20) == croniter_fires(cron, base, 20), lines


# Every field a step can start in, with a start that is not the field's first value (and one
# that is, for contrast), in zones with DST in both hemispheres.
STEPS_WITH_A_START = [
    ("5-59/15 * * * *", timedelta(hours=3)),
    ("10-40/15 * * * *", timedelta(hours=3)),
    ("*/20 * * * *", timedelta(hours=3)),
    ("45 3-23/6 * * *", timedelta(days=2)),
    ("30 1-23/3 * * *", timedelta(days=2)),
    ("0 */6 * * *", timedelta(days=2)),
    ("0 0 3-31/7 * *", timedelta(days=40)),
    ("0 12 1 4-12/6 *", timedelta(days=400)),
    ("0 12 1 2-12/3 *", timedelta(days=400)),
    ("0 12 1 */3 *", timedelta(days=400)),
    ("5-50/15 1-3 * * *", timedelta(days=1)),
]
DST_ZONES = ["America/New_York", "Europe/London", "Australia/Sydney"]


@pytest.mark.parametrize("zone", DST_ZONES)
@pytest.mark.parametrize(("cron", "before"), STEPS_WITH_A_START)
def test_steps_with_a_start_elapse_over_dst(cron: str, before: timedelta, zone: str) -> None:
    """Through `systemd-analyze calendar` (the line as a timer gets it, zone and all) from a
    little before each of the year's offset changes: systemd must find every elapse, and
    they must be the instants our own schedule gives under systemd's DST rule."""
    require_systemd_analyze()
    (line,) = translate_cron(cron, zone)
    pattern = parse_cron(cron).pattern()
    for change in transitions(zone, 2026):
        base = change - before
        sd = analyze(line, zone, base, 20)
        assert sd.normalized is not None and not sd.stderr, (line, sd.stderr)
        assert len(sd.elapses) == 20, (line, base, sd.stderr)
        assert list(sd.elapses) == systemd_model(pattern, ZoneInfo(zone), base, 20), (line, base)
        assert sd.elapses[-1] > change  # the window did cross the change


def test_the_open_form_fails_where_the_end_works() -> None:
    """The finding behind the rule, so a systemd that stops failing shows up here."""
    base = datetime(2026, 3, 1, tzinfo=UTC)
    bare = analyze("*-04/6-01 12:00:00 America/New_York", "America/New_York", base, 3)
    assert bare.elapses == () and "Failed to determine next elapse" in bare.stderr
    ended = analyze("*-04..10/6-01 12:00:00 America/New_York", "America/New_York", base, 3)
    assert len(ended.elapses) == 3
