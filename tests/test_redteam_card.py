"""Red team, the capability card of a grant: a routine author grants a folder that is not
itself in the credential catalog but holds entries of it (`~/.config/git` holds git's stored
HTTPS passwords, `~/.cargo` the crates.io token). The whole folder is bound, the catalog's
entries below it included, while the card named no credential at all: the user agreeing to
"~/.config/git → only to github.com" was not told what goes there."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_credentials import COMMAND, _load

from routines.spec import Routine
from supervisor.cli.commands.capabilities import card


@pytest.mark.parametrize(
    ("path", "holds"),
    [
        ("~/.config/git", "git's stored HTTPS passwords"),
        ("~/.cargo", "crates.io token (cargo)"),
        ("~/.config//git/", "git's stored HTTPS passwords"),
        ("~/.terraform.d", "Terraform Cloud token"),
    ],
)
def test_a_grant_of_a_folder_holding_catalog_entries_says_what_it_holds(
    vinos_env: Path, path: str, holds: str
) -> None:
    extra = f'[[command.credentials]]\npath = "{path}"\nhosts = ["github.com"]'
    routine = _load(vinos_env, COMMAND.format(extra=extra))
    assert isinstance(routine, Routine)
    [line] = [line for line in card(routine) if line.label == "credentials"]
    assert line.text == f"{path} (holds {holds}) → only to github.com"


def test_the_card_of_a_catalog_entry_and_of_a_plain_folder_are_unchanged(vinos_env: Path) -> None:
    extra = (
        '[[command.credentials]]\npath = "~/.config/gh"\nhosts = ["github.com"]\n'
        '[[command.credentials]]\npath = "~/.config/myapp"\nhosts = ["myapp.example"]'
    )
    routine = _load(vinos_env, COMMAND.format(extra=extra))
    assert isinstance(routine, Routine)
    texts = [line.text for line in card(routine) if line.caution and "only to" in line.text]
    assert texts == [
        "~/.config/gh (GitHub CLI login) → only to github.com",
        "~/.config/myapp → only to myapp.example",
    ]
