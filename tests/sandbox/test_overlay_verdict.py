"""The quota decision after an overlaid call (sandbox/overlay.py `verdict`), as data: what the
dirs held before, what the copy back would add and free, whether the tmpfs filled."""

from __future__ import annotations

import os

import pytest

from sandbox.copyback import Tally
from sandbox.overlay import overlay_unavailable, verdict
from sandbox.quota import MAX_ENTRIES, Usage

MiB = 1024 * 1024
WS = ["/w"]


def tally(added: int = 0, freed: int = 0, new: int = 0, gone: int = 0) -> Tally:
    return Tally(added, freed, new, gone, 0)


@pytest.mark.parametrize(
    ("before", "change", "full", "kept"),
    [
        (Usage(4 * MiB, 10), tally(added=12 * MiB, new=1), False, True),  # exactly the quota
        (Usage(4 * MiB, 10), tally(added=12 * MiB + 1, new=1), False, False),
        (Usage(10 * MiB, 1), tally(added=11 * MiB, freed=10 * MiB, new=1, gone=1), False, True),
        (Usage(0, 0), tally(added=MiB, new=1), True, False),  # a write hit ENOSPC
        # Over at the start: deleting is kept, growing is not.
        (Usage(20 * MiB, 2), tally(freed=10 * MiB, gone=1), False, True),
        (Usage(20 * MiB, 2), tally(added=4096, new=1), False, False),
        (Usage(0, MAX_ENTRIES - 1), tally(new=1), False, True),
        (Usage(0, MAX_ENTRIES), tally(new=1), False, False),
    ],
)
def test_the_result_is_kept_only_within_the_quota(
    before: Usage, change: Tally, full: bool, kept: bool
) -> None:
    problem = verdict(WS, [before], [change], 16, full).problem
    assert (problem is None) == kept, problem
    if problem is not None:
        assert problem.endswith("nothing the call wrote there was kept")


def test_the_dirs_are_held_together_and_named() -> None:
    problem = verdict(
        ["/w", "/s"], [Usage(8 * MiB, 1), Usage(0, 1)], [tally(), tally(added=9 * MiB)], 16, False
    ).problem
    assert problem == (
        "/w and /s would hold 17 MB, over max_workspace_mb = 16; "
        "nothing the call wrote there was kept"
    )


def test_the_overlay_is_built_where_the_kernel_allows_it() -> None:
    """The probe (a real holder run) finds the overlay on Linux >= 6.6 (user xattrs on tmpfs),
    so test_overlay_quota.py cannot be skipped there by a probe that always says no."""
    release = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
    if release < (6, 6):
        pytest.skip(f"Linux {os.uname().release}: the poll keeps the quota here")
    assert overlay_unavailable() is None
