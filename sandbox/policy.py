"""What one shell tool call may see and do: the input of the bwrap argv builder.

`routine_policy` is the policy DESIGN.md describes for one routine; `build_argv` turns a policy
and the host layout into bwrap's argv without looking at anything else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.binaries import DEFAULT_BWRAP

__all__ = [
    "DEFAULT_MASKS",
    "Limits",
    "ShellPolicy",
    "UnsafeValue",
    "check_path",
    "routine_policy",
]

# Hidden from every shell tool under the read-only $HOME (DESIGN.md "Sandbox"); config.toml's
# [sandbox].masks adds more. ~/.Xauthority is ours: with network = true the sandbox shares the
# host's abstract sockets, and the cookie would let a command drive the X display.
DEFAULT_MASKS = (
    "~/.vinos/secrets",
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.netrc",
    "~/.password-store",
    "~/.mozilla",
    "~/.config/chromium",
    "~/.config/google-chrome",
    "~/.Xauthority",
)

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class UnsafeValue(ValueError):
    """A path, command or variable that must never reach bwrap (NUL, newline, relative, `..`)."""


_LIMIT_FIELDS = (
    "file_size_mb",
    "open_files",
    "address_space_mb",
    "processes",
    "tmp_size_mb",
    "run_memory_mb",
    "workspace_mb",
)


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits set inside the sandbox before the command is exec'd."""

    file_size_mb: int = 64  # RLIMIT_FSIZE: no file written past this
    open_files: int = 256  # RLIMIT_NOFILE
    address_space_mb: int = 2048  # RLIMIT_AS: an 8 GB allocation fails
    processes: int = 256  # RLIMIT_NPROC, counted in the sandbox's own user namespace
    tmp_size_mb: int = 64  # size of the sandbox's /tmp tmpfs
    # Per call, over all its processes together (sandbox/limits.py): the watchdog's cap on
    # their summed memory, and the quota of the persistent dirs checked after the call.
    run_memory_mb: int = 2048
    workspace_mb: int = 256

    def __post_init__(self) -> None:
        for name in _LIMIT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{name}: expected a positive int, found {value!r}")


@dataclass(frozen=True, slots=True)
class ShellPolicy:
    """Everything one sandboxed shell call is given; all paths absolute and normalised."""

    ro_binds: tuple[str, ...]  # visible read-only, e.g. $HOME (besides /usr, /etc, …)
    rw_binds: tuple[str, ...]  # the only writable host paths: scratch dir, routine state dir
    masks: tuple[str, ...]  # hidden under the binds: empty tmpfs (dir) or /dev/null (file)
    cwd: str  # the working directory, normally the scratch dir
    # False: a namespace with only its own loopback. True: any host through the egress
    # proxy. A tuple of host names: only those (sandbox/netns.py, sandbox/egress.py).
    network: bool | tuple[str, ...] = False
    # The whole environment (bwrap --clearenv first): HOME PATH TERM LANG and never a secret.
    env: tuple[tuple[str, str], ...] = ()
    limits: Limits = field(default_factory=Limits)
    bwrap: str = DEFAULT_BWRAP  # [sandbox].bwrap, checked by sandbox/binaries.py before use
    quota_dirs: tuple[str, ...] = ()  # persistent writable dirs held to limits.workspace_mb


def check_path(path: str, what: str = "path") -> str:
    """`path` if it is absolute, normalised and one line; raises UnsafeValue otherwise."""
    if "\0" in path or "\n" in path or "\r" in path:
        raise UnsafeValue(f"{what} {path!r} holds a NUL, newline or carriage return")
    if not path.startswith("/"):
        raise UnsafeValue(f"{what} {path!r} is not absolute")
    if os.path.normpath(path) != path or path.startswith("//"):
        raise UnsafeValue(f"{what} {path!r} is not normalised (no ., .. or repeated /)")
    return path


def routine_policy(
    *,
    home: Path,
    state_dir: Path,
    scratch_dir: Path,
    network: bool | tuple[str, ...],
    extra_masks: Sequence[str] = (),
    limits: Limits = Limits(),
    environ: Mapping[str, str] | None = None,
    bwrap: str = DEFAULT_BWRAP,
) -> ShellPolicy:
    """The policy for one routine's shell calls (DESIGN.md "Sandbox").

    Read-only $HOME with the secret masks; writable: the scratch dir (the working directory)
    and the routine's own state dir; the other routines' state dirs (siblings of `state_dir`)
    are hidden. No secret is ever given, ANTHROPIC_API_KEY included, with network or without.
    Paths are resolved to real paths, so a mask cannot be dodged through a symlinked $HOME.
    Raises UnsafeValue.
    """
    env_in = os.environ if environ is None else environ
    real_home = _real(home, "HOME")
    if real_home == "/":
        raise UnsafeValue("HOME is /: binding it would show the whole machine to the sandbox")
    state = _writable(_real(state_dir, "state dir"), real_home)
    scratch = _writable(_real(scratch_dir, "scratch dir"), real_home)
    masks: list[str] = []
    for mask in (*DEFAULT_MASKS, *extra_masks):
        resolved = _expand(mask, real_home)
        if resolved not in masks:
            masks.append(resolved)
    # Other routines' outputs, memories and the ledger are not this routine's to read.
    state_root = os.path.dirname(state)
    if state_root not in masks and state_root != "/":
        masks.append(state_root)
    env = [
        ("HOME", real_home),
        ("PATH", env_in.get("PATH") or DEFAULT_PATH),
        ("TERM", env_in.get("TERM") or "dumb"),
        ("LANG", env_in.get("LANG") or "C.UTF-8"),
    ]
    for name, value in env:
        if "\0" in value or "\n" in value:
            raise UnsafeValue(f"environment variable {name} holds a NUL or newline")
    return ShellPolicy(
        ro_binds=(real_home,),
        rw_binds=tuple(dict.fromkeys((state, scratch))),
        masks=tuple(masks),
        cwd=scratch,
        network=network,
        env=tuple(env),
        limits=limits,
        bwrap=bwrap,
        quota_dirs=(state,),
    )


def _real(path: Path, what: str) -> str:
    text = os.fspath(path)
    if "\0" in text or "\n" in text or "\r" in text:
        raise UnsafeValue(f"{what} {text!r} holds a NUL, newline or carriage return")
    if not os.path.isabs(text):
        raise UnsafeValue(f"{what} {text!r} is not absolute")
    return check_path(os.path.realpath(text), what)


_SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/dev", "/tmp")


def _writable(path: str, home: str) -> str:
    """Refuse a writable dir that would expose more than itself (/, /usr, a parent of HOME)."""
    for other in (home, *_SYSTEM):
        if other == path or other.startswith(path.rstrip("/") + "/"):
            raise UnsafeValue(f"{path!r} cannot be writable in the sandbox: it holds {other}")
    return path


def _expand(mask: str, home: str) -> str:
    if mask == "~":
        raise UnsafeValue("a mask of all of ~ would hide $HOME; remove it from [sandbox].masks")
    if mask.startswith("~/"):
        mask = home + mask[1:]
    if "\0" in mask or "\n" in mask or not mask.startswith("/"):
        raise UnsafeValue(f'mask {mask!r}: expected a path starting with "~/" or "/"')
    return os.path.normpath(mask)
