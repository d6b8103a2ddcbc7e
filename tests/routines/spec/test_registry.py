"""The registry over real directories: user over system, invalid files reported beside valid
ones, the last good version kept through a bad edit, unchanged files not parsed again, and the
files that are not routines (config.toml, dotfiles, editor leftovers) left alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from routines.spec import Origin
from routines.spec.paths import Paths, paths
from routines.spec.registry import Registry, scan
from tests.helpers import AGENT, write


@pytest.fixture
def p(vinos_env: Path) -> Paths:
    return paths()


def described(text: str, description: str) -> str:
    return f'[routine]\ndescription = "{description}"\n' + text


def test_empty_and_missing_directories(p: Paths, tmp_path: Path) -> None:
    assert scan(p).entries == {}
    gone = Paths(home=tmp_path / "nope", system_dir=tmp_path / "nada", runtime_dir=tmp_path)
    assert scan(gone) == Registry()


def test_user_routine_overrides_system_routine_of_the_same_name(p: Paths) -> None:
    system = write(p.system_dir, "day-brief", described(AGENT, "shipped"))
    user = write(p.routines_dir, "day-brief", described(AGENT, "mine"))
    write(p.system_dir, "github-review", described(AGENT, "shipped too"))
    reg = scan(p)
    assert reg.names() == ["day-brief", "github-review"]
    entry = reg.get("day-brief")
    assert entry is not None and entry.routine is not None
    assert (entry.origin, entry.path, entry.overrides) == (Origin.USER, user, system)
    assert (entry.routine.description, entry.routine.origin) == ("mine", Origin.USER)
    other = reg.get("github-review")
    assert other is not None and other.routine is not None
    assert (other.origin, other.overrides, other.routine.origin) == (
        Origin.SYSTEM,
        None,
        Origin.SYSTEM,
    )
    assert [r.name for r in reg.routines()] == ["day-brief", "github-review"]


def test_removing_the_system_file_a_user_routine_shadowed_clears_overrides(p: Paths) -> None:
    """The rescan kept an unchanged user file's entry as it was, `overrides` included, after
    the system file it named was removed."""
    system = write(p.system_dir, "day-brief", described(AGENT, "shipped"))
    write(p.routines_dir, "day-brief", described(AGENT, "mine"))
    first = scan(p)
    assert first.entries["day-brief"].overrides == system
    system.unlink()
    again = scan(p, first).entries["day-brief"]
    assert (again.overrides, again.routine) == (None, first.entries["day-brief"].routine)


def test_an_unchanged_rescan_keeps_every_entry_as_it_was(p: Paths) -> None:
    write(p.system_dir, "day-brief", described(AGENT, "shipped"))
    write(p.routines_dir, "day-brief", described(AGENT, "mine"))
    write(p.routines_dir, "other", described(AGENT, "other"))
    first = scan(p)
    again = scan(p, first)
    assert all(again.entries[n] is e for n, e in first.entries.items())


def test_removing_the_user_override_brings_the_system_routine_back(p: Paths) -> None:
    system = write(p.system_dir, "day-brief", described(AGENT, "shipped"))
    user = write(p.routines_dir, "day-brief", described(AGENT, "mine"))
    first = scan(p)
    user.unlink()
    entry = scan(p, first).get("day-brief")
    assert entry is not None and entry.routine is not None
    assert (entry.path, entry.origin, entry.routine.description) == (
        system,
        Origin.SYSTEM,
        "shipped",
    )


def test_invalid_files_are_reported_and_the_others_still_load(p: Paths) -> None:
    write(p.routines_dir, "good", AGENT)
    malformed = write(p.routines_dir, "malformed", "[agent\n")
    not_a_table = write(
        p.routines_dir, "not-a-table", 'agent = 3\n[schedule]\ncron = "0 6 * * *"\n'
    )
    bad_name = write(p.routines_dir, "Bad_Name.toml", AGENT)
    write(p.system_dir, "also-good", AGENT)
    reg = scan(p)
    assert reg.names() == ["Bad_Name", "also-good", "good", "malformed", "not-a-table"]
    assert [r.name for r in reg.routines()] == ["also-good", "good"]
    for name in ("good", "also-good"):
        entry = reg.get(name)
        assert entry is not None and entry.valid and not entry.stale and entry.errors == ()
    errors = {n: [str(e) for e in reg.entries[n].errors] for n in reg.names()}
    assert errors["malformed"] == [
        f"{malformed}: malformed TOML: Expected ']' at the end of a table declaration "
        "(at line 1, column 7)"
    ]
    assert (
        errors["not-a-table"][0]
        == f"{not_a_table}: [agent]: expected a table, found 3 (an integer)"
    )
    assert errors["Bad_Name"] == [
        f"{bad_name}: bad routine name 'Bad_Name': expected lowercase letters, digits and '-', "
        "starting with a letter or digit, at most 63 characters"
    ]
    for name in ("malformed", "not-a-table", "Bad_Name"):
        entry = reg.entries[name]
        assert entry.routine is None and not entry.valid and not entry.stale


def test_a_bad_edit_keeps_the_last_good_version(p: Paths) -> None:
    path = write(p.routines_dir, "day-brief", described(AGENT, "v1"))
    first = scan(p)
    good = first.entries["day-brief"].routine
    assert good is not None
    path.write_text(AGENT.replace("0.5", "-1"))  # an edit that breaks it
    second = scan(p, first)
    entry = second.entries["day-brief"]
    assert entry.routine is good  # still in force
    assert entry.stale and not entry.valid
    assert [str(e) for e in entry.errors] == [
        f"{path}: [budget].max_dollars_per_day: expected a positive number, found -1 (an integer)"
    ]
    assert entry.warnings == ()  # the stale routine's warnings are not the file's
    # Still broken after another bad edit: the same last good version.
    path.write_text(AGENT.replace("0.5", "-2") + "\n")
    third = scan(p, second)
    assert third.entries["day-brief"].routine is good and third.entries["day-brief"].stale
    # Fixed: the new version is in force.
    path.write_text(described(AGENT, "v2"))
    fourth = scan(p, third).entries["day-brief"]
    assert fourth.valid and not fourth.stale
    assert fourth.routine is not None and fourth.routine.description == "v2"


def test_an_invalid_file_without_a_previous_scan_has_nothing_in_force(p: Paths) -> None:
    write(p.routines_dir, "day-brief", AGENT.replace("0.5", "-1"))
    entry = scan(p).entries["day-brief"]
    assert entry.routine is None and not entry.stale


def test_unchanged_files_are_not_parsed_again(p: Paths) -> None:
    path = write(p.routines_dir, "day-brief", described(AGENT, "aaaa"))
    first = scan(p)
    second = scan(p, first)
    assert second.entries["day-brief"] is first.entries["day-brief"]
    # Same size, inode and mtime: the stamp says unchanged, so the file is not read again
    # (this is what makes a scan every tick cheap).
    st = path.stat()
    with path.open("r+") as f:
        f.write(described(AGENT, "bbbb"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    third = scan(p, second)
    routine = third.entries["day-brief"].routine
    assert routine is not None and routine.description == "aaaa"
    # A new mtime is a change: parsed again.
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    routine = scan(p, third).entries["day-brief"].routine
    assert routine is not None and routine.description == "bbbb"


def test_a_deleted_routine_disappears(p: Paths) -> None:
    path = write(p.routines_dir, "day-brief", AGENT)
    first = scan(p)
    path.unlink()
    assert scan(p, first).entries == {}


def test_config_toml_is_not_a_routine(p: Paths) -> None:
    write(p.routines_dir, "config", "max_concurrent = 3\n")
    write(p.routines_dir, "day-brief", AGENT)
    assert scan(p).names() == ["day-brief"]


def test_dotfiles_editor_files_and_non_files_are_ignored(p: Paths) -> None:
    write(p.routines_dir, "day-brief", AGENT)
    for junk in (
        ".day-brief.toml.swp",  # vim
        ".day-brief.toml.swx",
        "day-brief.toml~",  # emacs/vim backup
        "#day-brief.toml#",  # emacs autosave
        ".hidden.toml",
        ".goutputstream-XYZ.toml",  # a dotfile, even one ending in .toml
        "day-brief.toml.orig",
        "4913",  # vim's write test
        "notes.txt",
    ):
        (p.routines_dir / junk).write_text("garbage [")
    os.symlink("user@host.1234:1", p.routines_dir / ".#day-brief.toml")  # emacs lock: dangling
    (p.routines_dir / "folder.toml").mkdir()
    (p.routines_dir / "state").mkdir()
    assert scan(p).names() == ["day-brief"]


def test_a_symlinked_routine_file_is_loaded(p: Paths, tmp_path: Path) -> None:
    real = write(tmp_path / "dotfiles", "day-brief", AGENT)
    os.symlink(real, p.routines_dir / "day-brief.toml")
    entry = scan(p).entries["day-brief"]
    assert entry.valid and entry.routine is not None and entry.routine.name == "day-brief"
