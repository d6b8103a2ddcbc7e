"""supervisor/engine/filewatch.py's pure part (which folders to watch, which routines a path
starts),
and the real inotify reading a close-write."""

from __future__ import annotations

import time
from pathlib import Path

from routines.spec.loader import load_text
from supervisor.engine.filewatch import IN_CLOSE_WRITE, Inotify, matching, ours, watched_dirs

TEXT = """[routine]
kind = "command"
[trigger]
watch = {watch}
[command]
run = "true"
home = ["~/in", "~/data"]
"""


def routine(name: str, watch: str) -> object:
    return load_text(TEXT.format(watch=watch), Path(f"/r/{name}.toml"))


def test_each_globs_literal_folder_is_watched() -> None:
    a = routine("a", '["~/in/*.pdf", "~/in/sub/x.txt"]')
    b = routine("b", '["~/data/**/*.csv"]')
    got = watched_dirs([a, b], "/home/u")  # type: ignore[list-item]
    assert got == {
        "/home/u/in": [("a", "/home/u/in/*.pdf", "/home/u/in")],
        "/home/u/in/sub": [("a", "/home/u/in/sub/x.txt", "/home/u/in")],
        "/home/u/data": [("b", "/home/u/data/**/*.csv", "/home/u/data")],
    }


def test_matching_names_each_routine_once() -> None:
    globs = [("a", "/h/in/*.pdf", "/h/in"), ("a", "/h/in/r*", "/h/in"), ("b", "/h/in/*.txt", "/h")]
    assert matching("/h/in/report.pdf", globs) == ["a"]
    assert matching("/h/in/notes.txt", globs) == ["b"]
    assert matching("/h/in/notes.md", globs) == []


def test_inotify_reports_a_file_closed_after_writing(tmp_path: Path) -> None:
    ino = Inotify()
    try:
        wd = ino.add(str(tmp_path))
        (tmp_path / "f.txt").write_text("hi")
        deadline = time.monotonic() + 5
        events: list[tuple[int, int, str]] = []
        while not events and time.monotonic() < deadline:
            events = ino.read()
        assert (wd, "f.txt") in [(w, n) for w, _m, n in events]
        assert any(m & IN_CLOSE_WRITE for _w, m, _n in events)
    finally:
        ino.close()


def test_only_a_regular_file_of_this_user_starts_a_run(tmp_path: Path) -> None:
    import os

    mine = tmp_path / "mine.txt"
    mine.write_text("x")
    assert ours(os.stat(mine))
    assert not ours(os.stat("/etc/hostname"))  # root's
    link = tmp_path / "link.txt"
    link.symlink_to(mine)
    assert not ours(os.stat(link, follow_symlinks=False))
