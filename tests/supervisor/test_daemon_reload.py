"""Reload with a real daemon: routine files by an mtime scan each tick, config.toml on SIGHUP and on
`vinos-routine reload`; an invalid edit of a loaded routine keeps the last good version running and
is shown in `list`.
"""

from __future__ import annotations

import json
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ipc import Job, decode
from routines.ledger import Ledger
from routines.runs import RunEnd, RunStatus, Trigger
from routines.spec.paths import paths
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    final,
    rows,
    wait_for,
    write_routine,
)

FAKEWORKER = Path(__file__).with_name("fakeworker.py")

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def test_a_new_file_is_picked_up_by_the_mtime_scan(tmp_path: Path, not_root: None) -> None:
    d = DaemonProcess(tmp_path).start()
    assert d.request("status")["routines"] == 0
    write_routine("late", command_routine("echo late"))  # no signal, no request
    wait_for(lambda: d.request("status")["enabled"] == 1, what="the scan to find it")
    d.to_slot()
    [row] = wait_for(lambda: final("late"), what="its run")
    assert (row.status, row.detail) == ("ok", "late")
    # An edit in place (same inode, the directory unchanged) is seen too.
    with open(paths().routines_dir / "late.toml", "a") as f:
        f.write("oops = 1\n")
    wait_for(lambda: d.request("status")["invalid"] == ["late"], what="the edit in place")
    (paths().routines_dir / "late.toml").unlink()
    wait_for(lambda: d.request("status")["routines"] == 0, what="the scan to drop it")
    assert d.stop() == 0


def test_an_invalid_edit_keeps_the_last_good_version_running(
    tmp_path: Path, not_root: None
) -> None:
    write_routine("keeper", command_routine("echo v1"))
    d = DaemonProcess(tmp_path).start()
    d.to_slot()
    wait_for(lambda: len(final("keeper")) == 1, what="the first run")

    # A typo in a key: the file is invalid from now on.
    write_routine("keeper", command_routine("echo v2", extra="timeuot_sec = 3\n"))
    wait_for(lambda: d.request("status")["invalid"] == ["keeper"], what="the bad edit")
    assert d.request("status")["enabled"] == 1  # the daemon still runs the last good one
    assert d.request("status")["stale"] == ["keeper"]
    # `list` shows the file as invalid, with its error, and that its last good version runs.
    listed = {r["name"]: r for r in json.loads(d.cli("list", "--json").stdout)}["keeper"]
    assert listed["valid"] is False
    assert listed["last_good_running"] is True
    assert any("timeuot_sec" in e for e in listed["errors"])
    text = d.cli("list").stdout
    assert "timeuot_sec" in text and "the daemon still runs its last good version" in text
    d.to_slot()
    wait_for(lambda: len(final("keeper")) == 2, what="the run after the bad edit")
    assert "keeping the last good version" in d.log()

    write_routine("keeper", command_routine("echo v3"))  # fixed
    wait_for(lambda: d.request("status")["invalid"] == [], what="the fix")
    d.to_slot()
    wait_for(lambda: len(final("keeper")) == 3, what="the run after the fix")
    assert [(r.status, r.detail) for r in rows("keeper")] == [
        ("ok", "v1"),
        ("ok", "v1"),  # the last good version ran, not the invalid edit
        ("ok", "v3"),
    ]
    assert d.stop() == 0


def test_config_reloads_on_sighup_and_on_the_reload_command(tmp_path: Path, not_root: None) -> None:
    config = paths().config_file
    d = DaemonProcess(tmp_path).start()
    assert d.request("status")["max_concurrent"] == 2

    config.write_text("max_concurrent = 3\n")
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.request("status")["max_concurrent"] == 3, what="SIGHUP to reload")

    config.write_text("max_concurrent = 1\n")
    out = d.cli("reload")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("reloaded: 0 routines, 0 enabled")
    assert d.request("status")["max_concurrent"] == 1  # done by the time reload answers

    # An invalid config.toml keeps the settings in force, and says why in the log.
    config.write_text("max_concurrent = 0\n")
    result = d.request("reload")
    assert result == {"routines": 0, "enabled": 0, "invalid": []}
    assert d.request("status")["max_concurrent"] == 1
    assert "config.toml is invalid; keeping the previous settings" in d.log()
    assert d.stop() == 0


