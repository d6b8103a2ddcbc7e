"""The dashboard's gate, over plain HTTP to the real process: token, cookie, Host, CSRF,
Origin, headers; and that it never writes the ledger."""

from __future__ import annotations

import os
import sqlite3
import stat
from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest

from dashboard.security import CSP, csrf_token
from routines.ledger import Ledger
from routines.paths import paths
from tests.dashboard.dashkit import Dashboard


def test_no_token_is_403(dashboard: Dashboard) -> None:
    for path in ("/", "/cost", "/static/style.css", "/api/pulse", "/run/x"):
        reply = dashboard.get(path)
        assert reply.status == 403, path
        assert "no token" in reply.body


def test_wrong_token_is_403(dashboard: Dashboard) -> None:
    reply = dashboard.get("/?token=" + "A" * 43)
    assert reply.status == 403
    assert not reply.cookies


def test_token_becomes_a_strict_httponly_cookie_and_leaves_the_url(dashboard: Dashboard) -> None:
    reply = dashboard.get(f"/cost?token={dashboard.token}")
    assert reply.status == 303
    assert reply.headers["location"] == "/cost"  # the token is gone from the address bar
    (cookie,) = reply.cookies
    parts = [p.strip() for p in cookie.split(";")]
    assert parts[0] == f"vinos_dashboard={dashboard.token}"
    assert "HttpOnly" in parts
    assert "SameSite=Strict" in parts


@pytest.mark.parametrize(
    "host", ["evil.test:{port}", "127.0.0.1", "127.0.0.1:1", "localhost", "[::1]:{port}"]
)
def test_wrong_host_is_403_even_with_the_token(dashboard: Dashboard, host: str) -> None:
    reply = dashboard.get("/", host=host.format(port=dashboard.port), cookie=True)
    assert reply.status == 403
    assert "is not this dashboard" in reply.body


def test_localhost_with_the_port_is_served(dashboard: Dashboard) -> None:
    assert dashboard.get("/", host=f"localhost:{dashboard.port}", cookie=True).status == 200


def test_every_response_has_the_strict_csp(dashboard: Dashboard) -> None:
    for reply in (dashboard.get("/"), dashboard.get("/", cookie=True)):
        assert reply.headers["content-security-policy"] == CSP
        assert "unsafe-inline" not in CSP
        assert reply.headers["x-frame-options"] == "DENY"


def test_token_file_is_private(dashboard: Dashboard) -> None:
    path = paths().runtime_dir / "dashboard.token"
    st = path.lstat()
    assert stat.S_ISREG(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.getuid()
    opener = paths().runtime_dir / "dashboard-open.html"
    assert stat.S_IMODE(opener.lstat().st_mode) == 0o600


def test_post_without_csrf_token_is_refused(dashboard: Dashboard) -> None:
    reply = dashboard.request("POST", "/reload", cookie=True, body="next=/")
    assert reply.status == 403
    assert "CSRF" in reply.body


def test_cross_origin_post_is_refused_even_with_the_csrf_token(dashboard: Dashboard) -> None:
    body = urlencode({"csrf": csrf_token(dashboard.token), "next": "/"})
    # Another port on localhost is the same *site*: the cookie goes along, the Origin differs.
    for origin in ("http://127.0.0.1:1", "http://evil.test", "null"):
        reply = dashboard.request(
            "POST", "/reload", cookie=True, body=body, headers={"Origin": origin}
        )
        assert reply.status == 403, origin
        assert "cross-origin" in reply.body
    reply = dashboard.request(
        "POST", "/reload", cookie=True, body=body, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert reply.status == 403


def test_same_origin_post_reaches_the_daemon(dashboard: Dashboard) -> None:
    # No daemon runs here: the change is sent and its refusal shown, never done by the page.
    body = urlencode({"csrf": csrf_token(dashboard.token), "next": "/"})
    reply = dashboard.request(
        "POST", "/reload", cookie=True, body=body, headers={"Origin": dashboard.origin}
    )
    assert reply.status == 303
    assert reply.headers["location"].startswith("/?problem=the+daemon+is+not+running")
    assert not paths().ledger.exists()  # the dashboard created no ledger


def test_read_only_ledger_refuses_writes(tmp_path: object) -> None:
    with Ledger(paths().ledger) as ledger:
        ledger.record_run("a", run_id="r1", trigger="manual", status="ok", now=datetime.now(UTC))
    before = paths().ledger.read_bytes()
    with Ledger.read_only(paths().ledger) as ro:
        assert [r.run_id for r in ro.history()] == ["r1"]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            ro.record_run("a", run_id="r2", trigger="manual", status="ok", now=datetime.now(UTC))
    with Ledger(paths().ledger) as ledger:
        assert [r.run_id for r in ledger.history()] == ["r1"]
    assert paths().ledger.read_bytes() == before
