"""The read model's cost rows (routines.query.costs) as data, from the memory ledger and real
routine files: each routine's spending over a period with its share and daily cap, biggest
first, and the dollars per calendar day, compacted days included."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from routines.ledger import day_bounds
from routines.ledger.memory import MemoryLedger
from routines.query.costs import CostRow, caps, cost_rows, routine_days, spent_by_day
from routines.runs import RunEnd, RunStatus, Trigger
from routines.spec.paths import Paths, paths
from routines.spec.registry import scan
from tests.helpers import AGENT, COMMAND, write

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
UTC_ZONE = ZoneInfo("UTC")
TODAY = date(2026, 12, 3)


@pytest.fixture
def p(vinos_env: Path) -> Paths:
    return paths()


def spend(ledger: MemoryLedger, name: str, at: datetime, dollars: float, tokens: int = 0) -> None:
    run_id = f"{at:%Y%m%dT%H%M%S}-{name}"
    ledger.record_run(name, run_id=run_id, trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=at)
    end = RunEnd(RunStatus.OK, dollars=dollars, input_tokens=tokens, local_output_tokens=7)
    ledger.finish_run(run_id, end, now=at + timedelta(seconds=30))


def test_cost_rows_are_biggest_first_with_their_share_and_daily_cap(p: Paths) -> None:
    write(p.routines_dir, "news", AGENT)  # max_dollars_per_day = 0.5
    write(p.routines_dir, "mail", COMMAND)
    ledger = MemoryLedger()
    spend(ledger, "mail", NOW - timedelta(hours=2), 0.25, tokens=100)
    spend(ledger, "news", NOW - timedelta(hours=1), 0.75, tokens=300)
    spend(ledger, "news", NOW - timedelta(days=1), 9.0)  # yesterday: outside the period
    rows = cost_rows(ledger, *day_bounds(TODAY, UTC_ZONE), scan(p))
    assert [r.routine for r in rows] == ["news", "mail"]
    news, mail = rows
    assert (news.runs, news.dollars, news.share, news.cap) == (1, 0.75, 0.75, 0.5)
    assert (mail.share, mail.cap) == (0.25, None)  # no daily budget
    assert (news.premium_tokens, news.local_tokens) == (300, 7)
    assert news.as_json() == {
        "routine": "news", "runs": 1, "input_tokens": 300, "output_tokens": 0,
        "local_input_tokens": 0, "local_output_tokens": 7, "dollars": 0.75, "share": 0.75,
        "cap": 0.5,
    }  # fmt: skip
    assert caps(scan(p)) == {"news": 0.5, "mail": None}
    # Without the files: no caps; nothing spent: a share of 0.
    assert cost_rows(ledger, *day_bounds(TODAY, UTC_ZONE))[0].cap is None
    spend(ledger, "free", NOW - timedelta(days=5), 0.0)
    (free,) = cost_rows(ledger, *day_bounds(TODAY - timedelta(days=5), UTC_ZONE))
    assert free == CostRow("free", 1, 0, 0, 0, 7, 0.0, 0.0)


def test_dollars_per_day_hold_the_compacted_days_too() -> None:
    ledger = MemoryLedger()
    spend(ledger, "news", NOW - timedelta(days=40), 1.5)
    spend(ledger, "mail", NOW - timedelta(days=40), 0.5)
    spend(ledger, "news", NOW - timedelta(hours=1), 0.25)
    old = TODAY - timedelta(days=40)
    days = [old, TODAY - timedelta(days=1), TODAY]
    before = (spent_by_day(ledger, days, UTC_ZONE), routine_days(ledger, days, UTC_ZONE))
    assert before[0] == {old: 2.0, TODAY - timedelta(days=1): 0.0, TODAY: 0.25}
    assert before[1] == {"news": {old: 1.5, TODAY: 0.25}, "mail": {old: 0.5}}
    assert ledger.compact(NOW - timedelta(days=30), UTC_ZONE) == 2
    assert (spent_by_day(ledger, days, UTC_ZONE), routine_days(ledger, days, UTC_ZONE)) == before
