"""A full disk under the ledger, for real: the daemon runs under bwrap (in a user namespace of its
own, unprivileged) with an 8 MiB tmpfs mounted over the state dir, so the ledger, outputs and run
logs live on it; the test fills it through /proc/<daemon pid>/root and frees it again.

While the disk is full the daemon stays up and says why once (its log, its status, a desktop
notification through a real notify-send stand-in); it claims nothing it cannot record (the due
slot is not claimed, so it cannot run twice); a run that ends meanwhile keeps its result in
memory. When space returns, within a tick, the kept result is written as it ended (never
`interrupted`) and scheduling resumes.

Before: the slot claim raised `sqlite3.OperationalError: database or disk is full` out of the
tick and the daemon crashed, and the run that ended stayed `running`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import sys
from pathlib import Path

import psutil
import pytest

from routines import proposals
from routines.ledger import Ledger, RunRow
from routines.spec.paths import paths
from supervisor.cli.client import DaemonError
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    fake_notify_send,
    notifications,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

SIZE = 8 * 1024 * 1024
FAKEWORKER = Path(__file__).with_name("fakeworker.py")


def fill(directory: Path) -> Path:
    """Write zeros into directory/filler until the filesystem has no space left."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for size in (65536, 512, 1):  # down to the last byte
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


class OnTmpfs:
    """A daemon whose state dir (ledger included) is a SIZE tmpfs of its own, under bwrap.
    `script` (sh, given the daemon's argv as "$@") may run the daemon more than once in the
    same mount namespace, so on the same tmpfs."""

    def __init__(self, tmp_path: Path, script: str = 'exec "$@"') -> None:
        self.gates = tmp_path / "gates"
        self.gates.mkdir()
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            pytest.fail("bwrap is missing: install bubblewrap (scripts/system-deps.sh)")
        self.tmp_path = tmp_path
        self.state = paths().state_dir
        self.state.mkdir(parents=True, exist_ok=True)
        bin_dir, self.record = fake_notify_send(tmp_path)
        self.d = DaemonProcess(
            tmp_path,
            wrap=[
                *(bwrap, "--dev-bind", "/", "/", "--size", str(SIZE), "--tmpfs", str(self.state)),
                *("sh", "-c", script, "sh"),
            ],
            extra_env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
            # A stand-in worker (real process, real protocol) with its gate outside the
            # tmpfs: the real sandbox refuses a bwrap that is not root-owned, and inside
            # the outer namespace root shows as nobody.
            worker_argv=[sys.executable, str(FAKEWORKER), "gated", str(self.gates)],
        )
        self._snapshots = iter(range(10**6))

    @property
    def inside(self) -> Path:
        """The state dir as the daemon sees it: the tmpfs."""
        return Path(f"/proc/{self.d.pid}/root") / str(self.state).lstrip("/")

    def runs(self, name: str) -> list[RunRow]:
        """The daemon's ledger, read from a copy: SQLite resolves /proc/PID/root to "/" in
        the test's own mount namespace (its symlink resolution), so it cannot open it there.
        A copy without the -shm index is read as after a crash: committed frames only."""
        snap = self.tmp_path / f"snap-{next(self._snapshots)}"
        snap.mkdir()
        for suffix in ("", "-wal"):
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(self.inside / f"ledger.db{suffix}", snap / f"ledger.db{suffix}")
        with Ledger(snap / "ledger.db") as ledger:
            return sorted(ledger.history(name, 100), key=lambda r: r.id)

    def proposals(self) -> list[proposals.Proposal]:
        """The proposals in the daemon's ledger, read from a copy as `runs` reads."""
        snap = self.tmp_path / f"snap-{next(self._snapshots)}"
        snap.mkdir()
        for suffix in ("", "-wal"):
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(self.inside / f"ledger.db{suffix}", snap / f"ledger.db{suffix}")
        with Ledger(snap / "ledger.db") as ledger:
            return proposals.for_routine(ledger, "heldmail")

    def ended(self, name: str) -> list[RunRow]:
        return [r for r in self.runs(name) if r.status not in ("queued", "running")]


