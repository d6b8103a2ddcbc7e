"""The daemon's timings and VINOS_DEBUG_TIMINGS, the one debug setting that shortens them for
tests of a real daemon process (supervisor/timings.py): read in main() alone, every field
checked, a bad value refused at start with what was found."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.daemon import main
from supervisor.timings import DEBUG_ENV, Timings, TimingsInvalid


def test_without_the_setting_the_daemon_has_its_production_timings() -> None:
    t = Timings.from_debug({})
    assert t == Timings()
    assert (t.tick_max_sec, t.stop_grace_sec, t.fleet_lease_sec, t.fleet_renew_sec) == (
        30.0,
        30.0,
        60.0,
        15.0,
    )
    assert t.clock_offset_file is None


def test_the_setting_overrides_only_the_fields_it_names_and_round_trips() -> None:
    text = '{"tick_max_sec": 0.2, "clock_offset_file": "/tmp/offset", "fleet_lease_sec": 3}'
    t = Timings.from_debug({DEBUG_ENV: text})
    assert t == Timings(
        tick_max_sec=0.2, clock_offset_file=Path("/tmp/offset"), fleet_lease_sec=3.0
    )
    assert Timings.from_debug({DEBUG_ENV: t.debug_env()}) == t


def test_the_forkserver_switch_is_part_of_the_one_debug_setting() -> None:
    """The test suite turns the daemon's forkserver off through VINOS_DEBUG_TIMINGS, not an
    environment variable of its own; on by default."""
    assert Timings().forkserver is True
    t = Timings.from_debug({DEBUG_ENV: '{"forkserver": false, "tick_max_sec": 1}'})
    assert t == Timings(forkserver=False, tick_max_sec=1.0)
    assert Timings.from_debug({DEBUG_ENV: t.debug_env()}) == t


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("tick=1", "expected a JSON object, found 'tick=1'"),
        ("[1]", "expected a JSON object"),
        ('{"tick_max": 1}', "unknown field 'tick_max' (expected one of clock_offset_file, "),
        ('{"tick_max_sec": -1}', "tick_max_sec: expected a number of seconds >= 0, found -1"),
        ('{"stop_grace_sec": "5"}', "stop_grace_sec: expected a number of seconds >= 0"),
        ('{"stop_grace_sec": true}', "found True"),
        ('{"clock_offset_file": 3}', "clock_offset_file: expected a path, found 3"),
        ('{"forkserver": 0}', "forkserver: expected true or false, found 0"),
    ],
)
def test_a_bad_setting_is_refused_saying_what_was_found(text: str, says: str) -> None:
    with pytest.raises(TimingsInvalid) as info:
        Timings.from_debug({DEBUG_ENV: text})
    assert str(info.value).startswith(f"{DEBUG_ENV}: ")
    assert says in str(info.value)


def test_the_daemon_refuses_to_start_on_a_bad_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], not_root: None
) -> None:
    monkeypatch.setenv(DEBUG_ENV, '{"tick_max_sec": "soon"}')
    assert main() == 1
    err = capsys.readouterr().err
    assert f"vinos-routine: {DEBUG_ENV}: tick_max_sec: expected a number" in err
