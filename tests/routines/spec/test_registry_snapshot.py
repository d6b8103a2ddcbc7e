"""The registry's snapshot (routines/spec/snapshot.py) over real directories and a real clock: a
scan without a previous registry takes an unchanged file's parse from it, and parses again a
file that changed (also with its old mtime put back), that is new, or that is not settled yet;
a removed file goes; a corrupt, foreign, linked or exposed snapshot is not used.

Files must be older than RACY_NS for their parse to be kept. The files and their ctimes are the
kernel's; the scan's "now" (registry's `time`) is stepped past the window by `settle` rather
than waited for: RACY_NS is 2 s, and sixteen waits made this module ~37 s of a test worker's
time."""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from pathlib import Path

import msgspec
import pytest

from routines.schedule.tz import machine_timezone
from routines.spec import registry, snapshot
from routines.spec.paths import Paths, paths
from routines.spec.registry import Registry, scan
from routines.store import write_atomic
from tests.helpers import COMMAND, write

MARGIN_NS = 50_000_000  # past a ctime's coarse clock tick (a few ms), both ways


class SteppedClock:
    """The scan's clock: the real one until `settle`, then held RACY_NS past that moment."""

    def __init__(self) -> None:
        self.held: int | None = None

    def time_ns(self) -> int:
        return time.time_ns() if self.held is None else self.held

    def settle(self) -> None:
        # Every file written so far has a ctime at most `before` (the kernel's coarse clock
        # lags the fine one, never leads it); one written after we return, at least
        # before + MARGIN_NS. Held between the two, each is settled or not as after a real wait.
        before = time.time_ns()
        time.sleep(2 * MARGIN_NS / 1e9)
        self.held = before + MARGIN_NS + snapshot.RACY_NS


CLOCK = SteppedClock()


@pytest.fixture(autouse=True)
def scan_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    CLOCK.held = None
    monkeypatch.setattr(registry, "time", CLOCK)


@pytest.fixture
def p(vinos_env: Path) -> Paths:
    return paths()


def settle() -> None:
    """Every file written so far is older than RACY_NS for the scans that follow; every file
    written after is not."""
    CLOCK.settle()


def described(description: str) -> str:
    return f'[routine]\ndescription = "{description}"\n' + COMMAND.removeprefix("[routine]\n")


def fresh(p: Paths) -> Registry:
    """What parsing every file now gives: the scan with no snapshot to take from."""
    (p.state_dir / snapshot.FILE_NAME).unlink(missing_ok=True)
    try:
        return scan(p)
    finally:
        (p.state_dir / snapshot.FILE_NAME).unlink(missing_ok=True)


def tamper(p: Paths, name: str, description: str) -> None:
    """Rewrite the parse the snapshot keeps for `name` (its key unchanged): a scan that shows
    `description` took the parse from the snapshot, not from the file."""
    file = p.state_dir / snapshot.FILE_NAME
    kept = snapshot._decoder().decode(file.read_bytes())
    path = str(p.routines_dir / f"{name}.toml")
    parsed = kept.parsed[path]
    routine = dataclasses.replace(parsed.routine, description=description)
    kept.parsed[path] = snapshot._Parsed(parsed.key, routine)
    encoder = msgspec.msgpack.Encoder(enc_hook=snapshot._enc_hook)
    write_atomic(file, encoder.encode(kept))


def description(reg: Registry, name: str) -> str:
    entry = reg.get(name)
    assert entry is not None and entry.routine is not None
    return entry.routine.description


def test_an_unchanged_file_is_taken_from_the_snapshot_private_to_the_user(p: Paths) -> None:
    for i in range(3):
        write(p.routines_dir, f"r{i}", described(f"number {i}"))
    settle()
    first = scan(p)
    file = p.state_dir / snapshot.FILE_NAME
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(p.state_dir.stat().st_mode) == 0o700
    again = scan(p)
    assert again == first == fresh(p)  # the same entries as parsing every file again

    scan(p)
    tamper(p, "r1", "from the snapshot")
    assert description(scan(p), "r1") == "from the snapshot"
    assert description(scan(p), "r0") == "number 0"


