"""Pure fleet decisions: where a routine may run, whether machines disagree on its definition,
and the lease timings. No I/O; the daemon carries them out (supervisor/fleet.py). See
tests/fleet/test_fleetplan.py. Whether a lease lapsed is decided by the database's clock, in
SQL (routines/pgledger.py `expire_leases`); the back-off is `routines.pgledger.backoff`.

Catch-up needs no decision of its own: the cursor is shared, so a slot that any machine that
may run the routine claimed (or skipped, or recorded missed) is behind the cursor for all of
them; only slots no machine handled (every one was down) are due when the first comes back,
and the planner (supervisor/plan.py) makes them one catch-up with the count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta

__all__ = [
    "LEASE",
    "RENEW",
    "Divergence",
    "definition_fingerprint",
    "divergence",
    "hold",
    "may_run_here",
    "runs_offline",
]

RENEW = timedelta(seconds=15)  # a daemon renews its runs' leases this often
LEASE = timedelta(seconds=60)  # a lease not renewed for this long has lapsed


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
