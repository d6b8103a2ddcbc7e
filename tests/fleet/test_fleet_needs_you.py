"""A run paused for a person on a fleet machine: its row, its request and its conversation are
the fleet's, so every machine fences its routine ("waiting for you on RUN"), any machine
answers it, and whichever machine claims the resume continues it, with the answer in the
model's next request. Real daemons on one real PostgreSQL cluster, real workers, the fake
Ollama server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from routines.conversation import file_name
from routines.ledger import RunRow
from tests.fakes import FakeOllama, Recorded, Reply
from tests.fakes import ollama_replies as O
from tests.fleet.fleetkit import Machine, fleet_rows, fleet_waiting
from tests.supervisor.daemonkit import wait_for
from tests.supervisor.test_daemon_needs_you import propose, routine

pytestmark = pytest.mark.slow


def resumed_from(dsn: str, run_id: str) -> list[tuple[RunRow, str]]:
    return [
        (r, m)
        for r, m in fleet_rows(dsn, "drafter")
        if r.parent_run_id == run_id and r.status == "ok"
    ]


def test_a_paused_run_fences_its_routine_on_every_machine_and_resumes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    seen: list[dict[str, Any]] = []

    def after(req: Recorded) -> Reply:
        seen.append(json.loads(req.body["messages"][-1]["content"]))
        return O.text("# Not sent")

    with FakeOllama([propose(), after]) as ollama:
        env = {"OLLAMA_HOST": ollama.url}
        a, b = (
            Machine(tmp_path, monkeypatch, n, pg_dsn, real_worker=True, extra_env=env)
            for n in ("a", "b")
        )
        for m in (a, b):
            m.write("drafter", routine())
            m.start()
        paused = a.daemon.request("run", {"name": "drafter"})
        assert paused["status"] == "needs_you", a.daemon.log()
        # Machine b runs nothing of it beside the paused run, and says why.
        refused = b.daemon.cli("run", "drafter")
        assert refused.returncode == 1
        assert f"waiting for you on {paused['run_id']}" in refused.stderr, refused.stderr
        [p] = fleet_waiting(pg_dsn)
        denied = a.daemon.cli("deny", str(p.id), "--why", "not now")
        assert denied.returncode == 0, denied.stderr
        child = wait_for(lambda: resumed_from(pg_dsn, paused["run_id"]), what="the resumed run")
        assert a.daemon.stop() == 0 and b.daemon.stop() == 0
    # Both daemons tend the paused run; one resumes it (end_pause is one conditional UPDATE).
    [(row, _machine)] = child
    assert row.trigger == "resume"
    assert seen == [{"error": "refused: the person denied it: not now", "ran": False}]


def test_a_run_paused_on_one_machine_resumes_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    seen: list[dict[str, Any]] = []

    def after(req: Recorded) -> Reply:
        seen.append(json.loads(req.body["messages"][-1]["content"]))
        return O.text("# Sent the reply")

    with FakeOllama([propose(), after]) as ollama:
        env = {"OLLAMA_HOST": ollama.url}
        a, b = (
            Machine(tmp_path, monkeypatch, n, pg_dsn, real_worker=True, extra_env=env)
            for n in ("a", "b")
        )
        for m in (a, b):
            m.write("drafter", routine())
        a.start()
        paused = a.daemon.request("run", {"name": "drafter"})
        assert paused["status"] == "needs_you", a.daemon.log()
        run_id = paused["run_id"]
        assert a.daemon.stop() == 0  # machine a is gone for good
        b.start()
        # b lists a's request, and approves it: the action runs on b.
        [p] = fleet_waiting(pg_dsn)
        assert (p.run_id, p.action, p.input) == (run_id, "send-reply", "Hi Bob\n")
        shown = b.daemon.cli("pending")
        assert f"needs you: run {run_id} is paused" in shown.stdout, shown.stdout + shown.stderr
        on_b = b.paths.routine_state("drafter") / "runs" / file_name(run_id)
        assert not on_b.exists()  # b never ran it: the conversation can only come from the ledger
        approved = b.daemon.cli("approve", str(p.id), "--yes")
        assert approved.returncode == 0, approved.stderr
        child = wait_for(lambda: resumed_from(pg_dsn, run_id), what="the resumed run")
        assert b.daemon.stop() == 0
    [(row, machine)] = child
    assert (row.trigger, machine) == ("resume", "b"), b.daemon.log()
    # The model's next request carries the action's real output where the paused call was.
    assert seen == [{"approved_by": "cli", "ran": True, "exit_status": 0, "output": "Hi Bob\n"}]
    [(paused_row, where)] = [(r, m) for r, m in fleet_rows(pg_dsn, "drafter") if r.run_id == run_id]
    assert (paused_row.status, where) == ("resumed", "a")
