"""The fleet's pure decisions (supervisor/fleet/plan.py) and the database back-off."""

from __future__ import annotations

import pytest

from routines.ledger.postgres_open import Gate, backoff
from supervisor.fleet.plan import (
    definition_fingerprint,
    divergence,
    elsewhere_lapsed,
    fence,
    hold,
    may_reap,
    may_run_here,
    runs_offline,
)


def test_an_empty_machines_list_means_any_machine() -> None:
    assert may_run_here((), "laptop")
    assert may_run_here(("desktop", "laptop"), "laptop")
    assert not may_run_here(("desktop",), "laptop")


def test_offline_only_a_routine_pinned_here_alone_runs_unless_the_switch_is_on() -> None:
    assert runs_offline(("laptop",), "laptop", False)  # nowhere else can run it
    assert not runs_offline((), "laptop", False)  # any machine: fail closed
    assert not runs_offline(("laptop", "desktop"), "laptop", False)
    assert runs_offline((), "laptop", True)  # the switch accepts the risk
    assert runs_offline(("laptop", "desktop"), "laptop", True)
    assert not runs_offline(("desktop",), "laptop", True)  # never where it is pinned away


def test_fingerprints_follow_the_file_text() -> None:
    a = definition_fingerprint('[routine]\nkind = "command"\n')
    assert a == definition_fingerprint('[routine]\nkind = "command"\n')
    assert a != definition_fingerprint('[routine]\nkind = "agent"\n')


def test_divergence_compares_only_machines_that_may_run_it() -> None:
    fps = {"laptop": "1", "desktop": "1", "server": "2"}
    d = divergence("brief", fps, ())
    assert d is not None
    assert d.groups() == [["desktop", "laptop"], ["server"]]
    assert d.describe() == "the routine file differs between machines: desktop and laptop / server"
    assert divergence("brief", fps, ("laptop", "desktop")) is None  # the server may not run it
    assert divergence("brief", {"laptop": "1"}, ()) is None


@pytest.mark.parametrize(
    ("machines", "published", "expect"),
    [
        ((), {}, {}),  # only this machine knows it
        ((), {"desktop": "fp"}, {}),  # the same file elsewhere
        (("desktop",), {}, {"brief": "pinned to desktop"}),
        ((), {"desktop": "other"}, {"brief": "differs"}),
        (("laptop",), {"desktop": "other"}, {}),  # desktop may not run it: not compared
        ((), {"laptop": "stale"}, {}),  # this machine's own old entry is replaced
    ],
)
def test_hold(machines: tuple[str, ...], published: dict[str, str], expect: dict[str, str]) -> None:
    held = hold("laptop", [("brief", machines, "fp")], {"brief": published})
    assert set(held) == set(expect)
    for name, why in expect.items():
        assert why in held[name]


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff(n, 30) for n in range(8)] == [0, 1, 2, 4, 8, 16, 30, 30]


def test_the_gate_fails_fast_until_the_retry_is_due() -> None:
    t = [100.0]
    gate = Gate(cap=4, clock=lambda: t[0])
    assert gate.open()
    gate.failed()
    assert not gate.open()
    t[0] += 1.0
    assert gate.open()
    gate.failed()
    t[0] += 1.5
    assert not gate.open()  # 2 s after the second failure
    t[0] += 0.5
    assert gate.open()
    gate.succeeded()
    assert gate.open() and gate.failures == 0


def test_a_run_seen_elsewhere_is_over_once_the_outage_outlasts_its_lease() -> None:
    """The other machine renewed at the latest when the database went away; its worker is
    dead by then + deadline + kill, so past expiry + kill the routine may run offline here."""
    timings = fence(60, 15)  # expiry 60 s, kill 5 s
    assert not elsewhere_lapsed(None, 10_000.0, timings)  # the database answers: as last seen
    assert not elsewhere_lapsed(1_000.0, 1_000.0 + 64.0, timings)
    assert not elsewhere_lapsed(1_000.0, 1_000.0 + 65.0, timings)
    assert elsewhere_lapsed(1_000.0, 1_000.0 + 65.5, timings)


def test_a_machine_back_from_an_outage_waits_two_renewals_before_ending_lapsed_leases() -> None:
    """Its first renewal since the database returned (or since it started) at 1,000 s: the
    other machines' heartbeats retry every renewal period, so within one they have renewed
    their leases; only after two may this one end those still lapsed."""
    timings = fence(60, 15)
    assert may_reap(None, 5_000.0, timings)  # long back: as before
    assert not may_reap(1_000.0, 1_000.0, timings)
    assert not may_reap(1_000.0, 1_029.9, timings)
    assert may_reap(1_000.0, 1_030.0, timings)
