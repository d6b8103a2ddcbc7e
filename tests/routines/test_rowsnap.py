"""The row snapshot (routines/query/rowsnap.py) over real files, a real ledger and a real clock:
`list_rows` (what `list` shows without a daemon) gives the rows `collect` gives from every file
parsed, after an edit in the same second at the same size, an added, removed or replaced file,
a signature added or removed; it takes an unchanged file's row from the snapshot; a credential
is never written to it; a corrupt or foreign one is ignored and written again.

The list snapshot (routines/query/listsnap.py) in front of it: the last `list`'s rows whole,
given again while no input changed: a file, config.toml, the ledger, the code and zone data,
the clock past a next run or the day's end; never kept when a row checks more than those.

The snapshots' "now" is stepped past RACY_NS as in tests/routines/spec/test_registry_snapshot.py.
"""

from __future__ import annotations

import json
import os
import time
import zoneinfo
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from routines.query import RoutineRow, listsnap, rowsnap
from routines.spec import registry, snapshot
from routines.spec.paths import Paths, paths
from routines.store import write_atomic
from supervisor.overview import collect, list_rows
from tests.helpers import COMMAND, write
from tests.routines.spec.test_registry_snapshot import CLOCK, described, settle


@pytest.fixture(autouse=True)
def stepped_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    CLOCK.held = None
    monkeypatch.setattr(registry, "time", CLOCK)
    monkeypatch.setattr(rowsnap, "time", CLOCK)
    monkeypatch.setattr(listsnap, "time", CLOCK)


@pytest.fixture
def p(vinos_env: Path) -> Paths:
    return paths()


def full(p: Paths, now: datetime) -> list[object]:
    """The rows from every file parsed anew: no snapshot of any kind."""
    for name in (snapshot.FILE_NAME, rowsnap.FILE_NAME, listsnap.FILE_NAME):
        (p.state_dir / name).unlink(missing_ok=True)
    return list(collect(now))


def same_as_full(p: Paths) -> None:
    now = datetime.now(UTC)
    got = list_rows(now)
    kept = {n: (p.state_dir / n).read_bytes() for n in (rowsnap.FILE_NAME, listsnap.FILE_NAME)
            if (p.state_dir / n).exists()}  # fmt: skip
    assert got == full(p, now)
    for name, data in kept.items():
        (p.state_dir / name).write_bytes(data)  # as it was after `list_rows`


def kept_file(p: Paths) -> dict[str, Any]:
    file: dict[str, Any] = json.loads((p.state_dir / rowsnap.FILE_NAME).read_bytes())
    return file


def tamper(p: Paths, name: str, description: str) -> None:
    """Rewrite the row kept for `name` (its key unchanged): rows that show `description`
    took it from the snapshot. (The list snapshot, whole rows in front of it, is dropped.)"""
    (p.state_dir / listsnap.FILE_NAME).unlink(missing_ok=True)
    file = kept_file(p)
    fields = file["kept"][str(p.routines_dir / f"{name}.toml")][1]  # the part
    fields[RoutineRow._fields.index("description")] = description
    write_atomic(p.state_dir / rowsnap.FILE_NAME, json.dumps(file).encode())


def desc(name: str) -> str:
    return next(r.description for r in list_rows() if r.name == name)


def test_an_unchanged_files_row_comes_from_the_snapshot_and_equals_the_full_one(p: Paths) -> None:
    for i in range(3):
        write(p.routines_dir, f"r{i}", described(f"number {i}"))
    settle()
    same_as_full(p)
    same_as_full(p)
    tamper(p, "r1", "from the snapshot")
    assert desc("r1") == "from the snapshot"
    assert desc("r0") == "number 0"


def test_an_edit_in_the_same_second_at_the_same_size_is_read_again(p: Paths) -> None:
    path = write(p.routines_dir, "a", described("first"))
    settle()
    list_rows()
    tamper(p, "a", "stale row")
    st = path.stat()
    path.write_text(described("other"))  # the same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime
    assert path.stat().st_size == st.st_size
    assert desc("a") == "other"
    same_as_full(p)


