"""Pure fleet decisions: where a routine may run, whether machines disagree on its definition,
and the lease timings. No I/O; the daemon carries them out (supervisor/fleet/member.py). See
tests/fleet/test_fleetplan.py. Whether a lease lapsed is decided by the database's clock, in
SQL (routines/ledger/postgres.py `expire_leases`); the back-off is
`routines.ledger.postgres_open.backoff`.

Catch-up needs no decision of its own: the cursor is shared, so a slot that any machine that
may run the routine claimed (or skipped, or recorded missed) is behind the cursor for all of
them; only slots no machine handled (every one was down) are due when the first comes back,
and the planner (supervisor/engine/plan.py) makes them one catch-up with the count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from supervisor.timings import Timings

__all__ = [
    "LEASE",
    "RENEW",
    "Divergence",
    "Fence",
    "definition_fingerprint",
    "divergence",
    "fence",
    "hold",
    "lost_leases",
    "may_reap",
    "may_run_here",
    "runs_offline",
]

RENEW = timedelta(seconds=Timings().fleet_renew_sec)  # a daemon renews its runs' leases this often
LEASE = timedelta(seconds=Timings().fleet_lease_sec)  # a lease not renewed this long has lapsed
KILL_SEC = 5.0  # what a worker past its deadline takes to notice and kill its process tree


@dataclass(frozen=True, slots=True)
class Fence:
    """The lease timings, all in seconds (README's fleet section states the argument).

    A daemon renews its leases every `renew`; a renewal sets the lease's expiry to the
    server's now() + `expiry`. The worker of a leased run holds "yours until T" with
    T = (when the renewal began, on the machine's CLOCK_BOOTTIME) + `deadline`: the renewal
    began before the server read its now(), so T + `kill` < the lease's expiry however late
    the daemon's answer came. A worker past T kills its process tree within `kill`
    (worker/lease.py); another machine takes the routine only once the
    lease's expiry is `kill` behind it (`taken_after`). So a run that lost its lease is dead
    before anyone else may start the routine: deadline + kill < expiry.
    """

    renew: float
    deadline: float
    expiry: float
    kill: float

    @property
    def taken_after(self) -> float:
        """Seconds past a lease's expiry before another machine may end it and take over."""
        return self.kill


def fence(expiry_sec: float, renew_sec: float) -> Fence:
    """The fence for a lease of `expiry_sec` renewed every `renew_sec`: the kill time is
    KILL_SEC, or a sixth of the lease for the short leases of tests, and the worker's
    deadline leaves two kill times before the expiry (deadline + kill < expiry, with one
    kill time to spare for a worker that wakes late from a suspend). ValueError when a
    renewal could not reach a worker before its deadline passed."""
    kill = min(KILL_SEC, expiry_sec / 6)
    deadline = expiry_sec - 2 * kill
    if renew_sec <= 0 or renew_sec >= deadline:
        raise ValueError(
            f"a lease of {expiry_sec:g} s renewed every {renew_sec:g} s leaves a worker "
            f"deadline of {deadline:g} s: renew more often than that"
        )
    return Fence(renew_sec, deadline, expiry_sec, kill)


def lost_leases(
    running: Mapping[str, float], renewed: Iterable[str], renewal_began: float
) -> list[str]:
    """The runs whose lease a renewal found gone: those this machine runs (`running`: run id
    → when its lease row was committed, on the renewal's clock) whose lease was in place
    before the renewal began, yet it did not renew. A lease committed after the renewal
    began may not have been visible to it, so it is not judged by it."""
    got = set(renewed)
    return sorted(r for r, since in running.items() if since < renewal_began and r not in got)


def definition_fingerprint(text: str) -> str:
    """The fingerprint of a routine file's text: machines agree when theirs are equal."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def may_run_here(machines: tuple[str, ...], machine: str) -> bool:
    """[routine].machines pins a routine to some machines; empty means any."""
    return not machines or machine in machines


def runs_offline(machines: tuple[str, ...], machine: str, local_when_unreachable: bool) -> bool:
    """Whether a routine runs on this machine while the fleet's database is unreachable.

    A routine pinned to this machine alone cannot run anywhere else, so running it here never
    doubles a run; any other routine this machine may run does only with the switch
    ([fleet] local_when_unreachable), which accepts that risk."""
    if machines == (machine,):
        return True
    return local_when_unreachable and may_run_here(machines, machine)


@dataclass(frozen=True, slots=True)
class Divergence:
    """Machines that may run a routine hold different definitions of it."""

    routine: str
    fingerprints: Mapping[str, str]  # machine → fingerprint, for the machines compared

    def groups(self) -> list[list[str]]:
        """Machines grouped by the definition they hold, largest group first."""
        by_fp: dict[str, list[str]] = {}
        for machine, fp in sorted(self.fingerprints.items()):
            by_fp.setdefault(fp, []).append(machine)
        return sorted(by_fp.values(), key=lambda g: (-len(g), g))

    def describe(self) -> str:
        parts = [" and ".join(g) for g in self.groups()]
        return "the routine file differs between machines: " + " / ".join(parts)


def divergence(
    routine: str, fingerprints: Mapping[str, str], allowed: tuple[str, ...]
) -> Divergence | None:
    """Whether the machines that may run `routine` (all that hold it when `allowed` is empty)
    disagree on its definition. A machine without the file does not count: it cannot run it."""
    compared = {m: fp for m, fp in fingerprints.items() if not allowed or m in allowed}
    if len(set(compared.values())) <= 1:
        return None
    return Divergence(routine, compared)


def hold(
    machine: str,
    routines: Iterable[tuple[str, tuple[str, ...], str]],
    published: Mapping[str, Mapping[str, str]],
) -> dict[str, str]:
    """Which of this machine's routines it must not schedule now, each with why.

    `routines`: (name, [routine].machines, this machine's fingerprint) for each routine in
    force here; `published`: routine → {machine: fingerprint} as the fleet knows them (this
    machine's own entry is taken from `routines`, whatever was published before).
    """
    out: dict[str, str] = {}
    for name, machines, fp in routines:
        if not may_run_here(machines, machine):
            out[name] = f"pinned to {', '.join(machines)}"
            continue
        fps = {**published.get(name, {}), machine: fp}
        d = divergence(name, fps, machines)
        if d is not None:
            out[name] = d.describe()
    return out


def elsewhere_lapsed(away_since: float | None, now: float, timings: Fence) -> bool:
    """Whether a run last seen on another machine must be over, the fleet's database having
    been away since `away_since` (None: it answers; both on the lease clock). That machine
    renewed its lease at the latest when the database went away, so its worker stopped itself
    by then + deadline + kill < + expiry + kill (worker/lease.py): past that, the routine is
    free to run offline here. Before, a routine running elsewhere when the outage began was
    `skipped` here for the whole outage (tests/fleet/test_fleetplan.py::
    test_a_run_seen_elsewhere_is_over_once_the_outage_outlasts_its_lease)."""
    return away_since is not None and now - away_since > timings.expiry + timings.kill


# Renewal periods a machine waits, after its first renewal once the database is back, before
# it ends lapsed leases: every other machine's heartbeat (retrying each period) has renewed
# its own by then, and its kept results are written as the runs really ended.
REAP_AFTER_RENEWALS = 2


def may_reap(back_at: float | None, now: float, timings: Fence) -> bool:
    """Whether this machine may end other machines' lapsed leases now (all on the lease clock):
    `back_at` is its first renewal since the database came back (or since it started), None
    once that wait was over. A machine cut off as long as the others cannot tell their dead
    runs from their kept results until they have had a renewal to renew them
    (tests/fleet/test_fleetplan.py, tests/fleet/test_fleet_outage_end.py)."""
    return back_at is None or now - back_at >= REAP_AFTER_RENEWALS * timings.renew
