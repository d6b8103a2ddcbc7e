"""Routine signatures: `NAME.toml.sig` beside a routine file, made and checked by OpenSSH.

A routine whose file carries a valid signature by a key in `~/.vinos/allowed_signers` may
act without asking (`[routine].auto_approve`). Everything cryptographic is `ssh-keygen -Y`
(namespace `vinos-routine`, so a git or file signature by the same key never counts):

    sign:    ssh-keygen -Y sign -f KEY -n vinos-routine               < message  > signature
    check:   ssh-keygen -Y check-novalidate -n vinos-routine -s SIG   < message  (fingerprint)
    who:     ssh-keygen -Y find-principals -f ALLOWED -s SIG                     (principals)
    verify:  ssh-keygen -Y verify -f ALLOWED -I WHO -n vinos-routine -s SIG < message

The message signed is the file's name with its bytes (`signed_message`):
`vinos-routine-sig-v2` NUL `inbox.toml` NUL <the file's bytes>. A signature binds both:
`act.toml` and `act.toml.sig` copied to `act2.toml` and `act2.toml.sig` do not verify
(tests/routines/test_signing.py). Signatures from before, over the bytes alone, no longer verify;
`verify_routine` recognises one (`SignatureCheck.legacy`) to say so: re-sign with
`vinos-routine sign NAME`.

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
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from routines.spec.paths import signature_path
from routines.store import read_regular, write_atomic

if TYPE_CHECKING:
    import subprocess

# subprocess, tempfile and shutil are imported where ssh-keygen runs: `list` imports this
# module for every routine but runs ssh-keygen only for a signed one (~10 ms of start-up).

__all__ = [
    "NAMESPACE",
    "SignatureCheck",
    "SignatureState",
    "SigningError",
    "TrustedKey",
    "auto_approve_requested",
    "effective_permissions",
    "parse_public_key",
    "sign_routine",
    "signature_note",
    "signature_path",
    "signed_message",
    "trust_key",
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
MESSAGE_TAG = b"vinos-routine-sig-v2"


def signed_message(name: str, data: bytes) -> bytes:
    """What a routine's signature covers: the file's name (`inbox.toml`) and its bytes
    (pure). The name cannot hold NUL, so no (name, bytes) pair reads as another."""
    return MESSAGE_TAG + b"\0" + os.fsencode(name) + b"\0" + data


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
    legacy: bool = False  # INVALID: a signature of the bytes alone, from before names counted

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


def auto_approve_requested(routine: object) -> bool:
    """Whether the routine file sets `[routine].auto_approve = true` (the parsed field when
    the spec has it, else read from the TOML text the routine was parsed from)."""
    value = getattr(routine, "auto_approve", None)
    if isinstance(value, bool):
        return value
    import tomllib

    try:
        table = tomllib.loads(str(getattr(routine, "text", ""))).get("routine")
    except tomllib.TOMLDecodeError:
        return False
    return isinstance(table, dict) and table.get("auto_approve") is True


def signature_note(check: SignatureCheck, auto_approve: bool, name: str) -> tuple[str, bool] | None:
    """What `list` and `validate` say about a routine's signature: (text, is_warning), or
    None for an unsigned routine that asks for nothing (pure)."""
    if check.state is SignatureState.VALID:
        return check.describe() + ("; auto_approve in effect" if auto_approve else ""), False
    if check.legacy:
        return (
            f"signature from an older vinos-routine (it does not cover the file's name): "
            f"{'auto_approve ignored; ' if auto_approve else ''}"
            f"read the file, then re-sign it: vinos-routine sign {name}",
            True,
        )
    if check.state is SignatureState.INVALID:
        if auto_approve:
            return f"signature invalid: auto_approve ignored ({check.reason})", True
        return f"signature invalid ({check.reason})", True
    if auto_approve:
        return (
            f"[routine].auto_approve: true, but the file is not signed: ignored, its proposals "
            f"wait for you (read it, then: vinos-routine sign {name})",
            True,
        )
    return None


def effective_permissions(routine: Any, allowed_signers: Path) -> tuple[Any, str]:
    """What a run of `routine` may do unasked, and why when that is less than its file asks:
    "everything" only while the bytes it was parsed from verify against a trusted key; an
    edit since signing (or an untrusted key) drops it to "ask". The one place that decides
    it: the supervisor's job carries the answer to the worker (tests/cli/
    test_cli_approvals.py::test_a_one_byte_edit_after_signing_stops_auto_approve)."""
    from routines.spec import Permissions

    wanted = routine.permissions
    if wanted is not Permissions.EVERYTHING:
        return wanted, ""
    check = verify_routine(routine.source, allowed_signers, data=routine.text.encode("utf-8"))
    if check.trusted:
        return wanted, ""
    return Permissions.ASK, f'{check.describe()}: permissions "everything" ignored, asking first'


class SigningError(Exception):
    """`sign_routine` could not sign; the message says what to do."""


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
        from routines.spec.checks import RoutineInvalid
        from routines.spec.readfile import read_routine_file

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
    return verify_bytes(
        data, sig, signers, name=path.name, allowed_signers_name=str(allowed_signers)
    )


def verify_bytes(
    data: bytes,
    signature: bytes,
    allowed_signers: bytes,
    *,
    name: str,
    allowed_signers_name: str = "",
) -> SignatureCheck:
    """Check `signature` of the file `name` holding `data` against the allowed-signers text
    (no file is read)."""
    import tempfile

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
            return _check(keygen, sig_file, signers_file, (name, data), where)
        except SigningError as exc:
            return _invalid(str(exc))


def _check(
    keygen: str, sig: Path, signers: Path, file: tuple[str, bytes], where: str
) -> SignatureCheck:
    """find-principals, then verify as each: two ssh-keygen runs for a good signature.
    Only a signature that does not verify costs more (check-novalidate), to say why."""
    name, raw = file
    data = signed_message(name, raw)
    who = _run([keygen, "-Y", "find-principals", "-f", str(signers), "-s", str(sig)], b"")
    principals = [p for p in who.stdout.decode(errors="replace").splitlines() if p]
    failed = b""
    for principal in principals if who.returncode == 0 else []:
        argv = [keygen, "-Y", "verify", "-f", str(signers), "-I", principal, "-n", NAMESPACE]
        ok = _run([*argv, "-s", str(sig)], data)
        if ok.returncode == 0 and ok.stdout.startswith(b"Good "):
            return SignatureCheck(SignatureState.VALID, principal, _fingerprint(ok.stdout))
        failed = ok.stderr
    novalidate = [keygen, "-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(sig)]
    check = _run(novalidate, data)
    if check.returncode != 0:
        legacy = _run(novalidate, raw)
        if legacy.returncode == 0:
            return SignatureCheck(
                SignatureState.INVALID,
                fingerprint=_fingerprint(legacy.stdout + legacy.stderr),
                reason="made by an older vinos-routine over the bytes alone, not the file's "
                f"name: read {name}, then re-sign it (vinos-routine sign)",
                legacy=True,
            )
        return _invalid(
            f"does not verify for {name}: the file changed since it was signed, or the "
            f"signature is another file's ({_last_line(check.stderr)})"
        )
    fingerprint = _fingerprint(check.stdout + check.stderr)
    if not failed:
        return _invalid(
            f"signed by key {fingerprint or '?'}, which {where} does not trust for vinos-routine",
            fingerprint,
        )
    return _invalid(
        f"key {fingerprint or '?'} does not verify against {where} ({_last_line(failed)})",
        fingerprint,
    )


def sign_routine(path: Path, key: Path) -> Path:
    """Sign the routine file `path` with the private key `key` (or a public key whose private
    half is in ssh-agent); writes and returns `path`.sig. Raises SigningError."""
    import subprocess

    from routines.spec.checks import RoutineInvalid
    from routines.spec.readfile import read_routine_file

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
            input=signed_message(path.name, data),
            capture_output=True,
            env=env,
            check=False,
        )
    except OSError as exc:
        raise SigningError(f"cannot run {keygen}: {exc.strerror}") from exc
    if done.returncode != 0 or b"-----BEGIN SSH SIGNATURE-----" not in done.stdout:
        raise SigningError(f"ssh-keygen -Y sign with {key} failed: {_last_line(done.stderr)}")
    target = signature_path(path)
    # 0600: the runtime's files are the user's alone (a signature is not secret, but another
    # user has no business reading which routines act without asking).
    write_atomic(target, done.stdout, mode=0o600)
    return target


def _invalid(reason: str, fingerprint: str | None = None) -> SignatureCheck:
    return SignatureCheck(SignatureState.INVALID, fingerprint=fingerprint, reason=reason)


def _ssh_keygen() -> str:
    import shutil

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
    import subprocess

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
            f"ssh-keygen {' '.join(argv[1:3])} did not answer in {_VERIFY_TIMEOUT:.0f} s"
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


# What a principal may be: allowed_signers reads `*`, `?` and `!` as patterns and `,` as a
# list, so a principal named by a key's comment must be a plain name to mean only itself.
PRINCIPAL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")
_KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)
MAX_PUBLIC_KEY = 16 * 1024


@dataclass(frozen=True, slots=True)
class TrustedKey:
    principal: str
    kind: str  # ssh-ed25519, …
    blob: str  # the base64 key
    fingerprint: str
    added: bool  # False: the key was in allowed_signers already (as `principal`)

    def line(self) -> str:
        return f'{self.principal} namespaces="{NAMESPACE}" {self.kind} {self.blob}\n'


def parse_public_key(text: str, where: str) -> tuple[str, str, str]:
    """(type, base64 key, comment) of a one-line OpenSSH public key; SigningError naming
    `where`, what was expected and what was found otherwise (pure)."""
    import base64
    import binascii

    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    if any("PRIVATE KEY" in ln for ln in lines):
        raise SigningError(f"{where}: this is a private key; give its public half (the .pub file)")
    if len(lines) != 1:
        raise SigningError(
            f"{where}: expected one public key line (ssh-ed25519 AAAA… comment), "
            f"found {len(lines)} lines"
        )
    fields = lines[0].split(maxsplit=2)
    if len(fields) < 2 or fields[0] not in _KEY_TYPES:
        from routines.safetext import one_line

        raise SigningError(
            f"{where}: expected an OpenSSH public key (ssh-ed25519, ecdsa-sha2-…, ssh-rsa), "
            f"found {one_line(fields[0][:40]) if fields else 'nothing'!r}"
        )
    try:
        raw = base64.b64decode(fields[1], validate=True)
    except (binascii.Error, ValueError):
        raise SigningError(f"{where}: the key is not valid base64") from None
    # The blob names its own type first (a uint32 length, then the name): they must agree.
    if raw[4 : 4 + int.from_bytes(raw[:4], "big")].decode(errors="replace") != fields[0]:
        raise SigningError(f"{where}: the key data is not a {fields[0]} key")
    return fields[0], fields[1], fields[2].strip() if len(fields) > 2 else ""


def trust_key(pubkey: Path, allowed_signers: Path, principal: str | None = None) -> TrustedKey:
    """Add the public key in `pubkey` to `allowed_signers` for namespace vinos-routine, as
    `principal` (default: the key's comment). A key trusted already is not added twice.
    Raises SigningError."""
    from routines.spec.checks import RoutineInvalid
    from routines.spec.readfile import read_routine_file  # a regular file, size-capped, O_NONBLOCK

    try:
        data = read_routine_file(pubkey)
    except RoutineInvalid as exc:
        raise SigningError(str(exc.problems[0])) from None
    if len(data) > MAX_PUBLIC_KEY:
        raise SigningError(f"{pubkey}: {len(data):,} bytes is too large for a public key")
    kind, blob, comment = parse_public_key(data.decode("utf-8", "replace"), str(pubkey))
    who = principal if principal is not None else comment
    if not PRINCIPAL_RE.fullmatch(who):
        from routines.safetext import one_line

        source = "--as" if principal is not None else "the key's comment"
        raise SigningError(
            f"{pubkey}: {source} {one_line(who)!r} is not a usable signer name (expected "
            "letters, digits and . _ @ + -, like alice@laptop); name it with --as NAME"
        )
    fingerprint = _key_fingerprint(kind, blob)
    existing = b""
    if os.path.lexists(allowed_signers):
        got = read_regular(allowed_signers, MAX_ALLOWED_SIGNERS + 1, head=True)
        if got is None:
            raise SigningError(f"{allowed_signers} is not a regular file (or unreadable)")
        existing = got
    for line in existing.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if blob in parts:
            return TrustedKey(parts[0], kind, blob, fingerprint, added=False)
    key = TrustedKey(who, kind, blob, fingerprint, added=True)
    if existing and not existing.endswith(b"\n"):
        existing += b"\n"
    write_atomic(allowed_signers, existing + key.line().encode(), mode=0o600)
    return key


def _key_fingerprint(kind: str, blob: str) -> str:
    """SHA256:… as ssh-keygen -l prints it; ssh-keygen checks the key parses too."""
    import tempfile

    keygen = _ssh_keygen()
    with tempfile.TemporaryDirectory(prefix="vinos-key-") as tmp:
        path = Path(tmp, "key.pub")
        _write_new(path, f"{kind} {blob}\n".encode())
        done = _run([keygen, "-l", "-E", "sha256", "-f", str(path)], b"")
    fingerprint = _fingerprint(done.stdout)
    if done.returncode != 0 or fingerprint is None:
        raise SigningError(f"ssh-keygen does not accept the key: {_last_line(done.stderr)}")
    return fingerprint
