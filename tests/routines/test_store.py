"""The state store: atomic writes (no temp file left, the old content survives a failed write,
including a write cut off half way by a real file-size limit) and output delivery by rename."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from routines.store import deliver_output, read_json, write_atomic, write_json_atomic

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def d(tmp_path: Path) -> Path:
    """An empty directory of the test's own (tmp_path also holds conftest's VINOS dirs)."""
    out = tmp_path / "d"
    out.mkdir()
    return out


def test_write_atomic_creates_the_file_and_leaves_no_temp_file(d: Path) -> None:
    target = d / "state" / "day-brief" / "last-run.json"
    write_atomic(target, b"hello\n")
    assert target.read_bytes() == b"hello\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(target.parent) == ["last-run.json"]


def test_write_atomic_replaces_and_sets_the_mode(d: Path) -> None:
    target = d / "memory.md"
    target.write_bytes(b"old")
    inode = target.stat().st_ino
    write_atomic(target, b"new content", mode=0o600)
    assert target.read_bytes() == b"new content"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.stat().st_ino != inode  # a new file renamed over the old, not rewritten
    assert os.listdir(d) == ["memory.md"]


def test_a_failing_write_keeps_the_old_content_and_no_temp_file(d: Path) -> None:
    target = d / "last-run.json"
    target.write_bytes(b'{"status": "ok"}\n')
    with pytest.raises(TypeError):
        write_atomic(target, "not bytes")  # type: ignore[arg-type]  # f.write() raises
    assert target.read_bytes() == b'{"status": "ok"}\n'
    assert os.listdir(d) == ["last-run.json"]


def test_a_write_cut_off_half_way_keeps_the_old_content(d: Path) -> None:
    # A real partial write: a child process whose file-size limit (RLIMIT_FSIZE) stops the
    # write after 64 KiB with EFBIG, as a full disk would.
    target = d / "2024-06-01-0600.md"
    target.write_bytes(b"the old brief\n")
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        from pathlib import Path
        from routines.store import write_atomic
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        try:
            write_atomic(Path({str(target)!r}), b"x" * 1_000_000)
        except OSError as exc:
            print(exc.errno)
            sys.exit(0)
        sys.exit("the write did not fail")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "27"  # EFBIG
    assert target.read_bytes() == b"the old brief\n"
    assert os.listdir(d) == ["2024-06-01-0600.md"]


def test_write_into_a_read_only_directory_fails_and_changes_nothing(
    d: Path, not_root: None
) -> None:
    target = d / "last-run.json"
    target.write_bytes(b"old")
    d.chmod(0o555)
    try:
        with pytest.raises(PermissionError):
            write_atomic(target, b"new")
    finally:
        d.chmod(0o755)
    assert target.read_bytes() == b"old"
    assert os.listdir(d) == ["last-run.json"]


def test_json_round_trip_and_unreadable_json(d: Path) -> None:
    target = d / "last-run.json"
    value = {"status": "ok", "dollars": 0.0125, "tools_used": ["run_shell"], "outcome": None}
    write_json_atomic(target, value)
    assert read_json(target) == value
    assert target.read_bytes().endswith(b"}\n")
    assert read_json(d / "missing.json") is None
    target.write_bytes(b'{"status": "o')  # a torn file from some other writer
    assert read_json(target) is None


def test_deliver_output_moves_the_file_and_names_collisions(d: Path) -> None:
    state = d / "state" / "day-brief"
    delivered = []
    for i in range(4):
        scratch = d / "scratch" / f"run-{i}" / "2024-06-01-0600.md"
        scratch.parent.mkdir(parents=True)
        scratch.write_text(f"brief {i}\n")
        delivered.append(deliver_output(scratch, state))
        assert not scratch.exists()
    assert [p.name for p in delivered] == [
        "2024-06-01-0600.md",
        "2024-06-01-0600-2.md",
        "2024-06-01-0600-3.md",
        "2024-06-01-0600-4.md",
    ]
    assert [p.read_text() for p in delivered] == [f"brief {i}\n" for i in range(4)]
    assert sorted(os.listdir(state)) == sorted(p.name for p in delivered)


def test_deliver_output_never_overwrites_an_existing_file(d: Path) -> None:
    state = d / "state"
    state.mkdir()
    (state / "report.md").write_text("keep me")
    (state / "report-2.md").write_text("and me")
    scratch = d / "report.md"
    scratch.write_text("new")
    assert deliver_output(scratch, state) == state / "report-3.md"
    assert (state / "report.md").read_text() == "keep me"
    assert (state / "report-2.md").read_text() == "and me"
    assert (state / "report-3.md").read_text() == "new"


def test_deliver_output_refuses_a_symlinked_output(d: Path) -> None:
    # A shell tool can write in the scratch dir: a symlink there must not hard-link the file it
    # points to (a secret the sandbox cannot see) into the state dir, which later runs can read.
    secret = d / "home" / ".ssh" / "id_ed25519"
    secret.parent.mkdir(parents=True)
    secret.write_text("PRIVATE KEY")
    scratch = d / "scratch" / "2024-06-01-0600.md"
    scratch.parent.mkdir()
    scratch.symlink_to(secret)
    state = d / "state"
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        deliver_output(scratch, state)
    assert os.listdir(state) == []
    assert secret.stat().st_nlink == 1
