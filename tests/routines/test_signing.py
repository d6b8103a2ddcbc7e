"""routines.signing against the real ssh-keygen, with keys made here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from routines.signing import (
    NAMESPACE,
    SignatureState,
    SigningError,
    sign_routine,
    signature_note,
    signature_path,
    signed_message,
    verify_bytes,
    verify_routine,
)

ROUTINE = b'[routine]\ndescription = "inbox"\nauto_approve = true\n'


def make_key(directory: Path, name: str, comment: str) -> Path:
    key = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
        check=True,
    )
    return key


def trust_line(key: Path, principal: str, namespaces: str = NAMESPACE) -> str:
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    return f'{principal} namespaces="{namespaces}" {kind} {blob}\n'


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    d = tmp_path / "keys"
    d.mkdir()
    return {"alice": make_key(d, "alice", "alice@laptop"), "eve": make_key(d, "eve", "eve")}


@pytest.fixture
def routine(tmp_path: Path) -> Path:
    path = tmp_path / "routines" / "inbox.toml"
    path.parent.mkdir()
    path.write_bytes(ROUTINE)
    return path


@pytest.fixture
def allowed(tmp_path: Path, keys: dict[str, Path]) -> Path:
    path = tmp_path / "allowed_signers"
    path.write_text(trust_line(keys["alice"], "alice@laptop"))
    return path


def test_unsigned_file_is_unsigned(routine: Path, allowed: Path) -> None:
    check = verify_routine(routine, allowed)
    assert check.state is SignatureState.UNSIGNED
    assert not check.trusted
    assert check.describe() == "unsigned"


def test_signed_by_a_trusted_key_is_valid(
    routine: Path, allowed: Path, keys: dict[str, Path]
) -> None:
    sig = sign_routine(routine, keys["alice"])
    assert sig == signature_path(routine) == routine.with_name("inbox.toml.sig")
    assert sig.read_bytes().startswith(b"-----BEGIN SSH SIGNATURE-----")
    check = verify_routine(routine, allowed)
    assert check.state is SignatureState.VALID and check.trusted
    assert check.principal == "alice@laptop"
    assert check.fingerprint is not None and check.fingerprint.startswith("SHA256:")
    assert check.describe() == f"signed by alice@laptop ({check.fingerprint})"
    fp = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(keys["alice"].with_suffix(".pub"))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[1]
    assert check.fingerprint == fp


def test_one_byte_edit_is_invalid(routine: Path, allowed: Path, keys: dict[str, Path]) -> None:
    sign_routine(routine, keys["alice"])
    routine.write_bytes(ROUTINE.replace(b"inbox", b"inbux"))
    check = verify_routine(routine, allowed)
    assert check.state is SignatureState.INVALID and not check.trusted
    assert "does not verify" in check.reason
    assert check.describe().startswith("signature invalid: ")


def test_the_bytes_handed_in_are_what_is_verified(
    routine: Path, allowed: Path, keys: dict[str, Path]
) -> None:
    sign_routine(routine, keys["alice"])
    assert verify_routine(routine, allowed, data=ROUTINE).trusted
    # The file still verifies, but the caller parsed other bytes: those are what count.
    assert not verify_routine(routine, allowed, data=ROUTINE + b"\n").trusted


def test_untrusted_key_is_not_trusted(routine: Path, allowed: Path, keys: dict[str, Path]) -> None:
    sign_routine(routine, keys["eve"])
    check = verify_routine(routine, allowed)
    assert check.state is SignatureState.INVALID
    assert check.principal is None
    assert check.fingerprint is not None
    assert "does not trust" in check.reason and check.fingerprint in check.reason


def test_key_trusted_for_another_namespace_is_not_trusted(
    routine: Path, tmp_path: Path, keys: dict[str, Path]
) -> None:
    allowed = tmp_path / "git_signers"
    allowed.write_text(trust_line(keys["alice"], "alice@laptop", namespaces="git"))
    sign_routine(routine, keys["alice"])
    assert verify_routine(routine, allowed).state is SignatureState.INVALID


def test_signature_in_another_namespace_is_invalid(
    routine: Path, allowed: Path, keys: dict[str, Path]
) -> None:
    done = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(keys["alice"]), "-n", "git"],
        input=ROUTINE,
        capture_output=True,
        check=True,
    )
    signature_path(routine).write_bytes(done.stdout)
    check = verify_routine(routine, allowed)
    assert check.state is SignatureState.INVALID
    assert "does not verify" in check.reason


def test_missing_allowed_signers_is_invalid(
    routine: Path, tmp_path: Path, keys: dict[str, Path]
) -> None:
    sign_routine(routine, keys["alice"])
    check = verify_routine(routine, tmp_path / "nowhere")
    assert check.state is SignatureState.INVALID
    assert "vinos-routine trust" in check.reason


def test_symlinked_signature_and_signers_are_not_followed(
    routine: Path, allowed: Path, keys: dict[str, Path], tmp_path: Path
) -> None:
    real_sig = tmp_path / "elsewhere.sig"
    sign_routine(routine, keys["alice"])
    signature_path(routine).rename(real_sig)
    signature_path(routine).symlink_to(real_sig)
    check = verify_routine(routine, allowed)
    assert check.state is SignatureState.INVALID and "not a regular file" in check.reason

    signature_path(routine).unlink()
    real_sig.rename(signature_path(routine))
    link = tmp_path / "signers-link"
    link.symlink_to(allowed)
    check = verify_routine(routine, link)
    assert check.state is SignatureState.INVALID and "not a regular file" in check.reason
    assert verify_routine(routine, allowed).trusted


def test_sign_replaces_a_planted_link_instead_of_writing_through_it(
    routine: Path, keys: dict[str, Path], tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    signature_path(routine).symlink_to(victim)
    sign_routine(routine, keys["alice"])
    assert victim.read_text() == "keep me"
    assert not signature_path(routine).is_symlink()


def test_garbage_signature_is_invalid(routine: Path, allowed: Path) -> None:
    signature_path(routine).write_bytes(b"not a signature")
    check = verify_routine(routine, allowed)
    assert check.state is SignatureState.INVALID
    assert "not an ssh signature" in check.reason


def test_missing_ssh_keygen_is_never_valid(
    routine: Path,
    allowed: Path,
    keys: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sign_routine(routine, keys["alice"])
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    check = verify_routine(routine, allowed)
    assert check.state is SignatureState.INVALID
    assert "ssh-keygen not found" in check.reason
    with pytest.raises(SigningError, match="ssh-keygen not found"):
        sign_routine(routine, keys["alice"])


def test_sign_with_missing_key_names_the_key(routine: Path, tmp_path: Path) -> None:
    with pytest.raises(SigningError, match="no-such-key: no such key file"):
        sign_routine(routine, tmp_path / "no-such-key")
    assert not os.path.lexists(signature_path(routine))


def test_verify_bytes_needs_no_files(keys: dict[str, Path]) -> None:
    sig = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(keys["alice"]), "-n", NAMESPACE],
        input=signed_message("x.toml", b"hello"),
        capture_output=True,
        check=True,
    ).stdout
    signers = trust_line(keys["alice"], "alice@laptop").encode()
    assert verify_bytes(b"hello", sig, signers, name="x.toml").trusted
    assert not verify_bytes(b"hello", sig, signers, name="y.toml").trusted
    assert not verify_bytes(b"hellO", sig, signers, name="x.toml").trusted
    assert not verify_bytes(b"hello", sig, b"", name="x.toml").trusted


def test_a_signature_copied_with_its_file_to_another_name_is_not_honoured(
    routine: Path, allowed: Path, keys: dict[str, Path]
) -> None:
    # The chain as it was run: act.toml and act.toml.sig copied to act2.* kept their trust.
    sign_routine(routine, keys["alice"])
    assert verify_routine(routine, allowed).trusted
    copy = routine.with_name("inbox2.toml")
    copy.write_bytes(routine.read_bytes())
    signature_path(copy).write_bytes(signature_path(routine).read_bytes())
    check = verify_routine(copy, allowed)
    assert check.state is SignatureState.INVALID and not check.legacy
    assert "does not verify for inbox2.toml" in check.reason
    assert "another file's" in check.reason


def test_a_signature_of_the_bytes_alone_is_named_as_old_and_re_signing_fixes_it(
    routine: Path, allowed: Path, keys: dict[str, Path]
) -> None:
    old = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(keys["alice"]), "-n", NAMESPACE],
        input=ROUTINE,
        capture_output=True,
        check=True,
    ).stdout
    signature_path(routine).write_bytes(old)
    check = verify_routine(routine, allowed)
    assert check.state is SignatureState.INVALID and check.legacy
    assert "older vinos-routine" in check.reason
    note, warning = signature_note(check, True, "inbox") or ("", False)
    assert warning and "auto_approve ignored" in note
    assert "re-sign it: vinos-routine sign inbox" in note
    sign_routine(routine, keys["alice"])
    assert verify_routine(routine, allowed).trusted


def test_signature_and_allowed_signers_are_private(
    routine: Path, tmp_path: Path, keys: dict[str, Path]
) -> None:
    import stat

    from routines.signing import trust_key

    sig = sign_routine(routine, keys["alice"])
    assert stat.S_IMODE(sig.stat().st_mode) == 0o600
    allowed = tmp_path / "fresh_allowed_signers"
    trust_key(keys["alice"].with_suffix(".pub"), allowed)
    assert stat.S_IMODE(allowed.stat().st_mode) == 0o600