def test_a_file_not_settled_is_read_each_time_and_not_kept(p: Paths) -> None:
    write(p.routines_dir, "old", described("old"))
    settle()
    write(p.routines_dir, "new", described("new"))  # after `settle`: within RACY_NS
    same_as_full(p)
    assert str(p.routines_dir / "new.toml") not in kept_file(p)["kept"]


def test_an_added_removed_or_replaced_file_shows_as_it_is(p: Paths) -> None:
    write(p.routines_dir, "a", described("a"))
    gone = write(p.routines_dir, "b", described("b"))
    settle()
    list_rows()
    gone.unlink()
    write(p.routines_dir, "c", described("c"))
    other = write(p.routines_dir.parent, "elsewhere", described("replaced"))
    os.replace(other, p.routines_dir / "a.toml")  # another inode, an old ctime
    settle()
    assert [r.name for r in list_rows()] == ["a", "c"]
    assert desc("a") == "replaced"
    same_as_full(p)
    assert set(kept_file(p)["kept"]) == {str(p.routines_dir / f"{n}.toml") for n in "ac"}


def test_a_signature_added_or_removed_is_seen_and_a_signed_file_never_kept(p: Paths) -> None:
    text = described("signed").replace("[routine]\n", '[routine]\npermissions = "everything"\n')
    path = write(p.routines_dir, "a", described("plain"))
    write(p.routines_dir, "b", described("b"))
    settle()
    list_rows()
    sig = path.with_name("a.toml.sig")
    sig.write_text("looked for by the loader\n")
    same_as_full(p)  # the key says a signature is beside it: read again, then not kept
    assert str(path) not in kept_file(p)["kept"]
    path.write_text(text)
    settle()
    same_as_full(p)
    sig.unlink()
    row = next(r for r in list_rows() if r.name == "a")
    assert not row.valid and "a.toml.sig is missing" in row.errors[0]
    same_as_full(p)


def test_a_credential_is_never_written_to_the_row_snapshot(p: Paths) -> None:
    _ledger(p)  # settled: a list snapshot could be written, but for the credential
    token = "T0K3N-in-the-url"
    hook = COMMAND + f'[output]\ntype = "webhook"\nurl = "https://hooks.example/{token}"\n'
    write(p.routines_dir, "hook", hook)
    write(p.routines_dir, "plain", described("kept"))
    settle()
    same_as_full(p)
    same_as_full(p)
    raw = (p.state_dir / rowsnap.FILE_NAME).read_bytes()
    assert token.encode() not in raw
    assert str(p.routines_dir / "plain.toml").encode() in raw
    assert str(p.routines_dir / "hook.toml").encode() not in raw
    assert not (p.state_dir / listsnap.FILE_NAME).exists()  # whole rows neither
    (p.routines_dir / "hook.toml").unlink()
    settle()
    same_as_full(p)
    assert (p.state_dir / listsnap.FILE_NAME).exists()
    # An invalid file's errors say what was found in it: no whole rows are kept with one.
    write(p.routines_dir, "bad", hook.replace("https://", "ftp://"))
    settle()
    rows = {r.name: r for r in list_rows()}
    assert not rows["bad"].valid
    assert token.encode() not in (p.state_dir / listsnap.FILE_NAME).read_bytes()


@pytest.mark.parametrize("spoil", [b"\x00garbage", b"", b'{"format": 1, "kept": []}', "foreign"])
def test_a_corrupt_or_foreign_row_snapshot_is_ignored_and_written_again(
    p: Paths, spoil: bytes | str
) -> None:
    write(p.routines_dir, "a", described("a"))
    settle()
    list_rows()
    file = p.state_dir / rowsnap.FILE_NAME
    if spoil == "foreign":
        tamper(p, "a", "a foreign row")
        foreign = kept_file(p)
        foreign["format"] = rowsnap.FORMAT + 1
        write_atomic(file, json.dumps(foreign).encode())
    else:
        assert isinstance(spoil, bytes)
        write_atomic(file, spoil)
    same_as_full(p)
    assert desc("a") == "a"
    assert kept_file(p)["format"] == rowsnap.FORMAT


