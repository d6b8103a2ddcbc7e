"""`vinos-routine sign NAME` and `trust PUBKEY_FILE`: a routine signed with a trusted key may
act without asking (`[routine].auto_approve`); see routines/signing.py."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from supervisor.cli.commands.common import NoSuchRoutine, add_parser, die, find_routine

__all__ = ["register"]

DEFAULT_KEY = "~/.ssh/id_ed25519"


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "sign",
        "sign a routine file you have read, so auto_approve may take effect (NAME.toml.sig)",
        "  vinos-routine sign inbox\n  vinos-routine sign inbox --key ~/.ssh/id_ecdsa\n",
    )
    p.add_argument("name", help="routine name")
    p.add_argument(
        "--key",
        default=DEFAULT_KEY,
        help=f"private key (or a .pub whose key ssh-agent holds); default {DEFAULT_KEY}",
    )
    p.set_defaults(func=sign)
    p = add_parser(
        sub,
        "trust",
        "trust a public key's signatures on routine files (adds it to ~/.vinos/allowed_signers)",
        "  vinos-routine trust ~/.ssh/id_ed25519.pub\n"
        "  vinos-routine trust laptop.pub --as alice@laptop\n",
    )
    p.add_argument("pubkey", type=Path, help="an OpenSSH public key file (.pub)")
    p.add_argument("--as", dest="principal", help="the signer's name (default: the key comment)")
    p.set_defaults(func=trust)


def sign(args: argparse.Namespace) -> int:
    from routines.safetext import one_line
    from routines.signing import SigningError, sign_routine, verify_routine
    from routines.spec.paths import paths

    p = paths()
    try:
        entry, _ = find_routine(args.name, p)
    except NoSuchRoutine as exc:
        return die(str(exc))
    key = Path(args.key).expanduser()
    before = verify_routine(entry.path, p.allowed_signers)
    try:
        sig = sign_routine(entry.path, key)
    except (SigningError, OSError) as exc:
        return die(one_line(str(exc)))
    print(one_line(f"signed {entry.path} → {sig}"))
    print(one_line(f"  the signature covers the name {entry.path.name} and the file's bytes"))
    if before.legacy:
        print(
            "  (it replaces a signature from an older vinos-routine, which covered the bytes only)"
        )
    check = verify_routine(entry.path, p.allowed_signers)
    print(one_line(f"  {check.describe()}"))
    if not check.trusted:
        print(
            f"  to trust this key: vinos-routine trust {key}.pub"
            if key.suffix != ".pub"
            else f"  to trust this key: vinos-routine trust {key}"
        )
    print("  any edit of the file breaks the signature: sign again after reading the change")
    return 0


def trust(args: argparse.Namespace) -> int:
    from routines.safetext import one_line
    from routines.signing import SigningError, trust_key
    from routines.spec.paths import paths

    p = paths()
    try:
        key = trust_key(args.pubkey, p.allowed_signers, args.principal)
    except (SigningError, OSError) as exc:
        return die(one_line(str(exc)))
    if key.added:
        print(one_line(f"trusted {key.principal} ({key.fingerprint}) in {p.allowed_signers}"))
    else:
        print(one_line(f"{key.fingerprint} is trusted already, as {key.principal}"))
    return 0
