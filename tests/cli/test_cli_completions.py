"""Shell completions: the committed files are what scripts/gen-completions.py makes from the
parser today, and each loads and completes in its real shell (bash, zsh, fish)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.cli_helpers import REPO, Cli

COMPLETIONS = REPO / "packaging" / "completions"
COMMANDS = {
    "list",
    "status",
    "enable",
    "disable",
    "run",
    "logs",
    "history",
    "cost",
    "brief",
    "create",
    "install",
    "edit",
    "remove",
    "validate",
    "reload",
    "daemon",
}


def shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed; it is needed to check its completion script: "
            f"apt-get install {name} (or pacman -S {name}); scripts/system-deps.sh installs it"
        )
    return path


@pytest.fixture
def routines(cli: Cli) -> Cli:
    cli.agent("day-brief", system=True)
    cli.agent("daily-notes")
    cli.agent("weekly")
    (cli.routines / "config.toml").write_text("max_concurrent = 2\n")
    return cli


def test_the_committed_completions_are_current() -> None:
    res = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen-completions.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr


def test_generating_writes_the_same_files(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen-completions.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for name in ("vinos-routine.bash", "_vinos-routine", "vinos-routine.fish"):
        assert (tmp_path / name).read_text() == (COMPLETIONS / name).read_text()


def bash_complete(cli: Cli, *words: str) -> list[str]:
    script = (
        f"source {COMPLETIONS / 'vinos-routine.bash'} && complete -p vinos-routine >&2 && "
        'COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _vinos_routine; '
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    res = subprocess.run(
        [shell("bash"), "--norc", "--noprofile", "-c", script, "bash", *words],
        capture_output=True,
        text=True,
        env=cli.environ(),
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert "complete -F _vinos_routine vinos-routine" in res.stderr, "the completion loads"
    return [line for line in res.stdout.splitlines() if line]


def test_bash(routines: Cli) -> None:
    assert set(bash_complete(routines, "vinos-routine", "")) >= COMMANDS
    assert bash_complete(routines, "vinos-routine", "ed") == ["edit"]
    assert bash_complete(routines, "vinos-routine", "enable", "da") == ["daily-notes", "day-brief"]
    assert bash_complete(routines, "vinos-routine", "run", "") == [
        "daily-notes",
        "day-brief",
        "weekly",
    ], "user and system routines, not config.toml"
    assert bash_complete(routines, "vinos-routine", "create", "new", "--kind", "") == [
        "agent",
        "command",
    ]
    assert bash_complete(routines, "vinos-routine", "create", "x", "--from", "w") == ["weekly"]
    assert bash_complete(routines, "vinos-routine", "create", "") == [], "a new name"
    assert "--waybar" in bash_complete(routines, "vinos-routine", "status", "--")
    assert bash_complete(routines, "vinos-routine", "logs", "--run", "") == []
    assert bash_complete(routines, "vinos-routine", "enable", "weekly", "") == []
    assert "weekly" in bash_complete(routines, "vinos-routine", "history", "-n", "5", "")


def test_zsh(routines: Cli) -> None:
    capture = Path(__file__).with_name("zsh_capture.zsh")

    def complete(line: str) -> list[str]:
        res = subprocess.run(
            [shell("zsh"), "-f", str(capture), str(COMPLETIONS), line],
            capture_output=True,
            text=True,
            env=routines.environ(),
            timeout=60,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        return res.stdout.split()

    res = subprocess.run([shell("zsh"), "-n", str(COMPLETIONS / "_vinos-routine")], check=False)
    assert res.returncode == 0
    assert set(complete("vinos-routine ")) >= COMMANDS
    assert complete("vinos-routine edit da") == ["daily-notes", "day-brief"]
    assert complete("vinos-routine cost --") == [
        "--days",
        "--help",
        "--json",
        "--month",
        "--today",
        "--week",
    ]


def test_fish(routines: Cli) -> None:
    def complete(line: str) -> list[str]:
        res = subprocess.run(
            [
                shell("fish"),
                "--no-config",
                "-c",
                f"source {COMPLETIONS / 'vinos-routine.fish'}; complete -C {line!r}",
            ],
            capture_output=True,
            text=True,
            env=routines.environ(),
            check=False,
        )
        assert res.returncode == 0, res.stderr
        return [line.split("\t")[0] for line in res.stdout.splitlines()]

    assert set(complete("vinos-routine ")) >= COMMANDS
    assert complete("vinos-routine disable da") == ["daily-notes", "day-brief"]
    assert complete("vinos-routine create x --kind ") == ["agent", "command"]
    assert "--unseen" in complete("vinos-routine brief --")
