"""The dashboard's gate, over plain HTTP to the real process: token, cookie, Host, CSRF,
Origin, headers; and that it never writes the ledger."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest

from dashboard.security import CSP
from routines.ledger import Ledger, LedgerUnavailable
from routines.runs import Outcome, RunEnd, RunStatus, Trigger
from routines.spec.paths import paths
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
    reply = dashboard.get(f"/cost?token={dashboard.token}", bare=True)
    assert reply.status == 303
    # The token is gone from the address bar; the page is below the session's base path.
    assert reply.headers["location"] == f"{dashboard.base}/cost"
    assert dashboard.base.startswith("/s/") and len(dashboard.base) > 20
    (cookie,) = reply.cookies
    parts = [p.strip() for p in cookie.split(";")]
    assert parts[0] == f"vinos_dashboard={dashboard.session}"  # not the token
    assert "HttpOnly" in parts
    assert "SameSite=Strict" in parts
    assert f"Path={dashboard.base}" in parts  # not "/": no other port's page gets it


def test_the_cookie_opens_nothing_outside_the_base_path(dashboard: Dashboard) -> None:
    assert dashboard.get("/", cookie=True).status == 200
    for path in ("/", "/cost", "/static/style.css", "/s/guess/"):
        assert dashboard.get(path, cookie=True, bare=True).status == 403, path


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
    reply = dashboard.request(
        "POST", "/reload", cookie=True, body="next=/", headers={"Origin": dashboard.origin}
    )
    assert reply.status == 403
    assert "CSRF" in reply.body


def test_post_without_origin_or_fetch_site_is_refused_even_with_cookie_and_csrf(
    dashboard: Dashboard,
) -> None:
    # What a squatter holding the cookie did with a script (no browser sends no Origin).
    body = urlencode({"csrf": dashboard.csrf, "next": "/"})
    reply = dashboard.request("POST", "/reload", cookie=True, body=body)
    assert reply.status == 403
    assert "Origin" in reply.body
    reply = dashboard.request(
        "POST", "/reload", cookie=True, body=body, headers={"Sec-Fetch-Site": "same-origin"}
    )
    assert reply.status == 303


def test_cross_origin_post_is_refused_even_with_the_csrf_token(dashboard: Dashboard) -> None:
    body = urlencode({"csrf": dashboard.csrf, "next": "/"})
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
    body = urlencode({"csrf": dashboard.csrf, "next": "/"})
    reply = dashboard.request(
        "POST", "/reload", cookie=True, body=body, headers={"Origin": dashboard.origin}
    )
    assert reply.status == 303
    assert reply.headers["location"] == f"{dashboard.base}/?problem=daemon_down"
    assert not paths().ledger.exists()  # the dashboard created no ledger


def test_read_only_ledger_refuses_writes(tmp_path: object) -> None:
    with Ledger(paths().ledger) as ledger:
        ledger.record_run(
            "a", run_id="r1", trigger=Trigger.MANUAL, status=RunStatus.OK, now=datetime.now(UTC)
        )
    before = paths().ledger.read_bytes()
    with Ledger.read_only(paths().ledger) as ro:
        assert [r.run_id for r in ro.history()] == ["r1"]
        with pytest.raises(LedgerUnavailable, match="readonly"):
            ro.record_run(
                "a", run_id="r2", trigger=Trigger.MANUAL, status=RunStatus.OK, now=datetime.now(UTC)
            )
    with Ledger(paths().ledger) as ledger:
        assert [r.run_id for r in ledger.history()] == ["r1"]
    assert paths().ledger.read_bytes() == before


def _seed_agent_run(run_id: str, log: bytes | None) -> None:
    now = datetime.now(UTC)
    with Ledger(paths().ledger) as ledger:
        ledger.record_run(
            "brief", run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=now
        )
        ledger.finish_run(
            run_id,
            now=now,
            end=RunEnd(
                status=RunStatus.OK,
                outcome=Outcome.NEEDS_ATTENTION,
                route="local->premium",
                model="claude-sonnet-4-6",
                escalated=True,
                escalated_reason="low confidence: the model hedged",
                input_tokens=1234,
                output_tokens=567,
                local_input_tokens=2000,
                local_output_tokens=100,
                dollars=0.0042,
                tool_calls=2,
            ),
        )
    runs = paths().routine_state("brief") / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    if log is not None:
        (runs / f"{run_id}.jsonl").write_bytes(log)


def test_run_page_shows_refused_calls_escalation_tokens_and_cost(dashboard: Dashboard) -> None:
    log = b"\n".join(
        orjson.dumps(e)
        for e in [
            {"ts": "2026-12-03T06:00:00.100+00:00", "kind": "start", "text": "scheduled run"},
            {"ts": "2026-12-03T06:00:01.000+00:00", "kind": "tool_call", "text": "shell:gh api"},
            {
                "ts": "2026-12-03T06:00:02.000+00:00",
                "kind": "tool_refused",
                "text": "refused tool call: shell:cat /etc/shadow <b>",
            },
            {"ts": "2026-12-03T06:00:03.000+00:00", "kind": "escalated", "text": "to premium"},
        ]
    )
    _seed_agent_run("r-agent-1", log + b"\n{torn")
    body = dashboard.get("/run/r-agent-1", cookie=True).body
    assert '<tr class="k-tool_refused refused">' in body
    assert (
        '<li class="refused"><strong>refused</strong> <code>refused tool call: shell:cat ' in body
    )
    assert "/etc/shadow &lt;b&gt;" in body and "<b>" not in body
    assert "low confidence: the model hedged" in body
    assert "1.2k in · 567 out" in body and "2k in · 100 out" in body
    assert "$0.0042" in body
    assert "1 refused" in body


def test_run_log_behind_a_symlink_is_not_followed(dashboard: Dashboard, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text('{"kind": "log", "text": "TOP-SECRET"}\n')
    _seed_agent_run("r-agent-2", None)
    (paths().routine_state("brief") / "runs" / "r-agent-2.jsonl").symlink_to(secret)
    body = dashboard.get("/run/r-agent-2", cookie=True).body
    assert "TOP-SECRET" not in body
    assert "No log for this run" in body


def test_waiting_proposals_are_listed_escaped_with_the_commands_that_decide(
    dashboard: Dashboard,
) -> None:
    from routines import proposals

    now = datetime.now(UTC)
    with Ledger(paths().ledger) as ledger:
        args: dict[str, Any] = {
            "routine": "inbox",
            "run_id": "r1",
            "action": "send-reply",
            "command": "msmtp -t",
            "summary": "Reply to <b>Bob</b>",
            "fingerprint": "not the file's",
            "now": now,
        }
        pid = proposals.add(
            ledger, input="To: bob\n\n<script>x()</script>\n", **args, expires_after=600
        )
        proposals.add(ledger, input="old", **args, expires_after=-1)  # expired: not listed
    body = dashboard.get("/", cookie=True).body
    assert 'id="proposals-empty"' not in body
    assert body.count('class="proposal"') == 1
    assert f"<code>vinos-routine approve {pid}</code>" in body
    assert f"<code>vinos-routine deny {pid} --why" in body
    assert "Reply to &lt;b&gt;Bob&lt;/b&gt;" in body and "<b>Bob" not in body
    assert "&lt;script&gt;x()&lt;/script&gt;" in body and "<script>x()" not in body
    assert "<code>msmtp -t</code>" in body
    assert "approving it will be refused (invalidated)" in body  # no routine file matches


def test_a_paused_runs_request_says_the_run_needs_you(dashboard: Dashboard) -> None:
    from routines import proposals

    now = datetime.now(UTC)
    with Ledger(paths().ledger) as ledger:
        ledger.record_run(
            "inbox", run_id="r-paused", trigger=Trigger.MANUAL, status=RunStatus.NEEDS_YOU, now=now
        )
        for run_id in ("r-paused", "r-done"):
            proposals.add(
                ledger,
                routine="inbox",
                run_id=run_id,
                action="send-reply",
                command="cat",
                input="hi\n",
                summary=run_id,
                fingerprint="x",
                now=now,
                expires_after=600,
            )
    body = dashboard.get("/", cookie=True).body
    assert body.count("Needs you: its run is paused until you answer") == 1
    paused = body.index("<p>r-paused</p>")
    assert body.index("Needs you: its run is paused") > paused


def test_a_write_request_shows_its_path_size_and_escaped_content(dashboard: Dashboard) -> None:
    """A run paused at write_file: the page names the file and the size it writes, and the
    content as the terminal shows it, never as a command run with input on stdin."""
    from routines import proposals

    content = "# Notes\n<img src=x onerror=alert(1)>\u202e\n"
    with Ledger(paths().ledger) as ledger:
        proposals.add(
            ledger,
            routine="inbox",
            run_id="r1",
            action=proposals.WRITE_ACTION,
            command="/home/me/notes/<today>.md",
            input=content,
            summary="write_file /home/me/notes/<today>.md",
            fingerprint="x",
            now=datetime.now(UTC),
            expires_after=600,
        )
    body = dashboard.get("/", cookie=True).body
    size = len(content.encode())
    assert (
        f"writes the file <code>/home/me/notes/&lt;today&gt;.md</code>, {size:,} bytes, "
        "with this content:"
    ) in body
    assert "on stdin" not in body
    assert "&lt;img src=x onerror=alert(1)&gt;\\u202e" in body and "\u202e" not in body
    assert "<img src=x" not in body


def test_a_waiting_proposal_cannot_reorder_or_hide_its_text(dashboard: Dashboard) -> None:
    from routines import proposals

    with Ledger(paths().ledger) as ledger:
        proposals.add(
            ledger,
            routine="inbox",
            run_id="r1",
            action="send-reply",
            command="msmtp -t \u202etset.live@ythgin",
            input="To: bob@example.org\u200b\nBcc: spy\U000e0041\n",
            summary="Reply\u2066 to Bob",
            fingerprint="x",
            now=datetime.now(UTC),
            expires_after=600,
        )
    body = dashboard.get("/", cookie=True).body
    for ch in ("\u202e", "\u200b", "\U000e0041", "\u2066"):
        assert ch not in body, f"U+{ord(ch):04X}"
    assert "msmtp -t \\u202etset.live@ythgin" in body
    assert "To: bob@example.org\\u200b" in body
