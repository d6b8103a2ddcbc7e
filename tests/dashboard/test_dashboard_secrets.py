"""The dashboard's three secrets and its redirects, over plain HTTP to the real process: the
launch token opens one session and is then replaced, the session ends with the process, the
CSRF value is not the cookie, and a redirect goes nowhere but the dashboard, saying only what
the dashboard says."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.dashboard.dashkit import Dashboard


def test_the_launch_token_opens_one_session_then_a_new_token_is_written(
    dashboard: Dashboard,
) -> None:
    used = dashboard.token  # dashkit exchanged the first one at start; this is the next
    assert dashboard.session and dashboard.session != used
    first = dashboard.get(f"/?token={used}", bare=True)
    assert first.status == 303 and first.cookies
    again = dashboard.get(f"/?token={used}", bare=True)
    assert again.status == 403 and not again.cookies
    assert "used already" in again.body
    fresh = dashboard.token
    assert fresh != used
    assert dashboard.exchange(fresh) == dashboard.session  # one session per start


def test_a_restart_drops_the_session_and_every_earlier_token(tmp_path: Path) -> None:
    one = Dashboard(tmp_path / "one.log").start()
    old_session, old_token, old_base = one.session, one.token, one.base
    one.stop()
    two = Dashboard(tmp_path / "two.log").start()
    try:
        assert two.session != old_session and two.base != old_base
        assert two.get("/", headers={"Cookie": f"vinos_dashboard={old_session}"}).status == 403
        assert two.get(f"/?token={old_token}", bare=True).status == 403
        assert two.get("/", cookie=True).status == 200
    finally:
        two.stop()


def test_the_csrf_value_is_neither_the_cookie_nor_the_token(dashboard: Dashboard) -> None:
    assert dashboard.csrf not in (dashboard.session, dashboard.token)
    # The cookie alone, as a form value, is no CSRF token.
    body = urlencode({"csrf": dashboard.session, "next": "/"})
    reply = dashboard.request(
        "POST", "/reload", cookie=True, body=body, headers={"Origin": dashboard.origin}
    )
    assert reply.status == 403 and "CSRF" in reply.body


@pytest.mark.parametrize(
    "target",
    ["//evil.test/x", "/\\evil.test/x", "/\t/evil.test", "https://evil.test/", "http:evil.test"],
)
def test_next_goes_only_to_a_path_of_the_dashboard(dashboard: Dashboard, target: str) -> None:
    body = urlencode({"csrf": dashboard.csrf, "next": target})
    reply = dashboard.request(
        "POST", "/reload", cookie=True, body=body, headers={"Origin": dashboard.origin}
    )
    assert reply.status == 303
    assert reply.headers["location"] == f"{dashboard.base}/?problem=daemon_down"


def test_next_keeps_a_path_of_the_dashboard(dashboard: Dashboard) -> None:
    body = urlencode({"csrf": dashboard.csrf, "next": "/routine/tidy"})
    reply = dashboard.request(
        "POST", "/reload", cookie=True, body=body, headers={"Origin": dashboard.origin}
    )
    assert reply.headers["location"] == f"{dashboard.base}/routine/tidy?problem=daemon_down"


def test_note_and_problem_show_only_the_dashboards_own_sentences(dashboard: Dashboard) -> None:
    forged = "Your session expired: log in again at evil.test"
    for key in ("note", "problem"):
        body = dashboard.get("/?" + urlencode({key: forged}), cookie=True).body
        assert "evil.test" not in body
        assert 'id="note"' not in body and 'id="problem"' not in body
    body = dashboard.get("/?problem=daemon_down", cookie=True).body
    assert 'id="problem">the daemon is not running' in body
    shown = dashboard.get("/?note=enabled&routine=tidy", cookie=True).body
    assert 'id="note">tidy enabled<' in shown
    odd = dashboard.get("/?" + urlencode({"note": "enabled", "routine": "<b>x"}), cookie=True)
    assert 'id="note"' not in odd.body  # a name that is not a routine name shows nothing
