"""Another local user against the dashboard, as the chains were run: a real second user
(vinos-test2, tests/helpers/squatter.py) listens first on the dashboard's port, or on another
port of 127.0.0.1 that a model-written link points to. Nothing that proves who we are (the
launch token, the session cookie, a browser sent to `?token=`) may reach it.

The opener: the command opens the browser with `xdg-open`; there is no desktop here, so a
real `xdg-open` script first on PATH records what it was given (the one stand-in, for the
desktop's URL handler)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dashboard.listener import Holder, Listener, decide, parse_table, who_holds
from routines.ledger import Ledger
from routines.runs import Outcome, RunEnd, RunStatus, Trigger
from routines.spec.paths import paths
from tests.dashboard.dashkit import REPO, Dashboard
from tests.dashboard.squatkit import HEADER, SecondUser, Squat, row

XDG_OPEN = """#!/bin/sh
printf '%s\\n' "$@" >> "$(dirname "$0")/opened"
"""


@pytest.fixture
def opener(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "xdg-open"
    script.write_text(XDG_OPEN)
    script.chmod(0o755)
    return bin_dir


def dashboard_command(port: int, bin_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "dashboard", "--port", str(port), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def opened(bin_dir: Path) -> list[str]:
    log = bin_dir / "opened"
    return log.read_text().splitlines() if log.exists() else []


def test_the_listeners_of_another_user_are_read_from_the_kernel(squat: Squat) -> None:
    verdict = who_holds(squat.port, paths().runtime_dir)
    assert verdict.holder is Holder.FOREIGN
    assert verdict.uids == (squat.uid,)


@pytest.mark.parametrize("no_open", [True, False])
def test_a_squatter_on_the_port_gets_nothing_and_is_named(
    squat: Squat, opener: Path, no_open: bool
) -> None:
    # The chain: the second user listens on the port first; `dashboard` used to call it
    # "already running" after sending it the token as a cookie, and open the browser there.
    done = dashboard_command(squat.port, opener, *(["--no-open"] if no_open else []))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "already running" not in done.stdout
    assert f"another program (uid {squat.uid}, user vinos-test2)" in done.stderr
    assert "nothing was sent to it" in done.stderr and "--port" in done.stderr
    assert squat.received() == []  # not a byte: no probe, no cookie, no token
    assert opened(opener) == []  # no browser sent there


def test_a_dual_stack_squatter_is_found_in_tcp6(second_user: SecondUser, opener: Path) -> None:
    squat = second_user.listen(address="::")
    try:
        done = dashboard_command(squat.port, opener)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"uid {squat.uid}" in done.stderr
        assert squat.received() == []
        assert opened(opener) == []
    finally:
        squat.close()


def test_our_own_dashboard_is_recognised_and_opened(tmp_path: Path, opener: Path) -> None:
    dash = Dashboard(tmp_path / "dashboard.log").start()
    try:
        assert who_holds(dash.port, paths().runtime_dir).holder is Holder.OURS
        done = dashboard_command(dash.port, opener)
        assert done.returncode == 0, done.stderr
        assert "already running" in done.stdout
        (page,) = opened(opener)
        html = Path(page.removeprefix("file://")).read_text()
        assert f"?token={dash.token}" in html
        assert dash.exchange(dash.token) == dash.session
    finally:
        dash.stop()


@pytest.mark.slow
def test_a_socket_activated_dashboard_is_woken_then_proven_ours(
    tmp_path: Path, opener: Path
) -> None:
    # systemd holds the socket (our uid) and starts the dashboard on the first connection:
    # the command wakes it with a connection that sends nothing, then proves it ours.
    import shutil
    import socket

    activate = shutil.which("systemd-socket-activate")
    if activate is None:
        pytest.fail("systemd-socket-activate is missing: install systemd (scripts/system-deps.sh)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    passed = ["VINOS_HOME", "VINOS_SYSTEM_DIR", "XDG_RUNTIME_DIR", "PYTHONPATH"]
    log = open(tmp_path / "activate.log", "wb")  # noqa: SIM115 - the child holds it
    unit = subprocess.Popen(
        [
            activate,
            "-l",
            f"127.0.0.1:{port}",
            *(f"--setenv={v}" for v in passed),
            sys.executable,
            "-m",
            "supervisor",
            "dashboard",
            "--no-open",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    log.close()
    try:
        deadline = time.monotonic() + 30
        while who_holds(port, paths().runtime_dir).holder is Holder.NOBODY:
            assert time.monotonic() < deadline, (tmp_path / "activate.log").read_text()
            time.sleep(0.05)
        assert who_holds(port, paths().runtime_dir).holder is Holder.MINE_NOT_DASHBOARD
        done = dashboard_command(port, opener)
        assert done.returncode == 0, done.stderr + (tmp_path / "activate.log").read_text()
        assert "already running" in done.stdout
        assert who_holds(port, paths().runtime_dir).holder is Holder.OURS
        (page,) = opened(opener)
        assert "?token=" in Path(page.removeprefix("file://")).read_text()
    finally:
        unit.terminate()
        unit.wait(20)


@pytest.mark.slow  # a real Chromium
def test_the_cookie_never_goes_to_a_squatters_port_from_a_model_written_link(
    tmp_path: Path, squat: Squat
) -> None:
    from playwright.sync_api import expect

    from tests.dashboard.browser import browser

    p = squat.port
    text = (
        f"# Report\n\nDetails [here](http://127.0.0.1:{p}/a), [there](//127.0.0.1:{p}/b), "
        f"<http://localhost:{p}/c> and [ok](https://example.invalid/)\n"
    )
    _seed_output("report", "r-squat-1", text)
    dash = Dashboard(tmp_path / "dashboard.log").start()
    try:
        with browser(tmp_path / "profile") as ctx:
            page = ctx.new_page()
            page.goto(f"{dash.origin}/?token={dash.token}")
            page.goto(f"{dash.url}/run/r-squat-1")
            output = page.locator(".output").first
            expect(output.get_by_role("heading", name="Report")).to_be_visible()
            links = page.locator(f'a[href*=":{squat.port}"]')
            if links.count():  # the chain as it was run: the person clicks the link
                links.first.click()
                page.wait_for_load_state()
                sent = "".join(squat.received())
                assert "vinos_dashboard=" not in sent, f"the cookie went to the squatter: {sent}"
            # The links are text: nothing on the page leads to the squatter's port.
            assert links.count() == 0
            expect(output).to_contain_text(f"[here](http://127.0.0.1:{squat.port}/a)")
            page.get_by_text("[here]", exact=False).click()
            page.get_by_text("[there]", exact=False).click()
            assert page.url == f"{dash.url}/run/r-squat-1"
            expect(output.locator('a[href="https://example.invalid/"]')).to_have_text("ok")
    finally:
        dash.stop()
    assert squat.received() == []


@pytest.mark.slow  # a real Chromium
def test_a_page_the_browser_loads_from_a_squatters_port_gets_no_cookie(
    tmp_path: Path, squat: Squat
) -> None:
    # The other chain: the person, logged in, opens a page of 127.0.0.1:OTHER in the same
    # browser (a link in a mail, a bookmark). Cookies are per host, not per port.
    from tests.dashboard.browser import browser

    dash = Dashboard(tmp_path / "dashboard.log").start()
    try:
        with browser(tmp_path / "profile") as ctx:
            page = ctx.new_page()
            page.goto(f"{dash.origin}/?token={dash.token}")
            assert page.url == f"{dash.url}/"
            assert [c["name"] for c in ctx.cookies(dash.url + "/")] == ["vinos_dashboard"]
            for path in ("/", "/api/pulse", "/s/", "/run/x"):
                page.goto(f"http://127.0.0.1:{squat.port}{path}")
                assert "squatter" in page.content()
    finally:
        dash.stop()
    sent = squat.received()
    assert sent, "the browser never reached the squatter"
    assert not [r for r in sent if "vinos_dashboard" in r], sent


def _seed_output(routine: str, run_id: str, text: str) -> None:
    now = datetime.now(UTC)
    state = paths().routine_state(routine)
    state.mkdir(parents=True, exist_ok=True)
    (state / "out.md").write_text(text)
    with Ledger(paths().ledger) as ledger:
        ledger.record_run(
            routine, run_id=run_id, trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=now
        )
        end = RunEnd(status=RunStatus.OK, outcome=Outcome.DONE, output_file="out.md")
        ledger.finish_run(run_id, now=now, end=end)


# The pure parts, on the kernel's table text (no /proc read).
TCP = "\n".join(
    [
        HEADER,
        row(0, "127.0.0.1", 8742, "0A", 1002, 4242),
        row(1, "127.0.0.1", 8742, "01", 1001, 777),  # a connection, not a listener
        row(2, "0.0.0.0", 22, "0A", 0, 55),
    ]
)
TCP6 = "\n".join(
    [HEADER, row(0, "::", 8743, "0A", 1002, 4343), row(1, "::1", 8744, "0A", 1002, 4444)]
)


def test_parse_table_reads_listeners_only() -> None:
    v4 = parse_table(TCP)
    assert [(str(s.address), s.port, s.uid, s.inode) for s in v4] == [
        ("127.0.0.1", 8742, 1002, 4242),
        ("0.0.0.0", 22, 0, 55),
    ]
    v6 = parse_table(TCP6)
    assert [(str(s.address), s.port) for s in v6] == [("::", 8743), ("::1", 8744)]


def test_decide_names_the_holder() -> None:
    table = parse_table(TCP) + parse_table(TCP6)
    foreign = decide(table, 8742, 1001, frozenset())
    assert foreign.holder is Holder.FOREIGN and foreign.uids == (1002,)
    assert decide(table, 8743, 1001, frozenset()).holder is Holder.FOREIGN  # [::] takes v4
    assert decide(table, 8744, 1001, frozenset()).holder is Holder.NOBODY  # ::1 is not 127.0.0.1
    assert decide(table, 9999, 1001, frozenset()).holder is Holder.NOBODY
    assert decide(table, 8742, 1002, frozenset({4242})).holder is Holder.OURS
    assert decide(table, 8742, 1002, frozenset({1})).holder is Holder.MINE_NOT_DASHBOARD


def test_a_foreign_listener_beside_ours_still_makes_the_port_foreign() -> None:
    import ipaddress

    ours = Listener(ipaddress.IPv4Address("127.0.0.1"), 80, 1001, 1)
    theirs = Listener(ipaddress.IPv6Address("::ffff:127.0.0.1"), 80, 1002, 2)
    verdict = decide([ours, theirs], 80, 1001, frozenset({1}))
    assert verdict.holder is Holder.FOREIGN and verdict.uids == (1002,)


def test_the_refusal_names_the_holder_and_the_way_out() -> None:
    from dashboard.listener import Verdict
    from dashboard.server import refusal

    text = refusal(8742, Verdict(Holder.FOREIGN, (0,)))
    assert "another program (uid 0, user root) listens on 127.0.0.1:8742" in text
    assert "nothing was sent to it" in text and "--port" in text and "ss -ltnp" in text
    mine = refusal(8742, Verdict(Holder.MINE_NOT_DASHBOARD))
    assert "a program of yours listens on 127.0.0.1:8742" in mine and "--port" in mine


def test_the_state_file_goes_when_the_dashboard_stops(tmp_path: Path) -> None:
    from dashboard.listener import STATE_FILE

    dash = Dashboard(tmp_path / "dashboard.log").start()
    state = paths().runtime_dir / STATE_FILE
    assert state.exists() and stat_mode(state) == 0o600
    dash.stop()
    assert not state.exists()


def stat_mode(path: Path) -> int:
    import stat

    return stat.S_IMODE(path.stat().st_mode)
