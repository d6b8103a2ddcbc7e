"""What one shell tool call may see and do: the input of the bwrap argv builder.

`routine_policy` is the policy for one routine (tests/sandbox/test_sandbox_argv.py::
test_routine_policy_allowlist_masks_and_environment): an allowlist (the system dirs, the declared
`home = [...]` paths read-only, the workspace and the run's scratch read-write, nothing else of
$HOME). `build_argv` turns a policy and the host layout into bwrap's argv without looking at
anything else. The never-list is data given by the caller (routines/spec/never.py): this package
imports nothing of ours.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.binaries import DEFAULT_BWRAP

__all__ = [
    "ENV_NAMES",
    "Limits",
    "ShellPolicy",
    "UnsafeValue",
    "check_path",
    "routine_policy",
    "with_installs",
]

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# The whole environment of every sandbox (bwrap --clearenv first), and the capability card's
# `environment` line: never a secret. A sandbox that reaches the network also gets the egress
# proxy's address (sandbox/netns.py proxy_env).
ENV_NAMES = ("HOME", "PATH", "TERM", "LANG")


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
    tmp_size_mb: int = 64  # the sandbox's /tmp tmpfs at most (a quarter of run_memory_mb)
    # Per call, over all its processes together: their memory with /tmp's (sandbox/limits.py),
    # and the quota of the writable dirs together, kept during and after the call
    # (sandbox/quota.py).
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

    ro_binds: tuple[str, ...]  # visible read-only at the same path (besides /usr, /etc, …)
    # The only writable host paths (workspace, run scratch): bound from directory fds the
    # runner opens with O_NOFOLLOW (bwrap --bind-fd), so a link planted in their place
    # between two calls is never followed.
    rw_binds: tuple[str, ...]
    masks: tuple[str, ...]  # hidden under the binds: empty tmpfs (dir) or /dev/null (file)
    cwd: str  # the working directory, normally the run's scratch dir
    # False: a namespace with only its own loopback. True: any internet host, ports 80 and
    # 443, through the egress proxy. A tuple of "host" or "host:port" entries: only those
    # (sandbox/netns.py, sandbox/egress.py).
    network: bool | tuple[str, ...] = False
    # network = true may reach LAN addresses too ([sandbox].lan = true in config.toml).
    lan: bool = False
    # The whole environment (bwrap --clearenv first): HOME PATH TERM LANG and never a secret.
    env: tuple[tuple[str, str], ...] = ()
    limits: Limits = field(default_factory=Limits)
    # `home = [...]` and then the credential grants: (real source, path in the sandbox),
    # read-only, skipped when missing.
    declared: tuple[tuple[str, str], ...] = ()
    dirs: tuple[str, ...] = ()  # empty directories on the read-only root, e.g. $HOME
    bwrap: str = DEFAULT_BWRAP  # [sandbox].bwrap, checked by sandbox/binaries.py before use
    quota_dirs: tuple[str, ...] = ()  # writable dirs held together to limits.workspace_mb
    # Writable dirs that are the person's (`write = [...]`): shown as overlays whose copy-back
    # keeps out dot-names, HEAD and names matching `kept_names` (sandbox/copyback.py Guard),
    # and read-only where no overlay can be built; never written live
    # (tests/routines/test_redteam_writes.py::
    # test_a_repository_the_shell_makes_in_a_write_folder_runs_nothing_on_the_host).
    kept: tuple[str, ...] = ()
    kept_names: tuple[str, ...] = ()


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
    workspace: Path,
    scratch_dir: Path,
    network: bool | tuple[str, ...],
    declared: Sequence[str] = (),
    never: Sequence[str] = (),
    limits: Limits = Limits(),
    environ: Mapping[str, str] | None = None,
    bwrap: str = DEFAULT_BWRAP,
    credentials: Sequence[str] = (),
    never_names: Sequence[str] = (),
    lan: bool = False,
    writable: Sequence[str] = (),
) -> ShellPolicy:
    """The policy for one routine's shell calls (docs/security.md says what it lets through).

    Of $HOME only the `declared` paths (`~/...`, read-only; `never` paths below them are
    masked) and an empty $HOME to stand in; writable: the run's scratch dir (the working
    directory) and the routine's workspace. No state dir, no other routine, no secret
    (ANTHROPIC_API_KEY included), with network or without. `never` are absolute paths
    (routines.spec.never.never_paths). Raises UnsafeValue, also for a declared path on `never`.

    `credentials` (`~/...`, checked by the caller: routines.spec.never.credential_problem) are
    bound read-only after the declared paths, even when on `never`: a grant is the one way a
    never-path reaches a sandbox, and the caller narrows `network` to its hosts. Below each
    declared path, and below each grant of an ordinary folder, every file or folder whose
    name matches one of `never_names` (fnmatch, case-insensitive, a leading dot matched too)
    is masked as well; a grant that names a credential is bound whole (`_masks`).

    `writable` (`~/...` folders, checked by the caller as home entries are) are writable at
    their own path, masked as declared paths are, through an overlay whose copy-back keeps
    out dot-names, repositories and credential names (`kept`; read-only where the kernel
    cannot build the overlay). Each must be a folder whose
    path holds no link (it is bound from a descriptor opened with O_NOFOLLOW, its parents
    resolved here), and it stays out of the run's workspace quota: it is the person's folder.
    """
    env_in = os.environ if environ is None else environ
    real_home = _real(home, "HOME")
    if real_home == "/":
        raise UnsafeValue("HOME is /: it would show the whole machine to the sandbox")
    workspace_real = _writable(_real_parent(workspace, "workspace"), real_home)
    scratch = _writable(_real_parent(scratch_dir, "scratch dir"), real_home)
    binds: list[tuple[str, str]] = []
    for entry in declared:
        dest = _expand(entry, real_home)
        if dest == real_home:
            raise UnsafeValue("home: all of ~ cannot be shown to a shell tool")
        source = check_path(os.path.realpath(dest), "home path")
        for n in never:
            if _under(dest, n) or _under(source, n):
                raise UnsafeValue(f"home: {entry!r} is on the never-list ({n})")
        binds.append((source, dest))
    granted: list[tuple[str, str]] = []
    for entry in credentials:
        dest = _expand(entry, real_home, "credential")
        if dest == real_home:
            raise UnsafeValue("credential: all of ~ cannot be granted")
        granted.append((check_path(os.path.realpath(dest), "credential path"), dest))
    written = _write_folders(writable, real_home, never)
    masks = _masks([*binds, *((w, w) for w in written)], granted, never, never_names)
    values = {
        "HOME": real_home,
        "PATH": env_in.get("PATH") or DEFAULT_PATH,
        "TERM": env_in.get("TERM") or "dumb",
        "LANG": env_in.get("LANG") or "C.UTF-8",
    }
    env = [(name, values[name]) for name in ENV_NAMES]
    for name, value in env:
        if "\0" in value or "\n" in value:
            raise UnsafeValue(f"environment variable {name} holds a NUL or newline")
    return ShellPolicy(
        ro_binds=(),
        rw_binds=tuple(dict.fromkeys((workspace_real, scratch, *written))),
        masks=tuple(masks),
        cwd=scratch,
        network=network,
        lan=lan,
        env=tuple(env),
        limits=limits,
        declared=tuple(binds + granted),
        dirs=(real_home,),
        bwrap=bwrap,
        # One quota over both together (sandbox/quota.py).
        quota_dirs=tuple(dict.fromkeys((workspace_real, scratch))),
        kept=tuple(dict.fromkeys(written)),
        kept_names=tuple(n.lower() for n in never_names),
    )


def with_installs(
    policy: ShellPolicy,
    installs: Sequence[str],
    *,
    never: Sequence[str] = (),
    never_names: Sequence[str] = (),
) -> ShellPolicy:
    """`policy` with an MCP server's installation (`installs`: absolute real folders or files,
    routines/mcpinstall.py) bound read-only at the same path, masked as a declared home entry
    is: every credential-named file below it hidden (a `.env` beside a server's code is the
    person's, not the server's: tests/cli/test_cli_validate_connect.py::
    test_a_servers_install_folder_is_masked_like_a_home_entry). An installation's own code
    and public data stay: a module named like a credential (`pygments/token.py`) and a PEM
    without a private key (certifi's CA bundle) are what the program runs on."""
    binds = tuple(check_path(p, "install path") for p in installs)
    masks = list(policy.masks)
    for root in binds:  # a root that is a file is the program itself: bound, never masked
        for found in _install_secrets(root, never_names, never):
            if found not in masks:
                masks.append(check_path(found, "credential file"))
    return dataclasses.replace(
        policy, ro_binds=tuple(dict.fromkeys((*policy.ro_binds, *binds))), masks=tuple(masks)
    )


# What an installation runs: a file with one of these suffixes is code, whatever its name.
CODE_SUFFIXES = (".py", ".pyc", ".pyi", ".so", ".js", ".mjs", ".cjs", ".ts", ".mts", ".cts")


def _install_secrets(root: str, names: Sequence[str], never: Sequence[str]) -> list[str]:
    """The credential-named files below an installation, its code and public data left out,
    and its never-paths and unlistable folders (masked whole, as `_named` does). Unlike a home
    entry, a folder named like a credential is walked into, not masked whole: in an
    installation it is a package (`tokenizers/`, `oauthlib/.../tokens/`)."""
    if not names or not os.path.isdir(root) or os.path.islink(root):
        return []
    found: list[str] = []
    seen = 0
    todo = [root]
    while todo:
        top = todo.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            if top == root:
                raise UnsafeValue(f"install: {root} cannot be listed to hide its secrets") from None
            found.append(top)
            continue
        seen += len(entries)
        if seen > MAX_WALK:
            raise UnsafeValue(
                f"install: {root} holds more than {MAX_WALK:,} files and folders; each is checked "
                "for credential names before it is shown: install the server in a prefix of its own"
            )
        for e in entries:
            if any(_under(e.path, n) for n in never):
                found.append(e.path)
            elif e.is_dir(follow_symlinks=False):
                todo.append(e.path)
            elif _named_like(e.name, names) and not _installed_code(e.path):
                found.append(e.path)
    return sorted(found)


def _named_like(name: str, names: Sequence[str]) -> bool:
    low = name.lower()
    return any(fnmatch.fnmatchcase(low, n) for n in names)


def _installed_code(path: str) -> bool:
    """Whether `path`, named like a credential inside an installation, is code or public data
    the program needs rather than a secret."""
    low = path.lower()
    if low.endswith(CODE_SUFFIXES) or low.endswith(".d.ts") or low.endswith(".map"):
        return True
    if low.endswith(".pem") and os.path.isfile(path) and not os.path.islink(path):
        try:
            with open(path, "rb") as f:
                head = f.read(4 << 20)
        except OSError:
            return False
        return b"PRIVATE KEY" not in head  # a certificate bundle; a key stays masked
    return False


def _masks(
    binds: Sequence[tuple[str, str]],
    granted: Sequence[tuple[str, str]],
    never: Sequence[str],
    never_names: Sequence[str],
) -> list[str]:
    """The never-paths a declared bind could show, then the credential-named files below the
    declared binds; never a granted path itself (bwrap would mount the mask over the grant).

    A grant that names a credential (a never-path or inside one, or a credential-named file
    or folder) is bound whole: naming it is the grant. A grant of an ordinary folder is
    masked as the same folder declared in `home` would be, or `[[credentials]] path =
    "~/dotfiles"` would show the gh login linked from ~/.config/gh that `home = ["~/dotfiles"]`
    hides (tests/sandbox/test_escape_creds.py::
    test_a_grant_of_an_ordinary_folder_is_masked_as_a_declared_one)."""
    exact = {p for pair in granted for p in pair}
    binds = [*binds, *(g for g in granted if not _names_a_credential(g, never, never_names))]
    masks: list[str] = []
    for n in never:
        inside = any(_under(n, d) or _under(n, s) for s, d in binds)
        if inside and n not in masks and n not in exact:
            masks.append(check_path(n, "never-list path"))
    for source, dest in binds:
        # A credential-named path declared itself (validate refuses it) is masked whole.
        if _names_a_credential((source, dest), (), never_names) and source not in exact:
            masks.append(check_path(source, "credential file"))
            continue
        for found in _named(source, never_names, never, MAX_WALK):
            if found not in masks and found not in exact:
                masks.append(check_path(found, "credential file"))
    return masks


def _names_a_credential(
    pair: tuple[str, str], never: Sequence[str], never_names: Sequence[str]
) -> bool:
    """Whether a granted (source, dest) is a never-path, inside one, or credential-named."""
    for path in pair:
        low = os.path.basename(path).lower()
        if any(_under(path, n) for n in never):
            return True
        if any(fnmatch.fnmatchcase(low, n) for n in never_names):
            return True
    return False


# Write folders of one routine: each is an overlay of the call (sandbox/overlayholder.py).
MAX_WRITE_FOLDERS = 32

# Entries looked at below the declared paths to find credential-named files: past this the
# policy is refused (fail closed) rather than a folder shown with its tokens unmasked.
MAX_WALK = 200_000


def _named(root: str, names: Sequence[str], never: Sequence[str], cap: int) -> list[str]:
    """Every path below `root` whose name matches `names`, without following links or going
    into a match or a never-path (each is masked whole), and every folder below it that
    cannot be listed. Raises UnsafeValue past `cap`, or when `root` cannot be listed."""
    if not names:
        return []
    found: list[str] = []
    todo, seen = [root], 0
    while todo:
        top = todo.pop()
        try:
            entries = list(os.scandir(top))
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone, or a declared file
        except OSError:
            # Not listable is not closed: a folder with x but no r (0311) is entered by
            # name, and the sandbox (same uid) could read a guessed `token.txt` in it.
            # What cannot be checked is masked whole (tests/sandbox/test_redteam_masks.py).
            if top != root:
                found.append(top)
                continue
            raise UnsafeValue(
                f"home: {root} cannot be listed, so the credential-named files in it cannot be "
                "found and masked: give it read permission, or declare another folder"
            ) from None
        seen += len(entries)
        if seen > cap:
            raise UnsafeValue(
                f"home: {root} holds more than {cap:,} files and folders; each is checked for "
                "credential names (.env, credentials*, *token*, *.pem, …) before it is shown: "
                "declare a narrower folder"
            )
        for e in entries:
            low = e.name.lower()
            if any(fnmatch.fnmatchcase(low, n) for n in names):
                found.append(e.path)
            elif e.is_dir(follow_symlinks=False) and not any(_under(e.path, n) for n in never):
                todo.append(e.path)
    return sorted(found)


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _real_parent(path: Path, what: str) -> str:
    """`path` with its parent resolved but not its last component: a link there must make
    the runner's O_NOFOLLOW open fail, never be bound in its target's place."""
    text = os.fspath(path)
    parent = _real(Path(os.path.dirname(text) or "/"), what)
    return check_path(os.path.join(parent, os.path.basename(text)), what)


def _real(path: Path, what: str) -> str:
    text = os.fspath(path)
    if "\0" in text or "\n" in text or "\r" in text:
        raise UnsafeValue(f"{what} {text!r} holds a NUL, newline or carriage return")
    if not os.path.isabs(text):
        raise UnsafeValue(f"{what} {text!r} is not absolute")
    return check_path(os.path.realpath(text), what)


_SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/dev", "/tmp")


def _write_folders(writable: Sequence[str], home: str, never: Sequence[str]) -> list[str]:
    if len(writable) > MAX_WRITE_FOLDERS:
        raise UnsafeValue(f"write: more than {MAX_WRITE_FOLDERS} folders")
    return [_write_folder(entry, home, never) for entry in writable]


def _write_folder(entry: str, home: str, never: Sequence[str]) -> str:
    """A `write` entry's folder, refused when it is ~ itself, reached through a link (the
    runner opens it with O_NOFOLLOW and binds that descriptor), on the never-list or
    holding an entry of it."""
    dest = _expand(entry, home, "write")
    if dest == home:
        raise UnsafeValue("write: all of ~ cannot be writable")
    if os.path.realpath(dest) != dest:
        raise UnsafeValue(f"write: {entry!r} is reached through a link; name the folder itself")
    for n in never:
        if _under(dest, n):
            raise UnsafeValue(f"write: {entry!r} is on the never-list ({n})")
        # Masked where it is, it would move with a rename of a folder that holds it, and be
        # bare at the next run (tests/routines/test_redteam_writes.py::
        # test_a_never_entry_below_a_write_folder_is_moved_out_of_its_mask).
        if _under(n, dest):
            raise UnsafeValue(f"write: {entry!r} holds {n}, on the never-list")
    return _writable(check_path(dest, "write folder"), home)


def _writable(path: str, home: str) -> str:
    """Refuse a writable dir that would expose more than itself (/, /usr, a parent of HOME)."""
    for other in (home, *_SYSTEM):
        if other == path or other.startswith(path.rstrip("/") + "/"):
            raise UnsafeValue(f"{path!r} cannot be writable in the sandbox: it holds {other}")
    return path


def _expand(entry: str, home: str, what: str = "home") -> str:
    if "\0" in entry or "\n" in entry or "\r" in entry or not entry.startswith("~/"):
        raise UnsafeValue(f'{what}: {entry!r}: expected a path starting with "~/"')
    parts = entry[2:].split("/")
    if any(p in (".", "..") for p in parts):
        raise UnsafeValue(f"{what}: {entry!r}: . and .. components are not allowed")
    return os.path.normpath(home + entry[1:])
