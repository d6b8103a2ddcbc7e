"""routines.store.remove_tree: what a sandbox left in a scratch dir goes, whatever modes it
set (chmod 000 folders, read-only files, folders with r but no x) and however deep, and no
link in it is followed, or its target's mode changed. Run unprivileged: as root, modes would
not stop anything."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from routines.store import remove_tree


@pytest.fixture
def unprivileged() -> None:
    if os.geteuid() == 0:
        pytest.fail("run unprivileged (scripts/dev-pytest.sh): as root no mode stops anything")


def test_folders_made_unreadable_and_read_only_files_go(tmp_path: Path, unprivileged: None) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the sandbox's\n")
    outside.chmod(0)
    scratch = tmp_path / "scratch"
    for rel in ("a/b/c", "a/x", "r", "w"):
        (scratch / rel).mkdir(parents=True)
    (scratch / "a/b/c/f").write_text("x")
    (scratch / "a/x/ro").write_text("x")
    (scratch / "a/x/ro").chmod(0o400)
    (scratch / "r/f").write_text("x")
    (scratch / "link").symlink_to(outside)
    (scratch / "a/b/c/link").symlink_to(outside / "keep")
    for rel, mode in (("a/b/c", 0), ("a/b", 0), ("a/x", 0o500), ("r", 0o400), ("w", 0o100)):
        (scratch / rel).chmod(mode)
    (scratch / "a").chmod(0)
    scratch.chmod(0o500)
    try:
        remove_tree(scratch)
        assert not os.path.lexists(scratch)
        assert outside.stat().st_mode & 0o777 == 0  # the link's target untouched
    finally:
        outside.chmod(0o700)
    assert (outside / "keep").read_text() == "not the sandbox's\n"


def test_a_tree_deeper_than_the_open_files_limit_goes(tmp_path: Path, unprivileged: None) -> None:
    """Every level chmod 000, 1,500 deep (past the recursion limit too), with at most 64
    files open: no fd per level."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    fd = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1500):
        os.mkdir("d", dir_fd=fd)
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o400, dir_fd=fd))
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.fchmod(fd, 0)
        os.close(fd)
        fd = child
    os.close(fd)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    try:
        remove_tree(scratch)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not os.path.lexists(scratch)


def test_a_link_in_place_of_the_tree_is_removed_not_followed(
    tmp_path: Path, unprivileged: None
) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    (tmp_path / "scratch").symlink_to(target)
    remove_tree(tmp_path / "scratch")
    assert not os.path.lexists(tmp_path / "scratch")
    assert (target / "keep").exists()
    remove_tree(tmp_path / "missing")  # nothing there: nothing to do


def test_what_cannot_be_removed_is_an_error_naming_it(unprivileged: None) -> None:
    """Never silent: a folder that is not ours to change (procfs's, for real) raises, and the
    error names the folder, not the descriptor it was reached through."""
    fdinfo = Path(f"/proc/{os.getpid()}/fdinfo")
    with pytest.raises(OSError, match=r"chmod u\+rwx of 'fdinfo'"):
        remove_tree(fdinfo)
    assert fdinfo.is_dir()
