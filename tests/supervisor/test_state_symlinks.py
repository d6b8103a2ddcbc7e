"""A routine's state dir is writable from its sandbox, so the runtime must never follow a
symlink a shell tool planted there (a memory.md pointing at ~/.ssh/id_rsa would send the key to
the model provider). Real files and symlinks on disk."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ipc import Event, EventKind
from routines.store import open_beneath, read_regular
from supervisor.engine.jobs import read_memory
from supervisor.engine.runlog import RunLog, read_log


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "id_rsa"
    path.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    return path


def test_memory_through_a_symlink_is_not_read(tmp_path: Path, secret: Path) -> None:
    memory = tmp_path / "state" / "r" / "memory.md"
    memory.parent.mkdir(parents=True)
    memory.symlink_to(secret)
    assert read_memory(str(memory)) == ""
    assert read_regular(memory) is None


def test_memory_that_is_a_fifo_does_not_hang(tmp_path: Path) -> None:
    memory = tmp_path / "memory.md"
    os.mkfifo(memory)
    assert read_memory(str(memory)) == ""


def test_memory_keeps_only_its_last_4_kb(tmp_path: Path) -> None:
    memory = tmp_path / "memory.md"
    memory.write_text("old\n" + "x" * 5000 + "\nnewest line\n")
    text = read_memory(str(memory))
    assert len(text.encode()) == 4096
    assert text.endswith("newest line\n")
    assert "old" not in text


def test_run_log_refuses_a_symlinked_runs_dir(tmp_path: Path) -> None:
    state = tmp_path / "state" / "r"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state.mkdir(parents=True)
    (state / "runs").symlink_to(elsewhere, target_is_directory=True)
    log = RunLog(state / "runs" / "run-1.jsonl", base=state)
    log.event(Event(EventKind.LOG, "hello"))
    log.close()
    assert list(elsewhere.iterdir()) == []


def test_run_log_refuses_a_symlinked_log_file(tmp_path: Path, secret: Path) -> None:
    state = tmp_path / "state" / "r"
    (state / "runs").mkdir(parents=True)
    (state / "runs" / "run-1.jsonl").symlink_to(secret)
    log = RunLog(state / "runs" / "run-1.jsonl", base=state)
    log.event(Event(EventKind.LOG, "appended?"))
    log.close()
    assert "appended" not in secret.read_text()


def test_run_log_writes_beneath_its_base(tmp_path: Path) -> None:
    state = tmp_path / "state" / "r"
    log = RunLog(state / "runs" / "run-1.jsonl", base=state)
    log.event(Event(EventKind.LOG, "hello"))
    log.close()
    assert [e["text"] for e in read_log(state / "runs" / "run-1.jsonl")] == ["hello"]


def test_open_beneath_refuses_symlinks_and_escapes(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "real").mkdir(parents=True)
    (base / "link").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(OSError) as exc:
        open_beneath(base, "link/x", os.O_WRONLY | os.O_CREAT)
    assert exc.value.errno in (errno.ELOOP, errno.ENOTDIR)
    for bad in ("../x", "/etc/passwd", ""):
        with pytest.raises(ValueError):
            open_beneath(base, bad, os.O_RDONLY)
    fd = open_beneath(base, "real/new/file", os.O_WRONLY | os.O_CREAT, make_dirs=True)
    os.close(fd)
    assert (base / "real" / "new" / "file").is_file()
