"""Manual runs through a real daemon: events streamed live, refusal while the routine runs,
and what a finished run leaves on disk (the output moved in, last-run.json, the run log).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ipc import Event
from routines.spec.paths import paths
from routines.store import read_json
from supervisor.cli.client import DaemonError
from supervisor.engine.runlog import read_log
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    entered,
    final,
    gated,
    release,
    rows,
    wait_for,
    write_routine,
)
from tests.supervisor.gates import gate_home

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def test_a_manual_run_streams_its_events_and_lands_its_output(
    tmp_path: Path, not_root: None
) -> None:
    write_routine(
        "hello",
        command_routine("echo '## greeting'; echo hello from the sandbox", enabled=False),
    )
    d = DaemonProcess(tmp_path).start()
    events: list[Event] = []
    with d.client() as c:
        fin = c.request("run", {"name": "hello"}, on_event=events.append)
    kinds = [(e.kind, e.text) for e in events]
    assert kinds[0] == ("status", "queued")
    assert kinds[1] == ("status", "running")
    assert ("tool_call", "shell:echo '## greeting'; echo hello from the sandbox") in kinds
    assert any(k == "tool_result" and t.startswith("command: exit 0") for k, t in kinds)
    assert kinds[-1][0] == "status" and kinds[-1][1].startswith("ok")
    assert {e.run_id for e in events} == {fin["run_id"]}
    assert (fin["status"], fin["routine"], fin["disabled"]) == ("ok", "hello", False)

    # The output was moved into the state dir; the scratch dir is gone; last-run.json and
    # the run log say the same.
    state = paths().routine_state("hello")
    output = Path(fin["output"])
    assert output.parent == state and output.suffix == ".md"
    assert "hello from the sandbox" in output.read_text()
    assert list((state / ".scratch").iterdir()) == []
    assert sorted(p.name for p in state.iterdir() if p.name.startswith(".")) == [".scratch"]
    last = read_json(paths().last_run("hello"))
    assert (last["run_id"], last["status"], last["output_file"], last["trigger"]) == (
        fin["run_id"],
        "ok",
        str(output),
        "manual",
    )
    log = list(read_log(paths().run_log("hello", fin["run_id"])))
    assert log[0]["kind"] == "start" and log[-1]["kind"] == "end"
    assert log[-1]["data"]["status"] == "ok"
    [row] = rows("hello")
    assert (row.run_id, row.trigger, row.status, row.output_file) == (
        fin["run_id"],
        "manual",
        "ok",
        str(output),
    )

    # The CLI streams the same through the daemon.
    out = d.cli("run", "hello")
    assert out.returncode == 0, out.stderr
    assert "shell:echo '## greeting'" in out.stdout and "output: " in out.stdout
    assert "no daemon running" not in out.stderr
    assert [r.trigger for r in rows("hello")] == ["manual", "manual"]
    assert d.stop() == 0


def test_a_manual_run_is_refused_while_the_routine_runs(tmp_path: Path, not_root: None) -> None:
    # Hourly: a minutely routine's slot that came on its own while the run was held was a
    # second `skipped` row (under load, a failure so).
    hourly = 'cron = "0 * * * *"'
    write_routine("busy", command_routine(gated("busy"), schedule=hourly, extra=gate_home("busy")))
    d = DaemonProcess(tmp_path).start()
    first = d.request("run", {"name": "busy", "detach": True})
    wait_for(lambda: entered("busy") == 1, what="the run to start")
    with pytest.raises(DaemonError) as refused:
        d.request("run", {"name": "busy"})
    assert refused.value.code == "busy"
    why = f"busy is already running ({first['run_id']}): previous run still going"
    assert str(refused.value) == why
    out = d.cli("run", "busy")
    assert out.returncode == 1
    assert "previous run still going" in out.stderr
    # A slot due meanwhile is skipped, like any overlap.
    d.to_slot(every=3600)
    wait_for(lambda: len(final("busy")) == 1, what="the skipped slot")
    release("busy")
    wait_for(lambda: len(final("busy")) == 2, what="the manual run to end")
    assert [(r.trigger, r.status) for r in rows("busy")] == [
        ("manual", "ok"),
        ("schedule", "skipped"),
    ]
    assert entered("busy") == 1  # the refused runs never started
    # An unknown name is refused with the closest names.
    with pytest.raises(DaemonError) as unknown:
        d.request("run", {"name": "bussy"})
    assert unknown.value.code == "unknown_routine" and "did you mean busy?" in str(unknown.value)
    assert d.stop() == 0
