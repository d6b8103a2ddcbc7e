"""Red-team findings on write_file through a real daemon, real workers and real bwrap
(docs/redteam.md, 40 and 41): names the model gives that the person could not read, or that
their own programs run, are refused and the run goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.supervisor.test_daemon_writes import home, run_to_the_end, write_file

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

__all__ = ["home"]  # the fixture, shared


def test_names_that_are_not_plain_text_or_that_your_programs_run_are_refused(
    tmp_path: Path, home: Path, not_root: None
) -> None:
    """A name with an escape sequence, or `.git/config` (core.fsmonitor runs at the next
    `git status` there, a shell prompt's too) was written under "files"."""
    (home / "notes/.git").mkdir()
    writes = [
        write_file("~/notes/a\x1b[2Jb.md", "b"),
        write_file("~/notes/.git/config", "[core]\n\tfsmonitor = touch ~/pwned\n"),
        write_file("~/notes/plain.md", "d"),
    ]
    fin, said, log = run_to_the_end(tmp_path, "files", writes)
    assert fin["status"] == "ok", (fin, log)
    assert sorted(p.name for p in (home / "notes").iterdir()) == [".git", "plain.md"]
    assert list((home / "notes/.git").iterdir()) == []
    errors = [m.get("error", "") for m in said]
    assert "plain text" in errors[0], errors
    assert "where your programs start from" in errors[1], errors
    assert said[2]["written"] == str(home / "notes/plain.md"), said
