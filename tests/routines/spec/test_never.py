"""The never-list (routines/spec/never.py): what `home = [...]` and `read:` globs can never reach,
and `vinos-routine validate` refusing them, naming the file, the key and the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from routines.spec.checks import RoutineInvalid
from routines.spec.loader import load_file
from routines.spec.never import glob_reaches, home_problem, never_paths, read_problem
from routines.spec.paths import paths

REPO = Path(__file__).resolve().parents[3]
HOME = "/home/ana"
NEVER = never_paths(HOME, f"{HOME}/.vinos")
OWN = (f"{HOME}/.vinos/routines/workspace/r1",)

ROUTINE = """\
[routine]
kind = "agent"
[schedule]
cron = "0 6 * * *"
[agent]
route = "ollama"
system = "x"
tools = {tools}
home = {home}
"""


@pytest.mark.parametrize(
    "glob",
    [
        "~/.ssh/*",
        "~/.ssh/id_rsa",
        "~/.vinos/secrets/*",
        "~/.vinos/routines/*.toml",  # other routines' files: webhook tokens
        "~/.*/*",
        "~/.config/*/Cookies",  # ~/.config/chromium
        "~/**/*.md",  # ~/snap
        "/home/ana/.aws/credentials",
        "/home/*/.netrc",
        "/**",
        "~/.local/share/fish/fish_history",
    ],
)
def test_globs_that_reach_a_never_path_are_refused(glob: str) -> None:
    problem = read_problem(glob, HOME, NEVER, OWN)
    assert problem is not None and "never-list" in problem


@pytest.mark.parametrize(
    "glob",
    [
        "~/notes/*.md",
        "~/Reading/**/*.md",
        "~/notes/*.txt",
        "~/notes/*",  # a wildcard never matches a leading dot: not ~/notes/.ssh
        "~/.config/myapp/settings.json",
        "~/.bashrc",  # a literal file: its folder is not its root
        "~/.vinos/routines/workspace/r1/*.json",  # its own workspace
        "/etc/hostname",
    ],
)
def test_globs_that_stay_clear_are_allowed(glob: str) -> None:
    assert read_problem(glob, HOME, NEVER, OWN) is None


def test_another_routines_workspace_is_refused() -> None:
    assert read_problem("~/.vinos/routines/workspace/r2/*", HOME, NEVER, OWN) is not None
    assert read_problem("~/.vinos/routines/workspace/*/x", HOME, NEVER, OWN) is not None


def test_double_star_does_not_reach_into_hidden_dirs() -> None:
    assert not glob_reaches(("home", "ana", "**", "*.md"), ("home", "ana", ".ssh"))
    assert glob_reaches(("home", "ana", "**", "*.md"), ("home", "ana", "snap"))
    assert glob_reaches(("home", "ana", ".*"), ("home", "ana", ".netrc"))
    assert not glob_reaches(("home", "ana", "*"), ("home", "ana", ".netrc"))


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("~/.ssh", "never-list (~/.ssh: SSH keys)"),
        ("~/.ssh/config", "never-list (~/.ssh: SSH keys)"),
        ("~/.vinos/routines", "never-list (~/.vinos: vinos-routine's own secrets and state)"),
        ("~/.docker/config.json", "never-list (~/.docker: Docker registry logins)"),
        ("~/.1password", "never-list (~/.1password: 1Password agent and data)"),
        ("~", "all of ~ cannot be shown"),
        ("~/", "all of ~ cannot be shown"),
        ("/etc", 'starting with "~/"'),
        ("~/a/../.ssh", ". and .."),
    ],
)
def test_home_entries_on_the_never_list_are_refused(entry: str, why: str) -> None:
    problem = home_problem(entry, HOME, NEVER)
    assert problem is not None and why in problem


def test_home_entries_off_the_list_are_allowed() -> None:
    for entry in ("~/.config/myapp", "~/notes", "~/.cargo", "~/.gitconfig", "~/.local/bin"):
        assert home_problem(entry, HOME, NEVER) is None


def test_config_extends_the_list_and_cannot_hide_everything() -> None:
    extended = never_paths(HOME, f"{HOME}/.vinos", ("~/.config/hub", "/srv/keys"))
    assert f"{HOME}/.config/hub" in extended and "/srv/keys" in extended
    for bad in ("~", "/", "relative"):
        with pytest.raises(ValueError):
            never_paths(HOME, f"{HOME}/.vinos", (bad,))


def test_a_link_into_the_list_is_followed_to_its_target(tmp_path: Path) -> None:
    home = str(tmp_path)
    (tmp_path / "dotfiles/ssh").mkdir(parents=True)
    (tmp_path / ".ssh").symlink_to(tmp_path / "dotfiles/ssh")
    (tmp_path / "notes").symlink_to(tmp_path / "dotfiles/ssh")
    never = never_paths(home, home + "/.vinos")
    assert f"{home}/dotfiles/ssh" in never
    problem = home_problem("~/notes", home, never)
    assert problem is not None and "never-list" in problem


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "validate", str(path)],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_validate_refuses_secrets_in_read_globs_and_home(vinos_env: Path) -> None:
    path = paths().routines_dir / "greedy.toml"
    path.write_text(
        ROUTINE.format(
            tools='["read:~/notes/*.md", "read:~/.ssh/*", "read:~/.vinos/secrets/*"]',
            home='["~/.config/gh", "~/.ssh"]',
        )
    )
    done = _validate(path)
    assert done.returncode == 1
    grant = (
        "no routine may see it; a command that needs it takes it as a credential "
        "([[agent.credentials]] or [[command.credentials]], bound to hosts)"
    )
    assert done.stdout.splitlines() == [
        f'{path}: [agent].home[0]: "~/.config/gh" is on the never-list (~/.config/gh: GitHub '
        f"CLI login): {grant}",
        f'{path}: [agent].home[1]: "~/.ssh" is on the never-list (~/.ssh: SSH keys): {grant}',
        f'{path}: [agent].tools[1]: "~/.ssh/*" can reach ~/.ssh (SSH keys), which is on the '
        "never-list: no routine may read it",
        f'{path}: [agent].tools[2]: "~/.vinos/secrets/*" can reach ~/.vinos (vinos-routine\'s '
        "own secrets and state), which is on the never-list: no routine may read it",
    ]


def test_vinos_home_elsewhere_is_on_the_list_too(vinos_env: Path) -> None:
    """Tests (and some users) move VINOS_HOME out of ~/.vinos: it stays unreadable."""
    path = paths().routines_dir / "peek.toml"
    path.write_text(ROUTINE.format(tools=f'["read:{vinos_env}/secrets/*"]', home="[]"))
    with pytest.raises(RoutineInvalid, match="never-list"):
        load_file(path)


def test_command_routines_declare_home_too(vinos_env: Path) -> None:
    path = paths().routines_dir / "cmd.toml"
    path.write_text(
        '[routine]\nkind = "command"\n[schedule]\ncron = "0 6 * * *"\n'
        '[command]\nrun = "ls ~/notes"\nhome = ["~/notes", "~/.gnupg"]\n'
    )
    with pytest.raises(RoutineInvalid, match=r"\[command\].home\[1\]: \"~/.gnupg\""):
        load_file(path)
    path.write_text(path.read_text().replace(', "~/.gnupg"', ""))
    assert load_file(path).home == ("~/notes",)


def test_validate_knows_the_config_additions(vinos_env: Path) -> None:
    p = paths()
    p.config_file.write_text('[sandbox]\nnever = ["~/.config/mytool"]\n')
    path = p.routines_dir / "hubby.toml"
    path.write_text(
        ROUTINE.format(tools='["read:~/.config/mytool/*"]', home='["~/.config/mytool"]')
    )
    done = _validate(path)
    assert done.returncode == 1
    assert f"{path}: [agent].home[0]: " in done.stdout
    assert f"{path}: [agent].tools[0]: " in done.stdout
    assert done.stdout.count("(config.toml [sandbox].never)") == 2
    # Each refusal says what the place is: one the user added.
    assert done.stdout.count("(~/.config/mytool: added by config.toml [sandbox].never)") == 1
    assert done.stdout.count("~/.config/mytool (added by config.toml [sandbox].never)") == 1