def test_a_webhook_routine_is_never_kept(p: Paths) -> None:
    """A webhook's URL is a credential: its parse stays out of the state dir, settled or not,
    while the routine beside it is kept (it flaked in tests/cli/test_cli_hostile.py, where a
    slow machine let the file settle before `list`)."""
    token = "T0K3N-in-the-url"
    hook = COMMAND + f'[output]\ntype = "webhook"\nurl = "https://hooks.example/{token}"\n'
    write(p.routines_dir, "hook", hook)
    write(p.routines_dir, "plain", described("kept"))
    settle()
    reg = scan(p)
    assert reg.get("hook") is not None and reg.get("plain") is not None
    kept = (p.state_dir / snapshot.FILE_NAME).read_bytes()
    assert token.encode() not in kept
    assert str(p.routines_dir / "plain.toml").encode() in kept
    assert str(p.routines_dir / "hook.toml").encode() not in kept


def test_a_changed_file_is_read_again(p: Paths) -> None:
    write(p.routines_dir, "a", described("before"))
    write(p.routines_dir, "b", described("untouched"))
    settle()
    scan(p)
    write(p.routines_dir, "a", described("after!"))
    settle()  # settled: only its key can tell it changed
    reg = scan(p)
    assert (description(reg, "a"), description(reg, "b")) == ("after!", "untouched")
    assert reg == fresh(p)


def test_an_edit_that_keeps_the_mtime_but_not_the_size_is_read_again(p: Paths) -> None:
    path = write(p.routines_dir, "a", described("short"))
    settle()
    scan(p)
    before = path.stat()
    path.write_text(described("a longer one"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    settle()
    assert description(scan(p), "a") == "a longer one"


def test_a_removed_file_disappears_from_the_registry_and_the_snapshot(p: Paths) -> None:
    write(p.routines_dir, "kept", described("kept"))
    gone = write(p.routines_dir, "gone", described("gone"))
    settle()
    scan(p)
    file = p.state_dir / snapshot.FILE_NAME
    assert str(gone).encode() in file.read_bytes()
    gone.unlink()
    assert scan(p).names() == ["kept"]
    assert str(gone).encode() not in file.read_bytes()


def test_a_new_and_a_settling_file_are_parsed_and_only_a_settled_one_kept(p: Paths) -> None:
    write(p.routines_dir, "old", described("old"))
    settle()
    scan(p)
    new = write(p.routines_dir, "new", described("new"))
    reg = scan(p)
    assert description(reg, "new") == "new"
    file = p.state_dir / snapshot.FILE_NAME
    assert str(new).encode() not in file.read_bytes()  # changed too recently to be trusted
    settle()
    scan(p)
    assert str(new).encode() in file.read_bytes()


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda f: f.write_bytes(b"\x93not msgpack at all"), id="garbage"),
        pytest.param(lambda f: f.write_bytes(f.read_bytes()[:1000]), id="torn"),
        pytest.param(lambda f: f.write_bytes(b""), id="empty"),
        pytest.param(
            lambda f: f.write_bytes(msgspec.msgpack.encode([99, [], None, {}])), id="format"
        ),
    ],
)
def test_a_corrupt_snapshot_is_ignored_and_replaced(p: Paths, spoil: object) -> None:
    write(p.routines_dir, "a", described("the file's"))
    settle()
    scan(p)
    file = p.state_dir / snapshot.FILE_NAME
    spoil(file)  # type: ignore[operator]
    reg = scan(p)
    assert description(reg, "a") == "the file's"
    assert reg == fresh(p)
    scan(p)
    snapshot._decoder().decode(file.read_bytes())  # written anew, whole


