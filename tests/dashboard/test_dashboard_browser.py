"""The dashboard in a real headless Chromium, against a real daemon and the real dashboard
process: what a person does on the page, and that untrusted text never runs."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from routines.ledger import Ledger
from routines.runs import Outcome, RunEnd, RunStatus, Trigger
from routines.schedule.tz import machine_timezone
from routines.spec.paths import paths
from tests.dashboard.browser import browser
from tests.dashboard.dashkit import Dashboard
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    gated,
    release,
    state,
    write_routine,
)
from tests.supervisor.gates import gate_home

pytestmark = pytest.mark.slow

WAIT_MS = 90_000  # generous: the machine is shared; nothing here is a timing assertion
HOSTILE_TEXT = """\
# Hostile output
<script>var e = document.createElement('div'); e.id = 'pwned'; document.body.appendChild(e)</script>
<img src=x onerror="document.body.appendChild(document.createElement('div')).id = 'pwned'">
[click me](javascript:document.body.appendChild(document.createElement('hr')).id='pwned')
[spaced](java\tscript:alert(1)) and [fine](https://example.invalid/page)
"""
# One line, as [command].run must be, whatever the text holds.
HOSTILE = f"echo {base64.b64encode(HOSTILE_TEXT.encode()).decode()} | base64 -d"


SPENDER = """\
[routine]
description = "Reads the news, premium when it must"
enabled = false
[schedule]
every = "every day at 6am"
timezone = "UTC"
[agent]
route = "auto"
system = "Summarise the news."
[budget]
max_dollars_per_day = 0.25
"""


def seed_spending(routine: str, days: int = 30) -> dict[str, float]:
    """Finished runs with a cost on some of the last `days` days (local noon); returns the
    dollars per ISO day."""
    zone = ZoneInfo(machine_timezone())
    today = datetime.now(UTC).astimezone(zone).date()
    spent: dict[str, float] = {}
    with Ledger(paths().ledger) as ledger:
        for n in range(0, days, 3):
            day = today - timedelta(days=n)
            at = datetime(day.year, day.month, day.day, 12, tzinfo=zone)
            run_id = f"seed-{routine}-{n}"
            ledger.record_run(
                routine, run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=at
            )
            dollars = 0.05 + n / 100
            ledger.finish_run(
                run_id,
                now=at + timedelta(seconds=42),
                end=RunEnd(
                    status=RunStatus.OK if n % 2 == 0 else RunStatus.FAILED,
                    outcome=Outcome.DONE,
                    route="local->premium",
                    dollars=dollars,
                    input_tokens=1200 + n,
                    output_tokens=300,
                    local_input_tokens=4000,
                    local_output_tokens=800,
                ),
            )
            spent[day.isoformat()] = dollars
    return spent


@pytest.fixture
def daemon(tmp_path: Path, not_root: None) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path).start()
    yield d
    d.stop()


def test_a_person_enables_runs_and_reads_a_routine(tmp_path: Path, not_root: None) -> None:
    from playwright.sync_api import expect

    write_routine(
        "hello",
        command_routine(
            gated("hello", "printf '# Hello\\n\\nAll *good*: 3 new mails.\\n'"),
            schedule='cron = "0 3 * * *"',
            enabled=False,
            # Longer than every wait below: under load the page may show "running" late, and a
            # run that timed out meanwhile could never show it (a failure at load 8 was that).
            timeout=600,
            extra=gate_home("hello"),
        ).replace("[routine]\n", '[routine]\ndescription = "Says hello when asked"\n'),
    )
    write_routine("spender", SPENDER)
    spent = seed_spending("spender")
    daemon = DaemonProcess(tmp_path).start()
    dash = Dashboard(tmp_path / "dashboard.log").start()
    try:
        with browser(tmp_path / "profile") as ctx:
            page = ctx.new_page()
            page.goto(f"{dash.origin}/?token={dash.token}")
            assert page.url == f"{dash.url}/"  # the token left the address bar
            row = page.locator("#routine-hello")
            expect(row).to_contain_text("Says hello when asked")
            expect(row.locator(".state")).to_contain_text("off")
            expect(page.locator("#proposals-empty")).to_be_visible()
            expect(page.locator("#proposals-empty")).to_contain_text("No proposals wait")

            row.get_by_role("button", name="Enable").click()
            expect(page.locator("#note")).to_have_text("hello enabled")
            expect(page.locator("#routine-hello .state")).to_contain_text("on")
            assert state("hello").enabled_override is True  # the daemon made the change

            page.locator("#routine-hello").get_by_role("button", name="Run now").click()
            expect(page.locator("#note")).to_contain_text("hello queued as")
            page.evaluate("window.stillTheSamePage = true")
            expect(page.locator("#routine-hello .live-state")).to_have_text(
                "running", timeout=WAIT_MS
            )
            run_id = page.locator("#note").inner_text().rsplit(" ", 1)[1]
            follow = ctx.new_page()  # the run page follows the run, as `logs --follow` does
            follow.goto(f"{dash.url}/run/{run_id}")
            expect(follow.locator("#run-status .status")).to_have_text("running")
            follow.evaluate("window.stillTheSamePage = true")
            release("hello")
            expect(follow.locator("#run-status .status")).to_have_text("ok", timeout=WAIT_MS)
            expect(follow.locator("#log")).to_contain_text("output written")
            assert follow.evaluate("window.stillTheSamePage") is True
            follow.close()
            expect(page.locator("#routine-hello .last .status")).to_have_text("ok", timeout=WAIT_MS)
            expect(page.locator("#routine-hello .live-state")).to_have_count(0)
            # The short poll swapped the section in: the page was never reloaded.
            assert page.evaluate("window.stillTheSamePage") is True

            page.locator("#routine-hello .last a").click()
            expect(page.locator("#run-status .status")).to_have_text("ok")
            expect(
                page.locator("#output").get_by_role("heading", name="Hello", exact=True)
            ).to_be_visible()
            expect(page.locator("#output em")).to_have_text("good")
            expect(page.locator("#log tr").first).to_be_visible()

            page.goto(f"{dash.url}/routine/hello")
            expect(page.locator("#description")).to_have_text("Every day at 3:00 AM")
            expect(page.locator("#fires li")).to_have_count(5)
            expect(page.locator("tr.run-row")).to_have_count(1)
            expect(page.locator("#status-chart svg g.bar")).to_have_count(30)
            page.goto(f"{dash.url}/routine/hello?status=failed")
            expect(page.locator("tr.run-row")).to_have_count(0)

            page.goto(f"{dash.url}/cost")
            bars = page.locator("#cost-chart svg g.bar")
            expect(bars).to_have_count(30)  # one bar per day, spent or not
            days = bars.evaluate_all("bs => bs.map(b => [b.dataset.day, +b.dataset.total])")
            assert len({d for d, _ in days}) == 30
            for day, total in days:
                assert total == pytest.approx(spent.get(day, 0.0)), day
            cap = page.locator('.routine-cost[data-routine="spender"] .cap')
            expect(cap).to_contain_text("daily cap $0.25")

            page.goto(f"{dash.url}/brief")
            brief = page.locator('.brief-item[data-routine="hello"]')
            expect(brief.get_by_role("heading", name="Hello", exact=True)).to_be_visible()

            page.goto(f"{dash.url}/schedule")
            page.select_option("select[name=form]", "every")
            page.fill("input[name=expr]", "every monday and thursday at 8am")
            page.fill("input[name=tz]", "Europe/Berlin")
            page.get_by_role("button", name="Explain").click()
            expect(page.locator("#description")).to_have_text(
                "Every Monday and Thursday at 8:00 AM"
            )
            expect(page.locator("#fires li")).to_have_count(10)
            page.select_option("select[name=form]", "cron")
            page.fill("input[name=expr]", "0 0 L * *")
            page.get_by_role("button", name="Explain").click()
            expect(page.locator("#refusal")).to_contain_text("oncalendar")
    finally:
        dash.stop()
        daemon.stop()


def test_hostile_output_never_runs(tmp_path: Path, not_root: None) -> None:
    from playwright.sync_api import expect

    write_routine("hostile", command_routine(HOSTILE, schedule='cron = "0 3 * * *"'))
    daemon = DaemonProcess(tmp_path).start()
    dash = Dashboard(tmp_path / "dashboard.log").start()
    try:
        fin = daemon.request("run", {"name": "hostile"})
        assert fin["status"] == "ok", fin
        with browser(tmp_path / "profile") as ctx:
            page = ctx.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(f"{dash.origin}/?token={dash.token}")
            for path in (f"/run/{fin['run_id']}", "/brief"):
                page.goto(dash.url + path)
                output = page.locator(".output").first
                expect(output.get_by_role("heading", name="Hostile output")).to_be_visible()
                # The markup is shown as text; no element of it reached the DOM.
                expect(output).to_contain_text("<script>var e = document.createElement")
                expect(output).to_contain_text("<img src=x onerror=")
                assert output.locator("script, img").count() == 0
                # javascript: links are not links: the text stays, inert.
                assert page.locator('a[href^="javascript"], a[href*="script:"]').count() == 0
                expect(output).to_contain_text("[click me](javascript:")
                page.get_by_text("[click me]", exact=False).click()
                expect(output.locator('a[href="https://example.invalid/page"]')).to_have_text(
                    "fine"
                )
                assert page.locator("#pwned").count() == 0
    finally:
        dash.stop()
        daemon.stop()
