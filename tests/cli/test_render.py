"""The client's renderers (supervisor/cli/render/), tested as data: the read model's rows
(routines.query) and the daemon's status reply in, the text `list`, `status` and the bar
print out."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from routines.query import RoutineRow, decode_rows, encode_rows
from supervisor.cli.render import listing as render_listing
from supervisor.cli.render import status as render_status
from supervisor.cli.render import waybar as render_waybar
from supervisor.engine.limits import strike_reason

RED, GREEN, YELLOW, RESET = "\033[31m", "\033[32m", "\033[33m", "\033[0m"


# --- list


def routine_row(**kw: Any) -> RoutineRow:
    base: dict[str, Any] = dict(
        name="news", kind="agent", origin="user", enabled=True, valid=True,
        schedule="every day at 06:00", expression="0 6 * * *", next_run=None,
        last_status=None, last_outcome=None, last_finished=None, today_dollars=0.0,
        disabled_reason=None, errors=(), warnings=(),
    )  # fmt: skip
    base.update(kw)
    return RoutineRow(**base)


NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_list_shows_state_last_result_and_cost_of_each_routine() -> None:
    rows = [
        routine_row(running=True, last_status="ok", last_outcome="done", today_dollars=0.125),
        routine_row(name="b", enabled=False, queued=True, last_status="failed", last_failed=True),
    ]
    out = render_listing.cells(rows, set(), NOW, False)
    assert out.rows == [
        ["news", "agent", "on running", "every day at 06:00", "—", "ok · done", "$0.12"],
        ["b", "agent", "off queued", "every day at 06:00", "—", "failed", "$0.00"],
    ]
    red = render_listing.cells(rows, set(), NOW, True).rows[1][5]
    assert red == f"{RED}failed{RESET}"


def test_an_invalid_file_shows_its_errors_and_whether_the_daemon_still_runs_it() -> None:
    bad = routine_row(name="bad\x1b[2J", kind="?", valid=False, errors=("line 3: no\nname",))
    out = render_listing.cells([bad], {"bad\x1b[2J"}, NOW, False)
    assert out.rows == [
        ["bad\\x1b[2J", "", "invalid (the daemon still runs its last good version)", "", "",
         "", ""],
    ]  # fmt: skip
    assert out.notes == ["line 3: no\\nname"] and out.signed == []
    assert render_listing.cells([bad], None, NOW, False).rows[0][2] == "invalid"


def test_list_notes_say_what_overrides_the_file_and_warn_of_problems() -> None:
    row = routine_row(
        enabled=False, file_enabled=True, not_here="held by desk",
        signature_note="signature invalid: changed", signature_warning=True,
    )  # fmt: skip
    out = render_listing.cells([row], set(), NOW, False)
    assert out.signed == [
        "news: off by `vinos-routine disable`; its file says enabled = true, which counts "
        "again once that line is edited"
    ]
    assert out.notes == [
        "news: not run on this machine: held by desk",
        "news: signature invalid: changed",
    ]
    signed = render_listing.cells([routine_row(signature_note="signed by me")], set(), NOW, False)
    assert signed.signed == ["news: signed by me"] and signed.notes == []


def test_a_routine_turned_off_by_strikes_says_so_and_how_back() -> None:
    # It said "off by `vinos-routine disable`", a command the person never ran.
    reason = strike_reason("exit status 2")
    row = routine_row(enabled=False, file_enabled=True, disabled_reason=reason)
    out = render_listing.cells([row], set(), NOW, False)
    assert out.signed == []
    assert out.notes == [
        "news: disabled: 3 failed runs in a row; last: exit status 2",
        "news: off after 3 failures in a row; `vinos-routine enable news` after fixing",
    ]
    # Another reason the daemon turned it off: named, with the way back.
    once = routine_row(enabled=False, file_enabled=True, disabled_reason="ran once, as scheduled")
    assert render_listing.cells([once], set(), NOW, False).notes[1] == (
        "news: off (ran once, as scheduled); `vinos-routine enable news` turns it back on"
    )


def test_list_renders_signed_notes_plain_then_warnings_yellow() -> None:
    text = render_listing.render(render_listing.Listing([["a"] * 7], ["plain"], ["warn"]), True)
    assert text.splitlines() == [
        "NAME  KIND  STATE  SCHEDULE  NEXT  LAST  TODAY",
        "a     a     a      a         a     a     a",
        "plain",
        f"{YELLOW}warn{RESET}",
    ]


def test_list_json_says_for_an_invalid_file_whether_its_last_good_version_runs() -> None:
    rows = [routine_row(), routine_row(name="bad", valid=False)]
    assert "last_good_running" not in render_listing.json_value(rows, None)[0]
    assert render_listing.json_value(rows, None)[1]["last_good_running"] is None
    assert render_listing.json_value(rows, {"bad"})[1]["last_good_running"] is True


# --- status


def status(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        daemon=True, pid=42, status="ok", routines=3, enabled=2, running=[], queued=[], next=[],
        invalid=[], stale=[], problems=[],
    )  # fmt: skip
    base.update(kw)
    return base


def test_status_lists_what_runs_waits_and_comes_next_then_invalid_files_and_problems() -> None:
    st = status(
        running=[{"routine": "news", "started_at": "2026-12-03T11:58:00+00:00"}],
        queued=[{"routine": "mail"}],
        next=[{"routine": "b", "at": (NOW + timedelta(hours=2)).isoformat()}],
        invalid=["bad", "old"], stale=["old"], problems=["no key"],
    )  # fmt: skip
    out = render_status.lines(st, NOW, False, "hint")
    assert out[:4] == [
        "daemon: running (pid 42) · ok",
        "routines: 3 (2 enabled)",
        "  running  news since 11:58:00",
        "  queued   mail",
    ]
    assert out[4].startswith("  next     b in 2h")
    assert out[5:] == [
        "  invalid  bad (see 'vinos-routine validate')",
        "  invalid  old; its last good version still runs (see 'vinos-routine validate')",
        "  problem  no key",
    ]
    down = render_status.lines(status(daemon=False), NOW, True, "start it")
    assert down[0] == f"daemon: {YELLOW}not running{RESET}; start it"


# --- the bar, and the wire


def test_the_bar_is_rendered_from_rows_alone() -> None:
    rows = [
        routine_row(next_run=NOW + timedelta(hours=2), today_dollars=0.45, max_dollars_per_day=0.5),
        routine_row(name="mail", needs_you="r9"),
        routine_row(name="off", enabled=False, last_status="failed"),
    ]
    bar = render_waybar.waybar_json(rows, 0.45, NOW, unseen=1, pending=2)
    assert (
        bar["text"] == "󰚩 2 routines · 1 needs you · 1 pending · 1 new · next 14:00 · today $0.45"
    )
    assert bar["class"] == "attention" and bar["percentage"] == 90
    assert "news: 90% of its daily budget spent" in bar["tooltip"]


def test_rows_from_the_daemon_render_as_the_same_rows_read_here() -> None:
    rows = [
        routine_row(next_run=NOW + timedelta(hours=2), last_status="ok", today_dollars=0.1),
        routine_row(name="bad", kind="?", valid=False, errors=("line 1: no",), stale=True),
    ]
    wire = decode_rows(json.dumps(encode_rows(rows)).encode())
    assert wire == rows
    for c in (False, True):
        here = render_listing.render(render_listing.cells(rows, {"bad"}, NOW, c), c)
        there = render_listing.render(render_listing.cells(wire, {"bad"}, NOW, c), c)
        assert here == there
    assert render_listing.json_value(wire, None) == render_listing.json_value(rows, None)