def test_a_snapshot_behind_a_link_or_in_an_open_state_dir_is_not_used(
    p: Paths, tmp_path: Path
) -> None:
    write(p.routines_dir, "a", described("the file's"))
    settle()
    scan(p)
    file = p.state_dir / snapshot.FILE_NAME
    tamper(p, "a", "from the snapshot")
    planted = tmp_path / "planted"
    file.rename(planted)
    file.symlink_to(planted)
    assert description(scan(p), "a") == "the file's"  # O_NOFOLLOW: the link is not read
    assert not file.is_symlink()  # and it was replaced, not written through
    assert b"from the snapshot" in planted.read_bytes()

    tamper(p, "a", "from the snapshot")
    p.state_dir.chmod(0o770)  # another may write in it: its snapshot counts for nothing
    try:
        assert description(scan(p), "a") == "the file's"
    finally:
        p.state_dir.chmod(0o700)
    assert description(scan(p), "a") == "from the snapshot"


def test_a_parse_that_read_the_machine_zone_is_not_taken_under_another(
    p: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(p.routines_dir, "a", COMMAND.replace('timezone = "UTC"\n', ""))
    monkeypatch.setenv("TZ", "Europe/Berlin")
    machine_timezone.cache_clear()
    settle()
    reg = scan(p)
    entry = reg.get("a")
    assert entry is not None and entry.routine is not None
    assert entry.routine.schedule.timezone == "Europe/Berlin"
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    machine_timezone.cache_clear()
    entry = scan(p).get("a")
    assert entry is not None and entry.routine is not None
    assert entry.routine.schedule.timezone == "Asia/Tokyo"
    machine_timezone.cache_clear()


def test_a_file_invalid_after_a_signature_goes_is_read_again(p: Paths) -> None:
    """The loader refuses permissions = "everything" without NAME.toml.sig beside the file:
    removing the signature changes no byte of the routine file, only the listing."""
    text = described("signed").replace("[routine]\n", '[routine]\npermissions = "everything"\n')
    path = write(p.routines_dir, "a", text)
    sig = path.with_name("a.toml.sig")
    sig.write_text("not checked by the loader, only looked for\n")
    settle()
    entry = scan(p).get("a")
    assert entry is not None and entry.valid
    sig.unlink()
    entry = scan(p).get("a")
    assert entry is not None and not entry.valid
    assert "a.toml.sig is missing" in str(entry.errors[0])


def test_racy_is_the_last_racy_ns_before_now() -> None:
    now = 10 * snapshot.RACY_NS
    assert snapshot.racy(now, now)
    assert snapshot.racy(now - snapshot.RACY_NS + 1, now)
    assert not snapshot.racy(now - snapshot.RACY_NS, now)


def test_a_parse_that_read_the_never_list_is_not_taken_under_another(
    p: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `home` path is held to the never-list, which the environment moves (GNUPGHOME puts
    ~/.gnupg's place elsewhere): the same file is refused once its folder is on the list."""
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GNUPGHOME", raising=False)
    write(p.routines_dir, "a", COMMAND + 'home = ["~/notes"]\n')
    settle()
    entry = scan(p).get("a")
    assert entry is not None and entry.valid
    monkeypatch.setenv("GNUPGHOME", str(home / "notes"))
    entry = scan(p).get("a")
    assert entry is not None and not entry.valid
    assert "never-list" in str(entry.errors[0])


def test_a_snapshot_written_by_other_code_is_ignored(p: Paths) -> None:
    """An upgrade or an edit of the routines package changes the code's fingerprint: a parse
    by other code (another loader, another Routine) is not taken, even for the same bytes."""
    write(p.routines_dir, "a", described("the file's"))
    settle()
    scan(p)
    tamper(p, "a", "from the snapshot")
    file = p.state_dir / snapshot.FILE_NAME
    kept = snapshot._decoder().decode(file.read_bytes())
    assert kept.context == snapshot._context()
    kept.context = (kept.context[0], "other code", *kept.context[2:])
    write_atomic(file, msgspec.msgpack.Encoder(enc_hook=snapshot._enc_hook).encode(kept))
    assert description(scan(p), "a") == "the file's"
