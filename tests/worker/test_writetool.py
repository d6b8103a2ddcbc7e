"""write_file's host side (worker/writetool.py): where a path lands once its links are
resolved, and a write that follows no link planted after that check."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from worker.writetool import Target, make_folder, target, write


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "notes/inner").mkdir(parents=True)
    (home / "secret").mkdir()
    return home


def test_a_path_resolves_inside_a_folder_through_a_link_within_it(home: Path) -> None:
    (home / "notes/same").symlink_to(home / "notes/inner")
    found = target("~/notes/same/x.md", ("~/notes",), str(home))
    assert found == Target(str(home / "notes"), ("inner", "x.md"))


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("~/notes", "outside"),  # the folder itself is no file to write
        ("notes/x.md", 'expected a path starting with "~/" or "/"'),
        ("~/notes/x\n.md", "one line"),
        ("~/notes/inner/api-token.txt", "credential-named"),
        ("~/notes/private/x.md", "on the never-list"),  # config.toml's [sandbox].never
    ],
)
def test_what_is_refused(home: Path, path: str, says: str) -> None:
    found = target(path, ("~/notes",), str(home), never=(str(home / "notes/private"),))
    assert isinstance(found, str) and says in found, found


def test_a_link_planted_after_the_check_is_not_followed(home: Path) -> None:
    """The write opens each component from the folder with O_NOFOLLOW: a folder swapped for
    a link out between the check and the write fails, and nothing lands outside."""
    found = target("~/notes/inner/x.md", ("~/notes",), str(home))
    assert isinstance(found, Target)
    os.rmdir(home / "notes/inner")
    (home / "notes/inner").symlink_to(home / "secret")
    with pytest.raises(OSError):
        write(found, "x")
    assert list((home / "secret").iterdir()) == []


def test_a_write_replaces_a_link_in_the_files_place_never_its_target(home: Path) -> None:
    (home / "secret/keep").write_text("keep\n")
    found = target("~/notes/x.md", ("~/notes",), str(home))
    assert isinstance(found, Target)
    (home / "notes/x.md").symlink_to(home / "secret/keep")  # planted after the check
    said = json.loads(write(found, "new\n"))
    assert said == {"written": str(home / "notes/x.md"), "bytes": 4, "replaced": True}
    assert (home / "secret/keep").read_text() == "keep\n"
    assert not (home / "notes/x.md").is_symlink() and (home / "notes/x.md").read_text() == "new\n"


def test_a_write_folder_is_made_without_following_a_link_on_the_way(home: Path) -> None:
    real = os.path.realpath(home)
    make_folder(f"{real}/notes/a/b")
    assert (home / "notes/a/b").is_dir()
    (home / "link").symlink_to(home / "secret")
    with pytest.raises(OSError):
        make_folder(f"{real}/link/deep")
    assert list((home / "secret").iterdir()) == []