def test_reload_reaches_housekeepings_retention(tmp_path: Path, not_root: None) -> None:
    """keep_outputs_days and keep_runs_days lowered and reloaded: the running daemon deletes
    the outputs and compacts the runs now past them, without a restart (its housekeeping had
    the settings of its start, and slept an idle hour between passes)."""
    write_routine("old", command_routine("true", schedule='cron = "0 6 1 1 *"'))
    p = paths()
    now = datetime.now(UTC)
    day = now.replace(hour=6, minute=0, second=0, microsecond=0)
    with Ledger(p.ledger) as ledger:
        for age in (200, 20):  # a run past the default 90 days, and one past 10 only
            at = day - timedelta(days=age)
            run_id = f"{at:%Y%m%dT%H%M%S}-old-{age:06d}"
            ledger.record_run(
                "old", run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=at
            )
            ledger.finish_run(run_id, now=at, end=RunEnd(status=RunStatus.OK, dollars=0.5))
    state = p.routine_state("old")
    state.mkdir(parents=True, exist_ok=True)
    # The newest output is kept whatever its age (supervisor/engine/retention.py): today's.
    ages = (200, 20, 0)
    outputs = {age: state / f"{day - timedelta(days=age):%Y-%m-%d}-0600.md" for age in ages}
    for out in outputs.values():
        out.write_text("# old\n")

    def whole_runs() -> int:
        with Ledger(p.ledger) as ledger:
            return len(ledger.history("old", 1000))

    d = DaemonProcess(tmp_path, timings={"housekeeping_delay_sec": 0}).start()
    wait_for(lambda: not outputs[200].exists(), what="the first pass (90 days)")
    wait_for(lambda: whole_runs() == 1, what="the 200-day-old run compacted")
    assert outputs[20].exists()

    p.config_file.write_text("[ledger]\nkeep_outputs_days = 10\nkeep_runs_days = 10\n")
    reloaded = d.cli("reload")
    assert reloaded.returncode == 0, reloaded.stderr
    wait_for(lambda: not outputs[20].exists(), what="the output past 10 days deleted")
    wait_for(lambda: whole_runs() == 0, what="the run past 10 days compacted")
    assert outputs[0].exists()
    assert d.stop() == 0


def test_reload_reaches_what_each_new_run_is_sent(tmp_path: Path, not_root: None) -> None:
    """Every key a run's job carries (ollama_url, pricing, [sandbox], [providers]) is the
    reloaded value in the next run's job, without a restart."""
    told = tmp_path / "jobs"
    told.mkdir()
    write_routine("echoer", command_routine("echo hi", enabled=False))
    worker = [sys.executable, str(FAKEWORKER), "job", str(told)]
    d = DaemonProcess(tmp_path, worker_argv=worker).start()

    def next_job() -> Job:
        before = set(told.iterdir())
        out = d.cli("run", "echoer")
        assert out.returncode == 0, out.stderr
        [new] = set(told.iterdir()) - before
        job = decode(new.read_bytes())
        assert isinstance(job, Job)
        return job

    first = next_job()
    assert first.sandbox["max_processes"] == 256 and first.providers == {}
    paths().config_file.write_text(
        'ollama_url = "http://127.0.0.1:11999"\n'
        '[pricing]\n"claude-test" = { input = 1.0, output = 2.0 }\n'
        "[sandbox]\nmax_processes = 99\n"
        '[providers.lmstudio]\nkind = "openai"\nbase_url = "http://127.0.0.1:1234/v1"\n'
        "local = true\n"
    )
    assert d.cli("reload").returncode == 0
    job = next_job()
    assert job.ollama_url == "http://127.0.0.1:11999"
    assert job.pricing["claude-test"] == [1.0, 2.0]
    assert job.sandbox["max_processes"] == 99
    assert list(job.providers) == ["lmstudio"]
    assert d.stop() == 0
