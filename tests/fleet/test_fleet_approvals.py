"""Proposed actions on a fleet machine: the run ledger is the fleet's PostgreSQL database, and
so are the proposals: every reader (`pending`, `deny`, `history`, `brief`, the waybar module,
the next run's prompt) reads them there. A real daemon
and real CLI processes; the worker is the stand-in (tests/supervisor/fakeworker.py `propose`), which
proposes and notes the decisions its job carried."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fleet.fleetkit import Machine, fleet_rows, fleet_waiting

ROUTINE = """[routine]
description = "drafts replies"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "ollama"
system = "You draft replies to my mail."

[[agent.actions]]
name = "send-reply"
run = "cat"
"""


@pytest.mark.slow
def test_a_fleet_keeps_its_proposals_and_every_reader_sees_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    told = tmp_path / "told"
    told.mkdir()
    told.chmod(0o777)
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn, worker=("propose", str(told)))
    a.write("drafter", ROUTINE)
    a.start()

    first = a.daemon.request("run", {"name": "drafter"})
    assert first["status"] == "ok", a.daemon.log()
    # The run's row is the fleet's, and so is its proposal.
    assert [(r.run_id, m) for r, m in fleet_rows(pg_dsn, "drafter")] == [(first["run_id"], "a")]
    [p] = fleet_waiting(pg_dsn)
    assert (p.run_id, p.action, p.input, p.summary) == (
        first["run_id"],
        "send-reply",
        "Hi Bob\n",
        "Reply to Bob",
    )
    assert "not kept" not in a.daemon.log()

    pending = a.daemon.cli("pending", "--json")
    assert pending.returncode == 0, pending.stderr
    assert [json.loads(ln)["id"] for ln in pending.stdout.splitlines()] == [p.id]
    waybar = a.daemon.cli("status", "--waybar")
    assert json.loads(waybar.stdout)["class"] == "attention", waybar.stdout
    brief = a.daemon.cli("brief")
    assert f"vinos-routine approve {p.id}" in brief.stdout, brief.stdout + brief.stderr

    denied = a.daemon.cli("deny", str(p.id), "--why", "too curt")
    assert denied.returncode == 0, denied.stderr
    history = a.daemon.cli("history", "drafter", "--json")
    lines = [json.loads(ln) for ln in history.stdout.splitlines()]
    assert [(x["id"], x["state"], x["why"]) for x in lines if x.get("kind") == "proposal"] == [
        (p.id, "denied", "too curt")
    ]
    text = a.daemon.cli("history", "drafter").stdout
    assert f"#{p.id} " in text and "denied: too curt" in text, text

    # The next run is told of the denial, once.
    second = a.daemon.request("run", {"name": "drafter"})
    third = a.daemon.request("run", {"name": "drafter"})
    assert (second["status"], third["status"]) == ("ok", "ok"), a.daemon.log()
    assert json.loads((told / f"{first['run_id']}.json").read_text()) == []
    [decision] = json.loads((told / f"{second['run_id']}.json").read_text())
    assert (decision["id"], decision["state"], decision["why"]) == (p.id, "denied", "too curt")
    assert json.loads((told / f"{third['run_id']}.json").read_text()) == []
    assert len(fleet_waiting(pg_dsn)) == 2  # the second and third runs' proposals
    assert a.daemon.stop() == 0
