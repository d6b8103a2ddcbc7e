"""A paused run answered from the dashboard, in the person's session: the proposal's page
shows its whole input, escaped; Approve names the input it showed (another is not run), and
the run goes on with the action's real output; Deny reaches the model with its reason. A
real daemon, real workers, real bwrap and the fake Ollama server on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus, urlencode

import pytest

from routines import proposals
from tests.dashboard.dashkit import Dashboard
from tests.fakes import FakeOllama, Recorded, Reply
from tests.fakes import ollama_replies as O
from tests.supervisor.daemonkit import DaemonProcess, wait_for, write_routine
from tests.supervisor.test_daemon_needs_you import (
    child_of,
    last_tool_message,
    propose,
    routine,
    waiting_one,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

# Eight lines, the last past the overview's six; a bidi override that must show escaped.
TEXT = "".join(f"line {n}\n" for n in range(1, 8)) + "end \u202egnp.exe\n"


def decide(dash: Dashboard, pid: int, decision: str, **form: str) -> str:
    body = urlencode({"csrf": dash.csrf, **form})
    reply = dash.request(
        "POST",
        f"/proposal/{pid}/{decision}",
        cookie=True,
        body=body,
        headers={"Origin": dash.origin},
    )
    assert reply.status == 303, reply.body
    return unquote_plus(reply.headers["location"]).removeprefix(dash.base)


def test_approve_from_the_dashboard_runs_the_input_shown_and_the_run_goes_on(
    tmp_path: Path, not_root: None, dashboard: Dashboard
) -> None:
    seen: list[dict[str, Any]] = []

    def after_approval(req: Recorded) -> Reply:
        seen.append(last_tool_message(req))
        return O.text("# Sent")

    with FakeOllama([propose(text=TEXT), after_approval]) as ollama:
        write_routine("drafter", routine())
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        try:
            paused = d.request("run", {"name": "drafter"})["run_id"]
            p = waiting_one()
            overview = dashboard.get("/", cookie=True).body
            assert f'href="{dashboard.base}/proposal/{p.id}"' in overview
            assert "line 7" not in overview  # the overview shows the first lines only
            page = dashboard.get(f"/proposal/{p.id}", cookie=True).body
            assert "line 7" in page and "\u202e" not in page and "end \\u202egnp.exe" in page, page
            assert "Needs you: its run is paused" in page
            shown = proposals.fingerprint(p.input)
            assert f'name="shown" value="{shown}"' in page

            # No CSRF value: refused before the daemon hears of it.
            no_csrf = dashboard.request(
                "POST",
                f"/proposal/{p.id}/approve",
                cookie=True,
                body=urlencode({"shown": shown}),
                headers={"Origin": dashboard.origin},
            )
            assert no_csrf.status == 403
            # Another input than the one shown: nothing runs, the proposal still waits.
            other = proposals.fingerprint("rm -rf ~\n")
            assert decide(dashboard, p.id, "approve", shown=other) == (
                f"/proposal/{p.id}?problem=changed"
            )
            assert waiting_one().state == proposals.ProposalState.WAITING

            where = decide(dashboard, p.id, "approve", shown=shown)
            assert where == "/?note=approved&routine=drafter"
            child = wait_for(lambda: child_of(paused), what="the resumed run")
            # Decided once: a second Approve is refused, and the page is gone.
            assert decide(dashboard, p.id, "approve", shown=shown).endswith("problem=not_waiting")
            assert dashboard.get(f"/proposal/{p.id}", cookie=True).status == 404
        finally:
            d.stop()
    assert child.status == "ok", d.log()
    assert seen == [{"approved_by": "dashboard", "ran": True, "exit_status": 0, "output": TEXT}]


def test_deny_from_the_dashboard_reaches_the_model_with_its_reason(
    tmp_path: Path, not_root: None, dashboard: Dashboard
) -> None:
    seen: list[dict[str, Any]] = []

    def after_denial(req: Recorded) -> Reply:
        seen.append(last_tool_message(req))
        return O.text("# Not sent")

    with FakeOllama([propose(), after_denial]) as ollama:
        write_routine("drafter", routine())
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        try:
            paused = d.request("run", {"name": "drafter"})["run_id"]
            p = waiting_one()
            where = decide(dashboard, p.id, "deny", why="wrong tone")
            assert where == "/?note=denied&routine=drafter"
            child = wait_for(lambda: child_of(paused), what="the resumed run")
        finally:
            d.stop()
    assert child.status == "ok", d.log()
    assert seen == [{"error": "refused: the person denied it: wrong tone", "ran": False}]
