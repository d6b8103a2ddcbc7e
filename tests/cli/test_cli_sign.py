"""`sign`, `trust`, and what `list`, `validate` and `install` say about signatures, through the
real CLI with real ssh-keygen keys made here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from routines.signing import SignatureCheck, SignatureState, auto_approve_requested, signature_note
from tests.cli.cli_helpers import Cli


def make_key(directory: Path, name: str, comment: str) -> Path:
    directory.mkdir(exist_ok=True)
    key = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
        check=True,
    )
    return key


@pytest.fixture
def alice(tmp_path: Path) -> Path:
    return make_key(tmp_path / "keys", "alice", "alice@laptop")


@pytest.fixture
def eve(tmp_path: Path) -> Path:
    return make_key(tmp_path / "keys", "eve", "eve")


def listed(cli: Cli) -> dict[str, dict[str, object]]:
    return {r["name"]: r for r in json.loads(cli("list", "--json").stdout)}


def test_trust_adds_one_namespaced_line_and_only_once(cli: Cli, alice: Path) -> None:
    res = cli("trust", f"{alice}.pub")
    assert res.returncode == 0, res.stderr
    assert "trusted alice@laptop (SHA256:" in res.stdout
    signers = (cli.home / "allowed_signers").read_text()
    kind, blob = Path(f"{alice}.pub").read_text().split()[:2]
    assert signers == f'alice@laptop namespaces="vinos-routine" {kind} {blob}\n'
    again = cli("trust", f"{alice}.pub", "--as", "someone-else")
    assert again.returncode == 0 and "trusted already, as alice@laptop" in again.stdout
    assert (cli.home / "allowed_signers").read_text() == signers


def test_trust_refuses_a_private_key_and_a_pattern_principal(cli: Cli, alice: Path) -> None:
    res = cli("trust", str(alice))
    assert res.returncode == 1
    assert "private key; give its public half" in res.stderr
    res = cli("trust", f"{alice}.pub", "--as", "*")
    assert res.returncode == 1 and "--as '*' is not a usable signer name" in res.stderr
    garbage = alice.parent / "garbage.pub"
    garbage.write_text("ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQ== x\n")  # an RSA blob
    res = cli("trust", str(garbage))
    assert (
        res.returncode == 1 and "garbage.pub: the key data is not a ssh-ed25519 key" in res.stderr
    )
    assert not (cli.home / "allowed_signers").exists()


def test_sign_then_list_and_validate_say_signed_by(cli: Cli, alice: Path) -> None:
    path = cli.agent("inbox")
    assert cli("trust", f"{alice}.pub").returncode == 0
    res = cli("sign", "inbox", "--key", str(alice))
    assert res.returncode == 0, res.stderr
    assert path.with_name("inbox.toml.sig").is_file()
    assert "signed by alice@laptop" in res.stdout
    line = listed(cli)["inbox"]
    assert line["signature"] == "valid"
    assert str(line["signature_note"]).startswith("signed by alice@laptop (SHA256:")
    assert "inbox: signed by alice@laptop" in cli("list").stdout
    res = cli("validate", str(path), "--json")
    result = json.loads(res.stdout)
    assert (result["ok"], result["signature"], result["signer"]) == (True, "valid", "alice@laptop")
    assert (
        cli("validate", str(path))
        .stdout.splitlines()[-1]
        .startswith(f"{path}: signed by alice@laptop")
    )


def test_an_edit_or_an_untrusted_key_shows_as_invalid(cli: Cli, alice: Path, eve: Path) -> None:
    path = cli.agent("inbox")
    assert cli("trust", f"{alice}.pub").returncode == 0
    assert cli("sign", "inbox", "--key", str(alice)).returncode == 0
    path.write_text(path.read_text().replace("Write the brief.", "Write the brief!"))
    line = listed(cli)["inbox"]
    assert line["signature"] == "invalid"
    assert "signature invalid (does not verify" in str(line["signature_note"])
    res = cli("validate", str(path))
    assert res.returncode == 0  # a warning, not an error: the routine itself is fine
    assert "signature invalid (does not verify" in res.stdout

    res = cli("sign", "inbox", "--key", str(eve))
    assert res.returncode == 0
    assert f"to trust this key: vinos-routine trust {eve}.pub" in res.stdout
    line = listed(cli)["inbox"]
    assert line["signature"] == "invalid" and "does not trust" in str(line["signature_note"])


def test_a_routine_copied_with_its_signature_is_not_signed(cli: Cli, alice: Path) -> None:
    path = cli.agent("act")
    assert cli("trust", f"{alice}.pub").returncode == 0
    assert cli("sign", "act", "--key", str(alice)).returncode == 0
    copy = path.with_name("act2.toml")
    copy.write_bytes(path.read_bytes())
    copy.with_name("act2.toml.sig").write_bytes(path.with_name("act.toml.sig").read_bytes())
    rows = listed(cli)
    assert rows["act"]["signature"] == "valid"
    assert rows["act2"]["signature"] == "invalid"
    assert "does not verify for act2.toml" in str(rows["act2"]["signature_note"])


def test_an_old_signature_says_to_re_sign_and_sign_replaces_it(cli: Cli, alice: Path) -> None:
    from routines.signing import NAMESPACE

    path = cli.agent("inbox")
    assert cli("trust", f"{alice}.pub").returncode == 0
    old = subprocess.run(  # as the version before names were signed made it
        ["ssh-keygen", "-Y", "sign", "-f", str(alice), "-n", NAMESPACE],
        input=path.read_bytes(),
        capture_output=True,
        check=True,
    ).stdout
    path.with_name("inbox.toml.sig").write_bytes(old)
    note = str(listed(cli)["inbox"]["signature_note"])
    assert "signature from an older vinos-routine" in note
    assert "re-sign it: vinos-routine sign inbox" in note
    assert "re-sign it: vinos-routine sign inbox" in cli("list").stdout
    res = cli("sign", "inbox", "--key", str(alice))
    assert res.returncode == 0, res.stderr
    assert "replaces a signature from an older vinos-routine" in res.stdout
    assert "covers the name inbox.toml and the file's bytes" in res.stdout
    assert listed(cli)["inbox"]["signature"] == "valid"


def test_sign_refuses_an_invalid_routine_and_a_missing_key(cli: Cli, tmp_path: Path) -> None:
    cli.write("broken", "[routine]\nnope = 1\n")
    res = cli("sign", "broken", "--key", str(tmp_path / "none"))
    assert res.returncode == 1 and "broken is invalid; fix it first" in res.stderr
    cli.agent("inbox")
    res = cli("sign", "inbox", "--key", str(tmp_path / "none"))
    assert res.returncode == 1 and "none: no such key file" in res.stderr
    assert not (cli.routines / "inbox.toml.sig").exists()


def test_install_over_a_signed_file_drops_its_signature(
    cli: Cli, alice: Path, tmp_path: Path
) -> None:
    cli.agent("inbox")
    assert cli("sign", "inbox", "--key", str(alice)).returncode == 0
    source = tmp_path / "inbox.toml"
    source.write_text((cli.routines / "inbox.toml").read_text())
    Path(f"{source}.sig").write_bytes((cli.routines / "inbox.toml.sig").read_bytes())
    res = cli("install", str(source), "--force")
    assert res.returncode == 0, res.stderr
    assert "removed the old signature" in res.stdout
    assert not (cli.routines / "inbox.toml.sig").exists()
    assert listed(cli)["inbox"]["signature"] == "unsigned"


class _Spec:
    """Stands in for a Routine whose spec has no auto_approve field yet (read from text)."""

    def __init__(self, text: str) -> None:
        self.text = text


def test_auto_approve_is_read_from_the_text_and_unsigned_is_a_warning() -> None:
    on = _Spec("[routine]\nauto_approve = true\n")
    assert auto_approve_requested(on)
    assert not auto_approve_requested(_Spec("[routine]\nauto_approve = false\n"))
    assert not auto_approve_requested(_Spec("[agent]\nauto_approve = true\n"))
    unsigned = SignatureCheck(SignatureState.UNSIGNED)
    note = signature_note(unsigned, True, "inbox")
    assert note is not None and note[1]
    assert "auto_approve: true, but the file is not signed" in note[0]
    assert "vinos-routine sign inbox" in note[0]
    assert signature_note(unsigned, False, "inbox") is None
    invalid = SignatureCheck(SignatureState.INVALID, reason="does not verify (x)")
    assert signature_note(invalid, True, "inbox") == (
        "signature invalid: auto_approve ignored (does not verify (x))",
        True,
    )
    valid = SignatureCheck(SignatureState.VALID, "alice", "SHA256:abc")
    assert signature_note(valid, True, "inbox") == (
        "signed by alice (SHA256:abc); auto_approve in effect",
        False,
    )
