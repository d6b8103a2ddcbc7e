"""The dashboard with a real daemon, over plain HTTP: what only the daemon knows (a stale
routine), and changes made through it (reload, disable, run now)."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import unquote_plus, urlencode

import pytest

from tests.dashboard.dashkit import Dashboard
from tests.supervisor.daemonkit import DaemonProcess, command_routine, final, state, write_routine

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def post(dash: Dashboard, path: str) -> str:
    body = urlencode({"csrf": dash.csrf, "next": "/"})
    reply = dash.request("POST", path, cookie=True, body=body, headers={"Origin": dash.origin})
    assert reply.status == 303, reply.body
    return unquote_plus(reply.headers["location"]).removeprefix(dash.base)


def test_stale_reload_disable_and_run_through_the_daemon(
    tmp_path: Path, not_root: None, dashboard: Dashboard
) -> None:
    write_routine("tidy", command_routine("echo tidy", schedule='cron = "0 3 * * *"'))
    d = DaemonProcess(tmp_path).start()
    try:
        page = dashboard.get("/", cookie=True).body
        assert "daemon up (pid " in page
        assert "its last good version still runs" not in page

        write_routine("tidy", "[routine]\nkind = 'command'\nbogus = 1\n")
        assert post(dashboard, "/reload") == "/?note=reloaded"
        page = dashboard.get("/", cookie=True).body
        assert '<span class="status st-invalid">invalid</span>' in page
        assert "its last good version still runs" in page
        assert "unknown key" in page  # the file's error, shown under the row

        assert post(dashboard, "/routine/tidy/disable") == "/?note=disabled&routine=tidy"
        assert state("tidy").enabled_override is False
        note = post(dashboard, "/routine/tidy/run")
        assert note.startswith("/?note=queued&routine=tidy&run=")
        run_id = note.rsplit("=", 1)[1]
        deadline = time.monotonic() + 60
        while not final("tidy"):
            assert time.monotonic() < deadline, d.log()
            time.sleep(0.05)
        assert [(r.run_id, r.status) for r in final("tidy")] == [(run_id, "ok")]
        where = post(dashboard, "/routine/nope/run")
        assert where == "/?problem=unknown_routine&routine=nope"
        assert "no routine named nope" in dashboard.get(where, cookie=True).body
    finally:
        d.stop()


def test_fire_from_the_dashboard_with_an_input(
    tmp_path: Path, not_root: None, dashboard: Dashboard
) -> None:
    fired = (
        '[routine]\nkind = "command"\nenabled = true\n[trigger]\nfire = true\n'
        '[command]\nrun = "echo fired"\n'
    )
    write_routine("ping", fired)
    write_routine("plain", command_routine("echo hi", schedule='cron = "0 3 * * *"'))
    d = DaemonProcess(tmp_path).start()
    try:
        page = dashboard.get("/routine/ping", cookie=True).body
        assert 'action="/routine/ping/fire"' in page.replace(dashboard.base, "")
        body = urlencode({"csrf": dashboard.csrf, "next": "/", "input": "from the page"})
        reply = dashboard.request("POST", "/routine/ping/fire", cookie=True, body=body,
                                  headers={"Origin": dashboard.origin})  # fmt: skip
        assert reply.status == 303
        assert unquote_plus(reply.headers["location"]).endswith("note=fired&routine=ping&run=" +
                                                                 final_run_id("ping"))  # fmt: skip
        [run] = final("ping")
        assert (run.trigger, run.status) == ("fire", "ok")
        assert post(dashboard, "/routine/plain/fire") == "/?problem=not_fireable&routine=plain"
        # Without the session cookie (or the CSRF field) nothing is fired.
        reply = dashboard.request("POST", "/routine/ping/fire", cookie=False, body=body,
                                  headers={"Origin": dashboard.origin})  # fmt: skip
        assert reply.status in (401, 403)
        body = urlencode({"next": "/", "input": "x"})
        reply = dashboard.request("POST", "/routine/ping/fire", cookie=True, body=body,
                                  headers={"Origin": dashboard.origin})  # fmt: skip
        assert reply.status == 403
        assert len(final("ping")) == 1
    finally:
        d.stop()


def final_run_id(name: str) -> str:
    deadline = time.monotonic() + 60
    while not final(name):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return final(name)[0].run_id or ""