def test_a_full_disk_pauses_the_daemon_and_loses_no_result(tmp_path: Path, not_root: None) -> None:
    write_routine("ticker", command_routine("echo tick"))
    write_routine("held", command_routine("true", enabled=False))
    box = OnTmpfs(tmp_path)
    d, inside, runs, ended, record = box.d.start(), box.inside, box.runs, box.ended, box.record

    d.to_slot()
    wait_for(lambda: len(ended("ticker")) == 1, what="the first run")
    # Through the socket: outside the daemon's mount namespace the CLI sees no ledger beside
    # the daemon's lock, and rightly refuses (test_reliability_lost.py).
    d.request("run", {"name": "held", "detach": True})
    wait_for((box.gates / "held.entered").exists, what="the held run to start")

    filler = fill(inside)
    (box.gates / "held.go").touch()  # it ends while the disk is full
    d.to_slot()  # and the ticker's next slot comes due
    wait_for(lambda: "no space left for the ledger" in d.log(), what="the daemon to say why")
    [held] = runs("held")
    wait_for(lambda: d.request("status")["unwritten"] == [held.run_id], what="the kept result")
    status = d.request("status")
    assert status["status"] == "paused: the disk is full (1 finished run(s) wait to be recorded)"
    assert status["disk_full"].startswith("no space left for the ledger")
    for _ in range(3):
        d.request("reload")  # a tick each: each tries again, none crashes or repeats itself
    assert d.request("ping")["pid"] == d.pid
    assert held.status in ("queued", "running")  # not recorded yet: there is no room
    assert len(runs("ticker")) == 1  # the due slot was not claimed: nothing it cannot record
    with pytest.raises(DaemonError, match="no space left for the ledger"):
        d.request("run", {"name": "ticker"})
    assert d.log().count("no space left for the ledger") == 1
    calls = [c for c in notifications(record) if c and "the disk is full" in " ".join(c)]
    assert len(calls) == 1

    filler.unlink()  # space returns
    [held] = wait_for(lambda: ended("held"), what="the kept result to be written")
    # As it really ended: its worker found no room for the output either.
    assert held.status == "ok" and held.finished_at is not None
    assert held.detail == "output not delivered: could not write it: No space left on device"
    wait_for(
        lambda: [r.status for r in ended("ticker")] == ["ok", "ok"],
        what="scheduling to resume with the slot that was due",
    )
    assert d.request("status")["disk_full"] is None
    assert "space is back" in d.log()
    assert d.stop() == 0


def test_a_daemon_restarted_on_a_full_disk_stays_up(tmp_path: Path, not_root: None) -> None:
    """Under `Restart=on-failure` a crash at start-up on a full disk was a crash loop: the
    first thing a new daemon writes (marking the killed daemon's run interrupted) failed."""
    write_routine("ticker", command_routine("echo tick"))
    write_routine("held", command_routine("true", enabled=False))
    box = OnTmpfs(tmp_path, script='"$@"; exec "$@"')  # the daemon, and again when it dies
    d = box.d.start()
    d.request("run", {"name": "held", "detach": True})
    wait_for((box.gates / "held.entered").exists, what="the held run to start")
    held_worker = [
        p for p in psutil.Process(d.pid).children() if str(box.gates) in " ".join(p.cmdline())
    ]
    assert len(held_worker) == 1
    fill(box.inside)
    os.kill(d.pid, signal.SIGKILL)  # mid-run: its row stays `running`
    # A real worker leaves when its pipe closes; the gated fake waits on its gate, so it is
    # ended here (it outlived every run of the suite before).
    held_worker[0].kill()
    d.daemon_pid = None
    d.wait_ready()  # the second daemon, on the same full tmpfs
    wait_for(lambda: "no space left for the ledger" in d.log(), what="the daemon to say why")
    assert d.request("ping")["pid"] == d.pid
    assert d.request("status")["status"].startswith("paused: the disk is full")

    (box.inside / "filler").unlink()  # through the new daemon's pid: the same tmpfs
    [held] = wait_for(lambda: box.ended("held"), what="the killed run to be marked")
    assert held.status == "interrupted"
    d.to_slot()
    wait_for(lambda: [r.status for r in box.ended("ticker")] == ["ok"], what="a scheduled run")
    assert d.stop() == 0


HELD_MAIL = """[routine]
enabled = false

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


def test_proposals_of_a_run_that_ends_on_a_full_disk_are_kept_with_its_result(
    tmp_path: Path, not_root: None
) -> None:
    write_routine("heldmail", HELD_MAIL)
    box = OnTmpfs(tmp_path)
    d = box.d.start()
    d.request("run", {"name": "heldmail", "detach": True})
    wait_for((box.gates / "heldmail.entered").exists, what="the held run to start")
    filler = fill(box.inside)
    (box.gates / "heldmail.go").touch()  # it proposes and ends while the disk is full
    wait_for(lambda: d.request("status")["unwritten"], what="the kept result")
    assert not [c for c in notifications(box.record) if "proposes an action" in " ".join(c)]
    assert "not recorded" not in d.log()  # neither recorded nor dropped: kept

    filler.unlink()  # space returns
    [held] = wait_for(lambda: box.ended("heldmail"), what="the kept result to be written")
    [p] = box.proposals()
    assert (p.run_id, p.action, p.input, p.state) == (
        held.run_id,
        "send-reply",
        "Hi Bob\n",
        "waiting",
    )
    wait_for(
        lambda: [
            c for c in notifications(box.record) if "heldmail proposes an action" in " ".join(c)
        ],
        what="the proposal's notification, once it is recorded",
    )
    assert d.stop() == 0
