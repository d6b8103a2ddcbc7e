"""A run paused for a person on a fleet machine: its row is the fleet's, so every machine
fences its routine ("waiting for you on RUN"), and the machine that holds its request (a
machine's proposals are its own) resumes it once answered. Two real daemons on one real
PostgreSQL cluster, real workers, the fake Ollama server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from routines import proposals
from routines.ledger import Ledger
from tests.fakes import FakeOllama, Recorded, Reply
from tests.fakes import ollama_replies as O
from tests.fleet.fleetkit import Machine, fleet_rows
from tests.supervisor.daemonkit import wait_for
from tests.supervisor.test_daemon_needs_you import propose, routine


@pytest.mark.slow
def test_a_paused_run_fences_its_routine_on_every_machine_and_resumes_where_it_paused(
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
        with Ledger(a.paths.ledger) as led:
            [p] = proposals.waiting(led)
        denied = a.daemon.cli("deny", str(p.id), "--why", "not now")
        assert denied.returncode == 0, denied.stderr
        child = wait_for(
            lambda: [
                (r, m)
                for r, m in fleet_rows(pg_dsn, "drafter")
                if r.parent_run_id == paused["run_id"] and r.status == "ok"
            ],
            what="the resumed run",
        )
        assert a.daemon.stop() == 0 and b.daemon.stop() == 0
    [(row, machine)] = child
    assert (row.trigger, machine) == ("resume", "a")
    assert seen == [{"error": "refused: the person denied it: not now", "ran": False}]
