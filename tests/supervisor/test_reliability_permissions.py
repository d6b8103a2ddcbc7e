"""Everything vinos-routine creates under VINOS_HOME is the user's alone, whatever the umask:
directories 0700, files 0600. The CLI and the real daemon are started from a "shell" with umask 022,
as a user who never installed the unit (UMask=0077) would.

Before: `routines/` and `state/` were 0755, ledger.db 0644, and the daemon made state dirs
and outputs world-readable: another local user could read them.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervisor.daemonkit import DaemonProcess, final, wait_for

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def loose(home: Path) -> list[str]:
    """What under `home` others may read, write or enter: '0755 routines/state', …"""
    out = []
    for root, dirs, files in os.walk(home):
        for name in dirs + files:
            path = Path(root) / name
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if stat.S_ISLNK(os.lstat(path).st_mode):
                continue
            if mode & 0o077:
                out.append(f"{mode:04o} {path.relative_to(home)}")
    return sorted(out)


def test_files_and_dirs_are_private_under_umask_022(
    tmp_path: Path, not_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "fresh-home"  # nothing of it exists yet: the program creates it all
    monkeypatch.setenv("VINOS_HOME", str(home))
    d = DaemonProcess(tmp_path, wrap=["sh", "-c", 'umask 022 && exec "$@"', "sh"])

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "supervisor", *args],
            check=False,
            env=d.env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: os.umask(0o022),  # the shell's umask
        )

    made = cli("create", "diskfree", "--kind", "command", "--no-edit")
    assert made.returncode == 0, made.stderr
    listed = cli("list")  # opens (creates) the ledger
    assert listed.returncode == 0, listed.stderr
    assert (home / "routines" / "state" / "ledger.db").exists()
    assert loose(home) == []

    d.start()
    ran = cli("run", "diskfree")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [row] = wait_for(lambda: final("diskfree"), what="the run")
    assert row.status == "ok" and row.output_file
    state = home / "routines" / "state" / "diskfree"
    assert Path(row.output_file).parent == state
    assert (state / "last-run.json").exists() and list((state / "runs").iterdir())
    assert loose(home) == []
    assert d.stop() == 0
