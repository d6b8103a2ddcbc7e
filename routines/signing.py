"""Routine signatures: `NAME.toml.sig` beside a routine file, made and checked by OpenSSH.

A routine whose file carries a valid signature by a key in `~/.vinos/allowed_signers` may
act without asking (`[routine].auto_approve`). Everything cryptographic is `ssh-keygen -Y`
(namespace `vinos-routine`, so a git or file signature by the same key never counts):

    sign:    ssh-keygen -Y sign -f KEY -n vinos-routine               < routine  > signature
    check:   ssh-keygen -Y check-novalidate -n vinos-routine -s SIG   < routine  (fingerprint)
    who:     ssh-keygen -Y find-principals -f ALLOWED -s SIG                     (principals)
    verify:  ssh-keygen -Y verify -f ALLOWED -I WHO -n vinos-routine -s SIG < routine

Invariants:
- What is verified is bytes this process holds: the routine's bytes (read once, or handed
  in by the caller that parsed them) go to ssh-keygen on stdin, never as a path it would
  open again later. The signature and the allowed-signers file are read here with
  O_NOFOLLOW (`routines.store`) and handed to ssh-keygen as copies in a private 0700
  temporary directory, so no link planted in their place is followed.
- Nothing but a successful `verify` gives VALID: ssh-keygen missing, failing, hanging or
  printing the unexpected is INVALID with a reason, never VALID.
- The signature is written by this module (atomically, no-follow), never by ssh-keygen,
  which would follow a link planted at NAME.toml.sig.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from routines.store import read_regular, write_atomic

__all__ = [
    "NAMESPACE",
    "SignatureCheck",
    "SignatureState",
    "SigningError",
    "sign_routine",
    "signature_path",
    "verify_bytes",
    "verify_routine",
]

NAMESPACE = "vinos-routine"
# An ssh signature is a few hundred bytes (RSA-16384 ~ 3 KB); past this it is not one.
MAX_SIGNATURE = 16 * 1024
# One line per trusted key; a file this size is a mistake, not a keyring.
MAX_ALLOWED_SIGNERS = 1024 * 1024
# ssh-keygen -Y verify of a page of TOML takes milliseconds; this only stops a hang.
_VERIFY_TIMEOUT = 30.0
_FINGERPRINT_RE = re.compile(r"\b((?:SHA256|MD5):[A-Za-z0-9+/=:]+)")


class SignatureState(StrEnum):
    VALID = "valid"  # verified by a key in allowed_signers: auto_approve may take effect
    INVALID = "invalid"  # a .sig that does not verify, an untrusted key, or no way to check
    UNSIGNED = "unsigned"  # no NAME.toml.sig beside the file


@dataclass(frozen=True, slots=True)
class SignatureCheck:
    state: SignatureState
    principal: str | None = None  # who allowed_signers names for the key (VALID only)
    fingerprint: str | None = None  # SHA256:… of the signing key, when ssh-keygen told us
    reason: str = ""  # why INVALID (or UNSIGNED), for a person to read

    @property
    def trusted(self) -> bool:
        return self.state is SignatureState.VALID

    def describe(self) -> str:
        """One line for `list` and `validate`."""
        if self.state is SignatureState.VALID:
            return f"signed by {self.principal} ({self.fingerprint})"
        if self.state is SignatureState.UNSIGNED:
            return "unsigned"
        return f"signature invalid: {self.reason}"


class SigningError(Exception):
    """`sign_routine` could not sign; the message says what to do."""


def signature_path(routine_file: Path) -> Path:
    return routine_file.with_name(routine_file.name + ".sig")


def verify_routine(path: Path, allowed_signers: Path, data: bytes | None = None) -> SignatureCheck:
    """Check `path`'s signature (`path`.sig) against `allowed_signers`.

    `data` are the routine's bytes as the caller parsed them; without it the file is read
    here, once (the loader's rules: regular file, at most 256 KB). Either way the bytes
    verified are the bytes held, not whatever the file holds a moment later.
    """
    sig = read_regular(signature_path(path), MAX_SIGNATURE + 1, head=True)
    if sig is None:
        if os.path.lexists(signature_path(path)):
            return _invalid(f"{signature_path(path).name} is not a regular file (or unreadable)")
        return SignatureCheck(SignatureState.UNSIGNED, reason="no signature file")
    if data is None:
        from routines.checks import RoutineInvalid
        from routines.loader import read_routine_file

        try:
            data = read_routine_file(path)
        except RoutineInvalid as exc:
            return _invalid(f"cannot read the routine file: {exc.problems[0].message}")
    if not os.path.lexists(allowed_signers):
        return _invalid(f"no trusted keys: {allowed_signers} does not exist (vinos-routine trust)")
    signers = read_regular(allowed_signers, MAX_ALLOWED_SIGNERS + 1, head=True)
    if signers is None:
        return _invalid(f"{allowed_signers} is not a regular file (or unreadable)")
    if len(signers) > MAX_ALLOWED_SIGNERS:
        return _invalid(f"{allowed_signers} is over {MAX_ALLOWED_SIGNERS:,} bytes")
    return verify_bytes(data, sig, signers, allowed_signers_name=str(allowed_signers))


def verify_bytes(
    data: bytes, signature: bytes, allowed_signers: bytes, *, allowed_signers_name: str = ""
) -> SignatureCheck:
    """Check `signature` of `data` against the allowed-signers text (no file is read)."""
    if len(signature) > MAX_SIGNATURE or b"-----BEGIN SSH SIGNATURE-----" not in signature:
        return _invalid("the .sig file is not an ssh signature (ssh-keygen -Y sign)")
    try:
        keygen = _ssh_keygen()
    except SigningError as exc:
        return _invalid(str(exc))
    where = allowed_signers_name or "allowed_signers"
    with tempfile.TemporaryDirectory(prefix="vinos-sig-") as tmp:
        sig_file = Path(tmp, "routine.sig")
        signers_file = Path(tmp, "allowed_signers")
        _write_new(sig_file, signature)
        _write_new(signers_file, allowed_signers)
        try:
            check = _run(
                [keygen, "-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(sig_file)], data
            )
            if check.returncode != 0:
                return _invalid(f"does not verify ({_last_line(check.stderr)})")
            fingerprint = _fingerprint(check.stdout + check.stderr)
            who = _run(
                [keygen, "-Y", "find-principals", "-f", str(signers_file), "-s", str(sig_file)], b""
            )
            principals = [p for p in who.stdout.decode(errors="replace").splitlines() if p]
            if who.returncode != 0 or not principals:
                return _invalid(
                    f"signed by key {fingerprint or '?'}, which {where} does not "
                    "trust for vinos-routine",
                    fingerprint,
                )
            for principal in principals:
                ok = _run(
                    [
                        keygen,
                        "-Y",
                        "verify",
                        "-f",
                        str(signers_file),
                        "-I",
                        principal,
                        "-n",
                        NAMESPACE,
                        "-s",
                        str(sig_file),
                    ],
                    data,
                )
                if ok.returncode == 0 and ok.stdout.startswith(b"Good "):
                    return SignatureCheck(
                        SignatureState.VALID, principal, _fingerprint(ok.stdout) or fingerprint
                    )
            return _invalid(
                f"key {fingerprint or '?'} does not verify against {where} "
                f"({_last_line(ok.stderr)})",
                fingerprint,
            )
        except SigningError as exc:
            return _invalid(str(exc))


def sign_routine(path: Path, key: Path) -> Path:
    """Sign the routine file `path` with the private key `key` (or a public key whose private
    half is in ssh-agent); writes and returns `path`.sig. Raises SigningError."""
    from routines.checks import RoutineInvalid
    from routines.loader import read_routine_file

    try:
        data = read_routine_file(path)
    except RoutineInvalid as exc:
        raise SigningError(str(exc)) from exc
    if not key.is_file():
        raise SigningError(
            f"{key}: no such key file (expected a private key, e.g. "
            "~/.ssh/id_ed25519, or --key PATH)"
        )
    keygen = _ssh_keygen()
    # Interactive: ssh-keygen asks a key's passphrase on the terminal (/dev/tty), so no
    # timeout; SSH_AUTH_SOCK passes through for agent-held keys.
    env = _env(keep=("SSH_AUTH_SOCK",))
    try:
        done = subprocess.run(
            [keygen, "-Y", "sign", "-f", str(key), "-n", NAMESPACE],
            input=data,
            capture_output=True,
            env=env,
            check=False,
        )
    except OSError as exc:
        raise SigningError(f"cannot run {keygen}: {exc.strerror}") from exc
    if done.returncode != 0 or b"-----BEGIN SSH SIGNATURE-----" not in done.stdout:
        raise SigningError(f"ssh-keygen -Y sign with {key} failed: {_last_line(done.stderr)}")
    target = signature_path(path)
    write_atomic(target, done.stdout, mode=0o644)
    return target


def _invalid(reason: str, fingerprint: str | None = None) -> SignatureCheck:
    return SignatureCheck(SignatureState.INVALID, fingerprint=fingerprint, reason=reason)


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise SigningError(
            "ssh-keygen not found on PATH (install openssh); signatures cannot be checked"
        )
    return found


def _env(keep: Sequence[str] = ()) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    env.update({k: os.environ[k] for k in keep if k in os.environ})
    return env


def _run(argv: list[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            argv,
            input=data,
            capture_output=True,
            env=_env(),
            timeout=_VERIFY_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SigningError(
            f"ssh-keygen {argv[2]} did not answer in {_VERIFY_TIMEOUT:.0f} s"
        ) from exc
    except OSError as exc:
        raise SigningError(f"cannot run {argv[0]}: {exc.strerror}") from exc


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _fingerprint(output: bytes) -> str | None:
    m = _FINGERPRINT_RE.search(output.decode(errors="replace"))
    return m.group(1) if m else None


def _last_line(stderr: bytes) -> str:
    from routines.safetext import one_line

    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return one_line(lines[-1]) if lines else "no message"
