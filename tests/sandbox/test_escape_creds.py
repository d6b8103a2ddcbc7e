"""Credentials in the real sandbox (bwrap): what a declared folder holds of them stays
masked, and a granted credential is there read-only and nothing else with it."""

from __future__ import annotations

from pathlib import Path

from tests.sandbox.sandbox_testkit import Box


def _plant(box: Box, rel: str, text: str) -> Path:
    path = box.home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_credential_named_files_under_a_declared_folder_are_masked(box: Box) -> None:
    token = f"ghp_{box.marker}"
    for rel in (
        "proj/.gh_token",
        "proj/deploy/api-token.txt",
        "proj/credentials.json",
        "proj/certs/server.pem",
        "proj/Credentials/key",
        "proj/.env",
        "proj/web/.env.production",
    ):
        _plant(box, rel, f"{token}\n")
    _plant(box, "proj/README.md", "ordinary readme\n")
    r = box.run(
        "cd ~/proj && cat .gh_token deploy/api-token.txt credentials.json certs/server.pem "
        "Credentials/key .env web/.env.production README.md; ls -A; grep -r ghp_ . ; true",
        declared=("~/proj",),
    )
    assert token not in r.stdout + r.stderr
    assert "ordinary readme" in r.stdout
    # Still listed, as an empty file or folder: the mask hides contents, not the name.
    assert ".gh_token" in r.stdout and "credentials.json" in r.stdout


def test_a_gh_token_linked_into_a_declared_folder_is_masked(box: Box) -> None:
    """~/.config/gh living in ~/dotfiles (a dotfiles manager links it): declaring ~/dotfiles
    shows no GitHub login."""
    _plant(box, "dotfiles/gh/hosts.yml", f"github.com:\n  oauth_token: {box.marker}\n")
    _plant(box, "dotfiles/vimrc", "set number\n")
    (box.home / ".config").mkdir(exist_ok=True)
    (box.home / ".config/gh").symlink_to(box.home / "dotfiles/gh")
    r = box.run(
        "cat ~/dotfiles/gh/hosts.yml ~/dotfiles/vimrc; grep -r oauth ~/dotfiles; true",
        declared=("~/dotfiles",),
    )
    assert box.marker not in r.stdout + r.stderr
    assert "set number" in r.stdout


def test_cargo_may_be_declared_but_its_credentials_stay_masked(box: Box) -> None:
    _plant(box, ".cargo/credentials.toml", f'[registry]\ntoken = "{box.marker}"\n')
    _plant(box, ".cargo/credentials", f'[registry]\ntoken = "{box.marker}"\n')
    _plant(box, ".cargo/config.toml", "[build]\njobs = 2\n")
    r = box.run("cat ~/.cargo/*; true", declared=("~/.cargo",))
    assert box.marker not in r.stdout + r.stderr
    assert "jobs = 2" in r.stdout


def test_a_granted_credential_is_there_read_only_and_alone(box: Box) -> None:
    _plant(box, ".config/gh/hosts.yml", f"github.com:\n  oauth_token: {box.marker}\n")
    _plant(box, ".config/gcloud/credentials.db", f"gcloud {box.marker}\n")
    r = box.run(
        "cat ~/.config/gh/hosts.yml; ls -A ~/.config; "
        "echo x >> ~/.config/gh/hosts.yml || echo WRITE-REFUSED; "
        "cat ~/.config/gcloud/credentials.db; true",
        declared=(),
        credentials=("~/.config/gh",),
    )
    assert f"oauth_token: {box.marker}" in r.stdout
    assert "WRITE-REFUSED" in r.stdout and "Read-only file system" in r.stderr
    assert r.stdout.count(box.marker) == 1  # gh's, never gcloud's
    assert r.stdout.split("\n")[2] == "gh"  # ~/.config holds the grant and nothing else
    assert "credentials.db: No such file" in r.stderr
    assert (box.home / ".config/gh/hosts.yml").read_text().count("oauth_token") == 1


def test_a_credential_named_grant_below_a_declared_folder_stays_visible(box: Box) -> None:
    """The grant wins over the mask it would otherwise get as a `*token*` file."""
    _plant(box, "proj/api-token.txt", f"{box.marker}\n")
    _plant(box, "proj/other-token.txt", "not granted\n")
    r = box.run(
        "cat ~/proj/api-token.txt ~/proj/other-token.txt; true",
        declared=("~/proj",),
        credentials=("~/proj/api-token.txt",),
    )
    assert r.stdout == f"{box.marker}\n"


def test_a_grant_of_an_ordinary_folder_is_masked_as_a_declared_one(box: Box) -> None:
    """The routine author grants `~/dotfiles` as a credential (bound to one host) instead of
    declaring it: a grant must not show what the same folder as a `home` entry hides, the gh
    login linked from ~/.config/gh and the credential-named files."""
    _plant(box, "dotfiles/gh/hosts.yml", f"github.com:\n  oauth_token: {box.marker}\n")
    _plant(box, "dotfiles/gh_token", f"{box.marker}\n")
    _plant(box, "dotfiles/keys/server.pem", f"{box.marker}\n")
    _plant(box, "dotfiles/vimrc", "set number\n")
    (box.home / ".config").mkdir(exist_ok=True)
    (box.home / ".config/gh").symlink_to(box.home / "dotfiles/gh")
    r = box.run(
        "cat ~/dotfiles/gh/hosts.yml ~/dotfiles/gh_token ~/dotfiles/keys/server.pem "
        "~/dotfiles/vimrc; grep -r . ~/dotfiles; true",
        declared=(),
        credentials=("~/dotfiles",),
    )
    assert box.marker not in r.stdout + r.stderr
    assert "set number" in r.stdout


def test_a_grant_of_a_catalog_entry_or_a_named_token_file_is_bound_whole(box: Box) -> None:
    """Naming the credential is the grant: gcloud's folder keeps its credentials*.db and
    access_tokens.db, and a granted `*token*` file is its own content."""
    _plant(box, ".config/gcloud/credentials.db", f"gcloud {box.marker}\n")
    _plant(box, ".config/gcloud/access_tokens.db", f"tokens {box.marker}\n")
    _plant(box, "apps/tool/api_token", f"tool {box.marker}\n")
    r = box.run(
        "cat ~/.config/gcloud/credentials.db ~/.config/gcloud/access_tokens.db "
        "~/apps/tool/api_token",
        declared=(),
        credentials=("~/.config/gcloud", "~/apps/tool/api_token"),
    )
    assert r.stdout.count(box.marker) == 3, r.stdout + r.stderr


def test_a_credential_named_file_declared_itself_is_masked(box: Box) -> None:
    """The names are masked below a declared folder; declaring the file itself
    (`home = ["~/proj/.env"]`) must not show it either (validate refuses it too)."""
    _plant(box, "proj/.env", f"API_KEY={box.marker}\n")
    _plant(box, "proj/deploy_token", f"{box.marker}\n")
    r = box.run(
        "cat ~/proj/.env ~/proj/deploy_token; true",
        declared=("~/proj/.env", "~/proj/deploy_token"),
    )
    assert box.marker not in r.stdout + r.stderr
