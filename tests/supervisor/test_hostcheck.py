"""`status`'s check of the Anthropic key against the running daemon: a key only in the shell
is not in a systemd service's environment, and `status` says so with the fix (the key file,
which both read). The daemon here is a real process whose /proc/PID/environ is read."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from routines.spec import Routine
from routines.spec.loader import load_file
from routines.spec.paths import paths
from supervisor.hostcheck import problems

ANTHROPIC_ROUTINE = """
[schedule]
cron = "0 6 * * *"

[agent]
system = "You write the brief."
route = "anthropic"
model = "claude-sonnet-4-5"

[budget]
max_dollars_per_day = 1.0
"""
DEAD = "http://127.0.0.1:9"


@pytest.fixture
def brief(vinos_env: Path) -> Routine:
    path = paths().routines_dir / "brief.toml"
    path.write_text(ANTHROPIC_ROUTINE)
    return load_file(path)


def stand_in_daemon(env: dict[str, str]) -> Iterator[int]:
    """A process started with `env`, as systemd starts the daemon: its pid."""
    proc = subprocess.Popen(["sleep", "60"], env=env)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def daemon_without_key() -> Iterator[int]:
    yield from stand_in_daemon({"PATH": "/usr/bin:/bin"})


@pytest.fixture
def daemon_with_key() -> Iterator[int]:
    yield from stand_in_daemon({"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": "sk-daemon"})


def test_a_key_only_in_the_shell_is_named_as_unseen_by_the_daemon(
    brief: Routine, daemon_without_key: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-in-the-shell")
    assert not paths().api_key_file.exists()
    found = problems(paths(), [brief], DEAD, daemon_without_key)
    assert found == [
        "the daemon does not see ANTHROPIC_API_KEY (your shell has it, its environment does "
        f"not): write the key to {paths().api_key_file} (chmod 600), which both read"
    ]
    assert "sk-in-the-shell" not in "".join(found)


def test_no_complaint_when_the_daemon_has_the_key_or_the_file_does(
    brief: Routine, daemon_with_key: int, daemon_without_key: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-in-the-shell")
    assert problems(paths(), [brief], DEAD, daemon_with_key) == []
    key_file = paths().api_key_file
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_text("sk-in-the-file\n")
    os.chmod(key_file, 0o600)
    assert problems(paths(), [brief], DEAD, daemon_without_key) == []


def test_without_a_daemon_the_shells_key_is_enough(
    brief: Routine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-in-the-shell")
    assert problems(paths(), [brief], DEAD, None) == []
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    (line,) = problems(paths(), [brief], DEAD, None)
    assert line.startswith("no Anthropic API key (needed by brief): set ANTHROPIC_API_KEY")
