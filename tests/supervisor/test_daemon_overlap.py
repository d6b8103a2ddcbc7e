"""Overlap and concurrency with a real daemon: slots coming due while a routine runs, and the CLI's
disable/remove reaching a queued run.

Runs are held at a gate (a file the test creates), so every check is about order and
counts, never about how long something took. The queue's own rules (FIFO, max_concurrent,
shutdown, one final status) are tested on the pool itself: tests/supervisor/test_pool.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from routines.spec.paths import paths
from tests.supervisor.daemonkit import (
    DaemonProcess,
    Sampler,
    command_routine,
    entered,
    final,
    gated,
    hold,
    release,
    rows,
    sid,
    wait_for,
    write_routine,
)
from tests.supervisor.gates import gate_home

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def status(d: DaemonProcess) -> tuple[list[str], list[str]]:
    s = d.request("status")
    return [r["routine"] for r in s["running"]], [q["routine"] for q in s["queued"]]


def test_a_run_longer_than_its_interval_skips_later_slots_and_owes_none(
    tmp_path: Path, not_root: None
) -> None:
    write_routine("slow", command_routine(gated("slow"), extra=gate_home("slow")))
    d = DaemonProcess(tmp_path).start()
    with Sampler(d) as sampler:
        first = sid(d.to_slot())
        wait_for(lambda: entered("slow") == 1, what="the first run to start")
        skipped = []
        for n in (1, 2):
            skipped.append(sid(d.to_slot()))
            wait_for(lambda n=n: len(final("slow")) == n, what="the slot to be skipped")
        release("slow")
        wait_for(lambda: len(final("slow")) == 3, what="the first run to end")
        hold("slow")
        nxt = sid(d.to_slot())
        wait_for(lambda: entered("slow") == 2, what="the next slot's run")
        release("slow")
        wait_for(lambda: len(final("slow")) == 4, what="the next slot's run to end")
    assert max(sampler.counts) == 1  # never two runs of it at once
    got = [(r.slot, r.trigger, r.status, r.detail) for r in rows("slow")]
    assert got == [
        (first, "schedule", "ok", "released"),
        (skipped[0], "schedule", "skipped", "previous run still going"),
        (skipped[1], "schedule", "skipped", "previous run still going"),
        (nxt, "schedule", "ok", "released"),  # on its own: the skipped ones are not caught up
    ]
    runs = [r for r in rows("slow") if r.status == "ok"]
    assert (runs[0].finished_at or "") <= (runs[1].started_at or "")
    assert d.stop() == 0


def test_disabling_a_routine_drops_its_queued_run_as_skipped(
    tmp_path: Path, not_root: None
) -> None:
    paths().config_file.write_text("max_concurrent = 1\n")
    write_routine("blocker", command_routine(gated("blocker"), extra=gate_home("blocker")))
    write_routine(
        "waiter", command_routine(gated("waiter", "echo waited"), extra=gate_home("waiter"))
    )
    write_routine("off", command_routine("echo off", enabled=False))
    d = DaemonProcess(tmp_path).start()
    first = sid(d.to_slot())
    wait_for(lambda: status(d) == (["blocker"], ["waiter"]), what="waiter queued")
    manual = d.request("run", {"name": "off", "detach": True})  # a disabled one, run by hand
    assert status(d) == (["blocker"], ["waiter", "off"])
    done = d.cli("disable", "waiter")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: status(d) == (["blocker"], ["off"]), what="the queued run to be dropped")
    assert [(r.slot, r.status, r.detail) for r in rows("waiter")] == [
        (first, "skipped", "disabled while queued")
    ]
    assert entered("waiter") == 0  # it never started
    release("blocker")
    wait_for(lambda: len(final("off")) == 1, what="the manual run of the disabled routine")
    assert rows("off")[0].run_id == manual["run_id"] and rows("off")[0].status == "ok"
    assert d.stop() == 0


def test_removing_a_routine_drops_its_queued_run_and_keeps_its_rows(
    tmp_path: Path, not_root: None
) -> None:
    paths().config_file.write_text("max_concurrent = 1\n")
    write_routine("blocker", command_routine(gated("blocker"), extra=gate_home("blocker")))
    write_routine(
        "waiter", command_routine(gated("waiter", "echo waited"), extra=gate_home("waiter"))
    )
    d = DaemonProcess(tmp_path).start()
    first = sid(d.to_slot())
    wait_for(lambda: status(d) == (["blocker"], ["waiter"]), what="waiter queued")
    done = d.cli("remove", "waiter", "--yes")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: status(d) == (["blocker"], []), what="the queued run to be dropped")
    assert [(r.slot, r.status, r.detail) for r in rows("waiter")] == [
        (first, "skipped", "removed while queued")
    ]
    assert entered("waiter") == 0
    release("blocker")
    wait_for(lambda: len(final("blocker")) == 1, what="the blocker to end")
    assert d.stop() == 0
