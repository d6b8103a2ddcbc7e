"""A routine's state dir that cannot take the run's output: read-only, or full. A run that
could not start fails with an error that says so; a run that did its work stays `ok`, with
the output's delivery problem beside it (never a strike), and leaves no partial output
behind (an output is moved in by rename, never written in place).

"Full" is a real full filesystem: the daemon runs under bwrap (unprivileged, in a user
namespace of its own) with a 64 KiB tmpfs mounted over the routine's state dir, and the
routine itself fills it before printing its output. The test looks into that mount through
/proc/<daemon pid>/root.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from routines.ledger import Ledger
from routines.spec.paths import paths
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    final,
    rows,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def test_a_read_only_state_dir_fails_the_run_cleanly(tmp_path: Path, not_root: None) -> None:
    state = paths().routine_state("locked")
    state.mkdir(parents=True)
    state.chmod(0o555)
    write_routine("locked", command_routine("seq 1 1000"))
    d = DaemonProcess(tmp_path).start()
    try:
        d.to_slot()
        [row] = wait_for(lambda: final("locked"), what="the run")
        assert row.status == "failed"
        assert row.detail == (
            f"cannot create the run's scratch dir {state}/.scratch/{row.run_id}: Permission denied"
        )
        assert list(state.iterdir()) == []

        # With a writable scratch dir left from before, the command runs but its output
        # cannot be moved in: still `ok` (it did its work), the delivery problem in its
        # detail, and the output kept in its scratch dir, where the detail says.
        state.chmod(0o755)
        (state / ".scratch").mkdir()
        state.chmod(0o555)
        d.to_slot()
        wait_for(lambda: len(final("locked")) == 2, what="the second run")
        row = rows("locked")[-1]
        assert row.status == "ok"
        kept = state / ".scratch" / str(row.run_id)
        assert (row.detail or "").startswith(
            "1; output not delivered: could not save it: Permission denied"
        )
        assert (row.detail or "").endswith(f"; it is kept in {kept}")
        assert row.output_file is None
        assert [p.name for p in state.iterdir()] == [".scratch"]
        [output] = kept.iterdir()
        assert output.read_text().splitlines()[-1] == "1000"
        with Ledger(paths().ledger) as ledger:
            assert ledger.state("locked").failure_streak == 0
    finally:
        state.chmod(0o755)
    assert d.request("ping")["pid"] == d.pid
    assert d.stop() == 0


def test_a_full_state_dir_leaves_a_succeeded_run_ok_and_no_strike(
    tmp_path: Path, not_root: None
) -> None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.fail("bwrap is missing: install bubblewrap (scripts/system-deps.sh)")
    state = paths().routine_state("stuffed")
    state.mkdir(parents=True)
    # The command tries to fill the state dir (no sandbox sees it any more), then prints
    # ~100 KB, more than the 64 KB the state dir has: the worker cannot write it.
    write_routine(
        "stuffed",
        command_routine(f"head -c 1000000 /dev/zero > {state}/filler; seq 1 20000"),
    )
    d = DaemonProcess(
        tmp_path, wrap=[bwrap, "--dev-bind", "/", "/", "--size", "65536", "--tmpfs", str(state)]
    ).start()
    # Three slots in a row: before, each was `failed` and a strike, and the third disabled
    # the routine; a command that exited 0 is `ok`, its output's fate a delivery problem.
    for n in (1, 2, 3):
        d.to_slot()

        def ended(k: int = n) -> bool:
            return len(final("stuffed")) >= k

        wait_for(ended, what=f"run {n}")
    runs = final("stuffed")
    assert [r.status for r in runs] == ["ok", "ok", "ok"], [(r.status, r.detail) for r in runs]
    for row in runs:
        assert (row.detail or "").startswith("output not delivered: could not write it into ")
        assert (row.detail or "").endswith(": No space left on device")
        assert row.output_file is None
    with Ledger(paths().ledger) as ledger:
        state_row = ledger.state("stuffed")
    assert state_row.failure_streak == 0 and state_row.disabled_reason is None
    row = runs[-1]
    # Inside the daemon's view of the state dir: the empty scratch dir and the run log; no
    # filler (the sandbox never saw the state dir), no output file, whole or partial, and no
    # temp file.
    inside = Path(f"/proc/{d.pid}/root") / str(state).lstrip("/")
    names = sorted(p.name for p in inside.iterdir())
    assert ".scratch" in names and "filler" not in names
    assert not [n for n in names if n.endswith(".md") or n.endswith(".tmp")]
    assert list((inside / ".scratch").iterdir()) == []
    assert list(state.iterdir()) == []  # the real directory under the mount was not touched
    assert d.request("ping")["pid"] == d.pid
    assert d.stop() == 0