def test_a_kept_next_run_is_used_only_before_it_comes(p: Paths) -> None:
    text = described("a").replace("[routine]\n", "[routine]\nenabled = true\n")
    write(p.routines_dir, "a", text)  # daily at 06:00 (tests.helpers COMMAND)
    settle()
    now = datetime.now(UTC)
    first = list_rows(now)
    later = datetime.fromtimestamp(time.time() + 2 * 86400, UTC)
    assert list_rows(later) == full(p, later)
    assert first[0].next_run is not None
    assert first[0].next_run != list_rows(later)[0].next_run


def test_an_upgraded_time_zone_database_drops_every_kept_row(
    p: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept next run was computed with the zone rules of then: a tzdata upgrade (which
    rewrites tzdata.zi) may move it, so the whole snapshot is read anew."""
    zones = tmp_path / "zoneinfo"
    zones.mkdir()
    (zones / "tzdata.zi").write_text("# version 2026a\n")
    monkeypatch.setattr(zoneinfo, "TZPATH", (str(zones),))
    write(p.routines_dir, "a", described("first"))
    settle()
    list_rows()
    tamper(p, "a", "kept before the upgrade")
    assert desc("a") == "kept before the upgrade"
    (zones / "tzdata.zi").unlink()
    (zones / "tzdata.zi").write_text("# version 2026b, Mars/Olympus moved\n")  # a new file
    assert desc("a") == "first"
    same_as_full(p)


def test_an_override_of_a_kept_routine_binds_to_its_identity(p: Paths) -> None:
    """`enable`/`disable` bind to the file's identity (a hash of its bytes): a kept row says
    the override as the full rows do, with the next run or without it, and an edit of the file
    ends it there too."""
    from routines.ledger import Ledger
    from routines.spec.registry import scan
    from supervisor.engine.toggle import set_enabled

    on = described("on").replace("[routine]\n", "[routine]\nenabled = true\n")
    write(p.routines_dir, "off", described("off"))
    path = write(p.routines_dir, "on", on)
    settle()
    list_rows()
    now = datetime.now(UTC)
    reg = scan(p)
    with Ledger(p.ledger) as led:
        for name, flip in (("off", True), ("on", False)):
            entry = reg.get(name)
            assert entry is not None and entry.routine is not None
            set_enabled(led, entry.routine, flip, now)
    rows = {r.name: r for r in list_rows(now)}
    assert rows["off"].enabled and rows["off"].next_run is not None
    assert not rows["on"].enabled and rows["on"].next_run is None
    same_as_full(p)
    path.write_text(on.replace('"on"', '"edited"'))  # a new identity: the override ends
    settle()
    assert next(r for r in list_rows() if r.name == "on").enabled
    same_as_full(p)


def _ledger(p: Paths) -> None:
    """The ledger made before `settle` (a list makes it otherwise: then too fresh to keep)."""
    from routines.ledger import Ledger

    with Ledger(p.ledger):
        pass


def tamper_list(p: Paths, name: str, description: str) -> None:
    """Rewrite `name`'s description in the kept list (its inputs unchanged): rows that show
    `description` are the kept list's."""
    file = json.loads((p.state_dir / listsnap.FILE_NAME).read_bytes())
    rows = file["rows"]
    column = rows.setdefault("description", [""] * len(rows["name"]))
    column[rows["name"].index(name)] = description
    write_atomic(p.state_dir / listsnap.FILE_NAME, json.dumps(file).encode())


def test_a_repeat_list_is_the_kept_list_until_an_input_moves(p: Paths) -> None:
    """While the files, config.toml and the ledger are as they were, a `list` is the last
    one's rows; a ledger write, an edit in the same second at the same size, an added file,
    config.toml or a signature, each gives the full rows again."""
    from routines.ledger import Ledger
    from routines.runs import RunEnd, RunStatus, Trigger

    on = described("a").replace("[routine]\n", "[routine]\nenabled = true\n")
    path = write(p.routines_dir, "a", on)
    write(p.routines_dir, "b", described("b"))
    _ledger(p)
    settle()
    same_as_full(p)
    assert (p.state_dir / listsnap.FILE_NAME).exists()
    tamper_list(p, "b", "from the kept list")
    assert desc("b") == "from the kept list"

    def moved() -> None:
        settle()
        same_as_full(p)  # the full rows, and kept again
        tamper_list(p, "b", "from the kept list")
        assert desc("b") == "from the kept list"

    now = datetime.now(UTC)
    with Ledger(p.ledger) as led:  # another process's run
        led.record_run("a", run_id="r1", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=now)
        led.finish_run("r1", RunEnd(RunStatus.OK, dollars=0.25), now=now)
    assert desc("b") == "b"
    assert next(r for r in list_rows() if r.name == "a").today_dollars == 0.25
    moved()
    st = path.stat()
    path.write_text(on.replace('"a"', '"z"'))  # the same size and mtime
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert desc("a") == "z" and desc("b") == "b"
    moved()
    write(p.routines_dir, "c", described("c"))
    assert desc("b") == "b"
    moved()
    p.config_file.write_text("max_concurrent = 3\n")
    assert desc("b") == "b"
    moved()
    path.with_name("b.toml.sig").write_text("looked for by the loader\n")
    assert desc("b") == "b"
    settle()
    same_as_full(p)
    tamper_list(p, "b", "from the kept list")
    assert desc("b") == "b"  # a signature's row is not kept


def test_the_kept_list_ends_at_a_next_run_or_the_days_end_and_not_before_it_was_made(
    p: Paths,
) -> None:
    on = described("a").replace("[routine]\n", "[routine]\nenabled = true\n")
    write(p.routines_dir, "a", on)  # daily at 06:00 UTC (tests.helpers COMMAND)
    _ledger(p)
    settle()
    now = datetime(2026, 12, 3, 5, 0, tzinfo=UTC)
    first = list_rows(now)
    assert first[0].next_run == datetime(2026, 12, 3, 6, 0, tzinfo=UTC)
    kept = json.loads((p.state_dir / listsnap.FILE_NAME).read_bytes())
    assert kept["until"] == "2026-12-03T06:00:00+00:00"
    tamper_list(p, "a", "kept")
    assert list_rows(now.replace(minute=59))[0].description == "kept"
    assert list_rows(now.replace(hour=6)) == full(p, now.replace(hour=6))
    late = datetime(2026, 12, 3, 23, 0, tzinfo=UTC)
    list_rows(late)  # the next run is tomorrow's: kept until the day's end, for today's cost
    assert json.loads((p.state_dir / listsnap.FILE_NAME).read_bytes())["until"] == (
        "2026-12-04T00:00:00+00:00"
    )
    tamper_list(p, "a", "kept")
    assert list_rows(late.replace(hour=4, day=4)) == full(p, late.replace(hour=4, day=4))
    list_rows(late)
    tamper_list(p, "a", "kept")
    assert list_rows(late.replace(hour=22))[0].description == "a"  # a clock set back


def test_a_list_that_checks_a_key_or_is_not_settled_is_not_kept(p: Paths) -> None:
    """An `auto` routine that can escalate (its row says whether its premium key is there),
    a ledger or a file written a moment ago: the rows are built each time."""
    from tests.helpers import AGENT

    write(p.routines_dir, "a", described("a"))
    settle()
    same_as_full(p)  # the ledger made by this list: not settled
    assert not (p.state_dir / listsnap.FILE_NAME).exists()
    settle()
    same_as_full(p)
    assert (p.state_dir / listsnap.FILE_NAME).exists()
    write(p.routines_dir, "new", described("new"))  # after `settle`: within RACY_NS
    list_rows()
    tamper_list(p, "a", "kept")  # the list before "new": not its inputs, nor rewritten
    assert desc("a") == "a"
    write(p.routines_dir, "auto", "[routine]\nenabled = true\n" + AGENT)
    settle()
    (p.state_dir / listsnap.FILE_NAME).unlink()
    same_as_full(p)
    assert not (p.state_dir / listsnap.FILE_NAME).exists()


def test_an_upgraded_time_zone_database_drops_the_kept_list(
    p: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zones = tmp_path / "zoneinfo"
    zones.mkdir()
    (zones / "tzdata.zi").write_text("# version 2026a\n")
    monkeypatch.setattr(zoneinfo, "TZPATH", (str(zones),))
    write(p.routines_dir, "a", described("first"))
    _ledger(p)
    settle()
    list_rows()
    tamper_list(p, "a", "kept before the upgrade")
    assert desc("a") == "kept before the upgrade"
    (zones / "tzdata.zi").unlink()
    (zones / "tzdata.zi").write_text("# version 2026b, Mars/Olympus moved\n")  # a new file
    assert desc("a") == "first"


def test_a_fleet_turned_on_by_its_variable_never_gets_the_kept_list(
    p: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VINOS_FLEET_DATABASE turns the fleet on by itself (routines/spec/config.py `_fleet`),
    config.toml unchanged: the next `list` is the fleet's (here: its database, which is not
    there, is tried), never the one machine's rows kept before."""
    from routines.ledger import LedgerUnavailable

    write(p.routines_dir, "a", described("a"))
    _ledger(p)
    settle()
    list_rows()
    tamper_list(p, "a", "kept on one machine")
    assert desc("a") == "kept on one machine"
    monkeypatch.setenv("VINOS_FLEET_DATABASE", f"postgresql:///fleet?host={tmp_path}/none")
    with pytest.raises(LedgerUnavailable):
        list_rows()


def test_a_kept_list_with_a_routines_paths_follows_the_never_list(
    p: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A routine's declared `home` is held to the never-list, which the environment moves
    (GNUPGHOME: that folder holds the keys) and config.toml does not say whole: once
    it covers the folder, `list` shows the routine invalid, as the daemon sees it, never the
    valid row kept before."""
    home = tmp_path / "home"
    (home / "proj").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GNUPGHOME", raising=False)
    write(p.routines_dir, "a", described("a") + 'home = ["~/proj"]\n')
    _ledger(p)
    settle()
    same_as_full(p)
    assert next(r for r in list_rows() if r.name == "a").valid
    monkeypatch.setenv("GNUPGHOME", str(home / "proj"))
    settle()
    [row] = list_rows()
    assert not row.valid and "proj" in " ".join(row.errors), row
    same_as_full(p)


def test_the_kept_list_ends_when_a_once_routines_moment_passes(p: Paths) -> None:
    """A `once` routine turned off shows no next run, yet from its moment on its file warns
    that it will not run again (routines.spec.loader `once_past`, by the clock): a list kept
    before that moment is not given after it."""
    from datetime import timedelta

    real = datetime.now(UTC)
    zone = next(  # one where the moment below is still today: the day's end comes after it
        z
        for z in ("UTC", "Pacific/Kiritimati", "America/Los_Angeles", "Asia/Tokyo")
        if (real + timedelta(hours=2)).astimezone(zoneinfo.ZoneInfo(z)).date()
        == real.astimezone(zoneinfo.ZoneInfo(z)).date()
    )
    moment = (real + timedelta(hours=1)).astimezone(zoneinfo.ZoneInfo(zone))
    text = COMMAND.replace(
        'cron = "0 6 * * *"\ntimezone = "UTC"',
        f'once = "{moment:%Y-%m-%d %H:%M}"\ntimezone = "{zone}"',
    )
    write(p.routines_dir, "a", text)
    _ledger(p)
    settle()
    [row] = list_rows(real)
    assert row.next_run is None and not row.warnings  # off, and its moment still ahead
    tamper_list(p, "a", "kept")
    assert list_rows(real + timedelta(minutes=30))[0].description == "kept"
    assert list_rows(real + timedelta(minutes=61))[0].description == ""


def test_a_kept_list_with_a_credential_grant_follows_the_environment(
    p: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A granted credential path is held to the broad containers, which XDG_CONFIG_HOME moves,
    and resolved through its links: once the grant names a whole config home, `list` shows
    the routine invalid, as a fresh parse does, never the valid row kept before."""
    home = tmp_path / "home"
    (home / "cfg").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    grant = '\n[[command.credentials]]\npath = "~/cfg"\nhosts = ["a.example"]\n'
    write(p.routines_dir, "a", described("a") + grant)
    _ledger(p)
    settle()
    same_as_full(p)
    assert next(r for r in list_rows() if r.name == "a").valid
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "cfg"))
    settle()
    [row] = list_rows()
    assert not row.valid and "cfg" in " ".join(row.errors), row
    same_as_full(p)
