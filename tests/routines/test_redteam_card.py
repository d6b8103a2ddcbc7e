"""Red team, the capability card of a grant: a routine author grants a folder that is not
itself in the credential catalog but holds entries of it (`~/.config/git` holds git's stored
HTTPS passwords, `~/.cargo` the crates.io token). The whole folder is bound, the catalog's
entries below it included, while the card named no credential at all: the user agreeing to
"~/.config/git → only to github.com" was not told what goes there. A grant of an ordinary
folder is now masked as a `home` entry is (tests/sandbox/test_escape_creds.py), so the card
says which credentials in it stay hidden; and it judges the resolved path, so a link to a
credential store, or a folder a store is linked into, is carded as what it really is."""

from __future__ import annotations

from pathlib import Path

import pytest

from routines.spec import Routine
from supervisor.cli.commands.capabilities import card
from tests.routines.spec.test_credentials import COMMAND, _load


@pytest.mark.parametrize(
    ("path", "holds"),
    [
        ("~/.config/git", "git's stored HTTPS passwords"),
        ("~/.cargo", "crates.io token (cargo)"),
        ("~/.config//git/", "git's stored HTTPS passwords"),
        ("~/.terraform.d", "Terraform Cloud token"),
    ],
)
def test_a_grant_of_a_folder_holding_catalog_entries_says_they_stay_hidden(
    vinos_env: Path, path: str, holds: str
) -> None:
    extra = f'[[command.credentials]]\npath = "{path}"\nhosts = ["github.com"]'
    routine = _load(vinos_env, COMMAND.format(extra=extra))
    assert isinstance(routine, Routine)
    [line] = [line for line in card(routine) if line.label == "credentials"]
    assert line.text.startswith(f"{path} (hidden in it: {holds}) → its calls can reach: ")


def test_the_card_of_a_catalog_entry_and_of_a_plain_folder_are_unchanged(vinos_env: Path) -> None:
    extra = (
        '[[command.credentials]]\npath = "~/.config/gh"\nhosts = ["github.com"]\n'
        '[[command.credentials]]\npath = "~/.config/myapp"\nhosts = ["myapp.example"]'
    )
    routine = _load(vinos_env, COMMAND.format(extra=extra))
    assert isinstance(routine, Routine)
    texts = [line.text.partition(" → ")[0] for line in card(routine) if " → " in line.text]
    assert texts == ["~/.config/gh (GitHub CLI login)", "~/.config/myapp"]


def test_the_card_judges_the_resolved_path_of_a_grant(
    vinos_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~/gh-login` links to ~/.config/gh, and ~/.config/gh links into ~/dotfiles: the card
    named neither, so a gh login went out as an unnamed folder."""
    home = tmp_path / "home"
    (home / "dotfiles/gh").mkdir(parents=True)
    (home / ".config").mkdir()
    (home / ".config/gh").symlink_to(home / "dotfiles/gh")
    (home / "gh-login").symlink_to(home / ".config/gh")
    monkeypatch.setenv("HOME", str(home))
    extra = (
        '[[command.credentials]]\npath = "~/gh-login"\nhosts = ["github.com"]\n'
        '[[command.credentials]]\npath = "~/dotfiles"\nhosts = ["example.org"]'
    )
    routine = _load(vinos_env, COMMAND.format(extra=extra))
    assert isinstance(routine, Routine)
    texts = [line.text.partition(" → ")[0] for line in card(routine) if " → " in line.text]
    assert texts == ["~/gh-login (GitHub CLI login)", "~/dotfiles (hidden in it: GitHub CLI login)"]
