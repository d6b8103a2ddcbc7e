"""OnCalendar against `systemd-analyze calendar`: a corpus x 3 zones x base times around DST.

For every expression: systemd and we accept or refuse it alike, print the same normalized
form, and give the same next 20 elapses. Around a DST change systemd keeps its own rule
(`routines.schedule.walltime` says where ours differs), so there the comparison runs our wall-clock
enumeration under systemd's rule (`systemd_model`); our own slots are compared directly on
every day without an offset change. Our DST rule itself is pinned in test_dst.py.

systemd's answers come from a golden file (tests/helpers/oncalendar_golden.json: about 600
runs of systemd-analyze, a minute a zone on a loaded machine), recorded with

    python tests/routines/schedule/test_oncalendar_oracle.py --record

after any change of the corpus; `test_the_golden_file_is_what_systemd_says_now` asks the live
systemd-analyze again for a sample of it, and the carry test below asks it live.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from routines.schedule.error import ScheduleError
from routines.schedule.oncalendar import parse_oncalendar
from routines.schedule.walltime import next_instant
from tests.helpers.systemd_calendar import (
    Calendar,
    Job,
    analyze,
    analyze_jobs,
    is_transition_day,
    job_key,
    load_golden,
    require_systemd_analyze,
    save_golden,
    systemd_model,
    transitions,
)

ACCEPTED = [
    # shorthands
    "minutely",
    "hourly",
    "daily",
    "weekly",
    "monthly",
    "yearly",
    "annually",
    "quarterly",
    "semiannually",
    "Daily",
    # wall times around the DST hours
    "*-*-* 00:00",
    "*-*-* 00:30",
    "*-*-* 01:00",
    "*-*-* 01:30",
    "*-*-* 01:59:59",
    "*-*-* 02:00",
    "*-*-* 02:15",
    "*-*-* 02:30",
    "*-*-* 03:00",
    "*-*-* 23:30",
    "*-*-* 01,02,03:00",
    "*-*-* 01..03:00,30",
    "*-*-* 00/2:00",
    "*-*-* 00/6:00:00",
    "*-*-* 01/3:30",
    "*-*-* 9..17/2:15",
    "*:00/15",
    "*:00/30",
    "*-*-* *:00/30:00",
    "*:05/20",
    "*:30",
    "*:0,20,40",
    "*:00:30",
    "*-*-* 01:30:30",
    "*:*:00,30",
    "*:00/10:15",
    # weekdays
    "Mon..Fri 09:00",
    "Mon-Fri 09:00",
    "Sat,Sun 10:30",
    "Sun 01:30",
    "Sun 02:30",
    "Mon,Wed,Fri *-*-* 06,18:00:00",
    "Tue..Thu 17:45",
    "Wed, 17:48",
    "monday 07:15",
    "Friday *-*-* 02:00",
    "Sat,Thu,Mon..Wed,Sat..Sun 04:00",
    # dates, ~ and years
    "*-*-01 00:00",
    "*-*-01,15 12:00",
    "Mon *-*-01..07 09:00",
    "Fri *-*~07/1 17:00",
    "*-*~01 09:00",
    "*-*~03",
    "*-*~1..3 06:00",
    "*-*~02/1 03:00",
    "*-02~03 08:00",
    "*-01,04,07,10-01 00:00",
    "*-1/3-1 05:00",
    "*-03,10,11-* 02:30",
    "2026-*-* 02:30",
    "2026..2027-*-* 01:30",
    "2026/2-03-08 02:00",
    "26-11-01 01:30",
    "*-02-29 12:00",
    "*-*-31 01:30",
    "*-*-05..20/5 02:00",
    "*-04-05 01:45",
    "*-10-04 02:15",
    # a zone in the expression
    "*-*-* 09:00 UTC",
    "daily UTC",
    "Mon..Fri 08:00 Europe/Berlin",
    "*-*-* 02:30 America/New_York",
    "weekly Pacific/Auckland",
]
REFUSED_BY_BOTH = [
    "*-*-* *:*/30:00",  # an every-30-minutes form people write; systemd needs a start: *:00/30
    "*-*-* */6:00:00",  # likewise: 00/6
    "Fri..Mon",
    "Mon..",
    "Mond 09:00",
    "*-*-32",
    "*-13-01",
    "*-*~29",
    "*-*~1/1",
    "24:00",
    "*:60",
    "*:50/10",
    "2200-01-01",
    "1969-01-01",
    "12",
    "*-*-* 9:00:00:00",
    "*-*-*/2",
    "Mon 2026",
    "daily Foo/Bar",
    "*",
]
# systemd accepts these; we refuse them on purpose (see routines/schedule/oncalendar.py).
REFUSED_BY_US_ONLY = [
    "*:*:1.5",  # fractions of a second
    "@1767225600",  # a one-shot timestamp
    "daily EST",  # abbreviations and slash-less legacy names depend on the machine
    "daily GMT",
    "daily CET",
]
ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe"]


def _bases(zone: str) -> list[datetime]:
    """Three hours before each 2026 offset change (frequent events reach it in 20 steps),
    and a month before the first (monthly and yearly ones cross it)."""
    changes = transitions(zone, 2026)
    assert len(changes) == 2, changes
    return [changes[0] - timedelta(days=30)] + [c - timedelta(hours=3) for c in changes]


def _systemd_loops(sd: Calendar, zone: str, base: datetime) -> bool:
    """systemd 252 gives up ("Infinite loop in calendar calculation") on some wall times in a
    spring-forward gap, e.g. `*-*-* 01/3:30` in London on 2026-03-29. Only that known bug,
    and only with a gap just ahead, excuses a missing answer."""
    if sd.elapses or "Infinite loop in calendar calculation" not in sd.stderr:
        return False
    tz = ZoneInfo(zone)

    def offset(t: datetime) -> timedelta:
        got = t.astimezone(tz).utcoffset()
        assert got is not None
        return got

    hour = timedelta(hours=1)
    return any(
        base < c <= base + timedelta(days=2) and offset(c - hour) < offset(c + hour)
        for c in transitions(zone, base.year)
    )


GOLDEN = Path(__file__).resolve().parents[2] / "helpers" / "oncalendar_golden.json"
NORMAL_BASE = datetime(2026, 1, 1, tzinfo=UTC)
LIVE_SAMPLE = 12  # golden answers asked of systemd-analyze again, spread over the corpus


def jobs() -> list[Job]:
    """Every question this module asks systemd-analyze, in a fixed order."""
    elapses = [(e, z, b, 20) for z in ZONES for b in _bases(z) for e in ACCEPTED]
    forms = [(e, "UTC", NORMAL_BASE, 1) for e in ACCEPTED + REFUSED_BY_BOTH + REFUSED_BY_US_ONLY]
    return elapses + forms


@pytest.fixture(scope="module")
def golden() -> dict[str, Calendar]:
    answers = load_golden(GOLDEN)
    missing = [job_key(j) for j in jobs() if job_key(j) not in answers]
    if missing:
        pytest.fail(
            f"{GOLDEN} lacks {len(missing)} answer(s) (first: {missing[0]!r}): record it again "
            "with `python tests/routines/schedule/test_oncalendar_oracle.py --record`"
        )
    return answers


@pytest.fixture(scope="module")
def oracle(golden: dict[str, Calendar]) -> dict[tuple[str, str, datetime], Calendar]:
    return {
        (e, z, b): golden[job_key((e, z, b, 20))]
        for z in ZONES
        for b in _bases(z)
        for e in ACCEPTED
    }


def form(golden: dict[str, Calendar], expr: str) -> Calendar:
    return golden[job_key((expr, "UTC", NORMAL_BASE, 1))]


def test_the_corpus_is_large_enough() -> None:
    assert len(ACCEPTED) >= 60


def test_the_golden_file_is_what_systemd_says_now(golden: dict[str, Calendar]) -> None:
    """The live re-check: a sample spread over every zone, base and form, asked again."""
    require_systemd_analyze()
    every = jobs()
    sample = every[:: max(1, len(every) // LIVE_SAMPLE)]
    for job, live in analyze_jobs(sample).items():
        recorded = golden[job_key(job)]
        assert (live.normalized, live.elapses) == (recorded.normalized, recorded.elapses), job


def test_normalized_form_and_acceptance_match_systemd(golden: dict[str, Calendar]) -> None:
    for expr in ACCEPTED:
        sd = form(golden, expr)
        assert sd.normalized is not None, f"systemd refused {expr!r}: {sd.stderr}"
        assert parse_oncalendar(expr).normalized == sd.normalized, expr
    for expr in REFUSED_BY_BOTH:
        sd = form(golden, expr)
        assert sd.normalized is None, f"systemd accepted {expr!r} as {sd.normalized!r}"
        with pytest.raises(ScheduleError):
            parse_oncalendar(expr)


def test_our_deliberate_refusals_are_accepted_by_systemd(golden: dict[str, Calendar]) -> None:
    for expr in REFUSED_BY_US_ONLY:
        assert form(golden, expr).normalized is not None, expr
        with pytest.raises(ScheduleError):
            parse_oncalendar(expr)


@pytest.mark.parametrize("zone", ZONES)
def test_next_20_elapses_match_systemd_under_its_dst_rule(
    zone: str, oracle: dict[tuple[str, str, datetime], Calendar]
) -> None:
    for base in _bases(zone):
        for expr in ACCEPTED:
            event = parse_oncalendar(expr)
            tz = ZoneInfo(event.zone or zone)
            sd = oracle[(expr, zone, base)]
            if _systemd_loops(sd, zone, base):
                continue
            assert sd.elapses, f"systemd gave no elapse for {expr!r}: {sd.stderr}"
            ours = systemd_model(event.pattern, tz, base, len(sd.elapses))
            assert ours == list(sd.elapses), (expr, zone, base)


@pytest.mark.parametrize("zone", ZONES)
def test_our_slots_match_systemd_on_days_without_an_offset_change(
    zone: str, oracle: dict[tuple[str, str, datetime], Calendar]
) -> None:
    compared = 0
    for base in _bases(zone):
        for expr in ACCEPTED:
            event = parse_oncalendar(expr)
            tz = ZoneInfo(event.zone or zone)
            if _systemd_loops(oracle[(expr, zone, base)], zone, base):
                continue
            sd = list(oracle[(expr, zone, base)].elapses)
            ours: list[datetime] = []
            t = base
            while len(ours) < len(sd):
                got = next_instant(event.pattern, tz, t)
                assert got is not None
                ours.append(got)
                t = got
            horizon = min(ours[-1], sd[-1])
            keep_ours = [i for i in ours if i <= horizon and not is_transition_day(tz, i)]
            keep_sd = [i for i in sd if i <= horizon and not is_transition_day(tz, i)]
            assert keep_ours == keep_sd, (expr, zone, base)
            compared += len(keep_ours)
    assert compared > 2000  # most of the corpus is compared directly


@pytest.mark.parametrize(
    ("bare", "listed", "base"),
    [
        ("*:00/7", "*:00,07,14,21,28,35,42,49,56", datetime(2026, 1, 1, 23, 56, 30, tzinfo=UTC)),
        ("*-*-01/16", "*-*-01,17", datetime(2026, 12, 18, tzinfo=UTC)),
        ("*-*-* 00/5:00", "*-*-* 00,05,10,15,20:00", datetime(2026, 1, 31, 20, 30, tzinfo=UTC)),
    ],
)
def test_where_systemd_skips_after_a_carry_we_follow_its_own_list_form(
    bare: str, listed: str, base: datetime
) -> None:
    """systemd 252 lets a repetition without an end run past its field and keeps the rest
    after carrying (`*:00/7` from 23:56 gives 00:07, skipping midnight), though the man page
    and the same list written out agree on midnight. We give the documented answer; the
    translator never emits such a repetition (test_translate.py)."""
    sd_bare = analyze(bare, "UTC", base, 2).elapses
    sd_listed = analyze(listed, "UTC", base, 2).elapses
    assert sd_bare != sd_listed  # the systemd bug; if this fails, systemd was fixed
    ours = next_instant(parse_oncalendar(bare).pattern, ZoneInfo("UTC"), base)
    assert ours == sd_listed[0]
    bare_pattern = parse_oncalendar(bare).pattern
    # the same wall times (the DST rule aside: a repeated hour counts as a step)
    assert replace(parse_oncalendar(listed).pattern, elapsed=bare_pattern.elapsed) == bare_pattern


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/routines/schedule/test_oncalendar_oracle.py --record")
    require_systemd_analyze()
    save_golden(GOLDEN, analyze_jobs(jobs()))
    print(f"{GOLDEN}: {len(jobs())} answers recorded")
