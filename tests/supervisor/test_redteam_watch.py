"""Red team: a `watch` glob must never watch a folder outside what its routine may read.

The changed paths of a watch event are handed to the run (the model, or a command's stdin),
so a watch outside the routine's grants tells it the names and write times of files there
(`~/.ssh`, `~/.gnupg`), and starts runs on them. Two ways there, both refused:
- the routine's author writes `..` in the glob (`~/notes/../.ssh/*` is below `~/notes` as
  text): the loader refuses a watch with a `.` or `..` part;
- a link on the way (`~/notes/inbox` → `~/.ssh`, which a run that may write to ~/notes can
  plant): the daemon resolves the folder it opened and watches it only inside the grant.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from routines.spec.loader import load_text
from tests.supervisor.daemonkit import DaemonProcess, final, rows, wait_for, write_routine

pytestmark = pytest.mark.slow  # a real daemon


def watcher(home: str, watch: str) -> str:
    return (
        '[routine]\nkind = "command"\nenabled = true\n'
        f'[trigger]\nwatch = ["{watch}"]\n'
        f'[command]\nrun = "cat"\ntimeout_sec = 60\nhome = ["{home}"]\n'
    )


@pytest.fixture
def base() -> Iterator[Path]:
    # Below the real home: watch globs are `~/...` (the suite's HOME is the test user's).
    d = Path.home() / f"rt-watch-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_watch_with_dot_dot_is_refused_by_the_loader() -> None:
    text = watcher("~/notes", "~/notes/../.ssh/*")
    with pytest.raises(Exception) as info:
        load_text(text, Path("/r/peek.toml"))
    said = str(info.value)
    assert "[trigger].watch" in said and "'~/notes/../.ssh/*'" in said


def test_a_link_on_the_way_never_carries_a_watch_outside_the_grant(
    tmp_path: Path, base: Path, not_root: None
) -> None:
    notes, secret = base / "notes", base / "secret"
    (notes / "real").mkdir(parents=True)
    secret.mkdir()
    (notes / "inbox").symlink_to(secret)  # what a run that may write to ~/notes can plant
    rel = f"~/{base.name}/notes"
    write_routine("linked", watcher(rel, f"{rel}/inbox/*"))
    write_routine("control", watcher(rel, f"{rel}/real/*"))
    d = DaemonProcess(tmp_path).start()
    (secret / "id_ed25519-work").write_text("not for the routine\n")
    (notes / "real" / "a.txt").write_text("a real write\n")
    wait_for(lambda: len(final("control")) == 1, what="the control routine's watch run")
    assert d.stop() == 0
    assert rows("linked") == []  # no run, so no file name of `secret` reached any run
    assert "outside what linked may read: not watched" in d.log()
