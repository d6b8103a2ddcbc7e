"""The never-list: a catalog of the places of $HOME that hold credentials, which no routine
may show a shell tool (`home = [...]`) or read (`read:` globs), whatever it declares; the
folders too broad to declare at all; and the one way a credential reaches a sandbox, a grant
bound to hosts (`[[agent.credentials]]`, checked by `credential_problem`).

Pure functions over paths: `routines.spec.loader` refuses a routine that declares one,
`worker/` passes the expanded list to the sandbox (masks under a declared parent) and to the
read tool (a resolved path under one is refused at run time). config.toml's `[sandbox].never`
adds paths; `~/.vinos` (and VINOS_HOME wherever it is) is always on it, except the routine's
own workspace, which its shell tools may write anyway.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "BROAD",
    "CATALOG",
    "DEFAULT_NEVER",
    "NAME_PATTERNS",
    "OVERRIDES",
    "SYSTEM_NEVER",
    "Entry",
    "broad_places",
    "broad_problem",
    "catalog_places",
    "credential_problem",
    "describe",
    "expand",
    "glob_reaches",
    "holds",
    "home_problem",
    "linked_in",
    "name_pattern",
    "never_paths",
    "read_problem",
    "runs_as_you",
    "under",
    "write_problem",
]


@dataclass(frozen=True, slots=True)
class Entry:
    """One place of $HOME a routine never sees unless it grants it as a credential."""

    path: str  # `~/...` as the user knows it
    holds: str  # what is there, in plain words: shown in every refusal naming it


# Credential stores, agent sockets, browser and mail profiles, shell histories, model keys.
# A directory here also hides every Unix socket in it: a read-only bind does not stop
# connect() on a socket, so an ssh-agent under ~/.1password would sign for the sandbox.
# Every entry is masked under any declared folder (sandbox/policy.py), refused as a `home`
# entry or `read:` glob (test_never.py), and can only reach a sandbox as a credential grant.
CATALOG = (
    # secrets, every routine's state, other routines' files (webhook tokens)
    Entry("~/.vinos", "vinos-routine's own secrets and state"),
    Entry("~/.ssh", "SSH keys"),
    Entry("~/.gnupg", "GnuPG keys"),
    Entry("~/.aws", "AWS CLI credentials"),
    Entry("~/.netrc", "passwords for FTP and HTTP hosts (netrc)"),
    Entry("~/.password-store", "pass password store"),
    Entry("~/.git-credentials", "git's stored HTTPS passwords"),
    Entry("~/.config/git/credentials", "git's stored HTTPS passwords"),
    Entry("~/.config/gh", "GitHub CLI login"),
    Entry("~/.config/glab-cli", "GitLab CLI login"),
    Entry("~/.config/hub", "hub (GitHub) login"),
    Entry("~/.config/gcloud", "Google Cloud CLI credentials"),
    Entry("~/.azure", "Azure CLI credentials"),
    Entry("~/.npmrc", "npm registry tokens"),
    Entry("~/.yarnrc", "yarn registry tokens"),
    Entry("~/.yarnrc.yml", "yarn registry tokens"),
    Entry("~/.pypirc", "PyPI upload tokens"),
    Entry("~/.cargo/credentials", "crates.io token (cargo)"),
    Entry("~/.cargo/credentials.toml", "crates.io token (cargo)"),
    Entry("~/.gem/credentials", "RubyGems API key"),
    Entry("~/.local/share/gem/credentials", "RubyGems API key"),
    # config.json holds registry credentials; Docker Desktop's socket lives here
    Entry("~/.docker", "Docker registry logins"),
    Entry("~/.kube", "Kubernetes cluster credentials"),
    Entry("~/.config/helm", "Helm repository credentials"),
    Entry("~/.terraform.d/credentials.tfrc.json", "Terraform Cloud token"),
    Entry("~/.terraformrc", "Terraform CLI settings and tokens"),
    Entry("~/.oci", "Oracle Cloud CLI keys"),
    Entry("~/.config/doctl", "DigitalOcean CLI token"),
    Entry("~/.fly", "Fly.io CLI token"),
    Entry("~/.vault-token", "HashiCorp Vault token"),
    Entry("~/.local/share/keyrings", "GNOME keyring"),
    Entry("~/.local/share/kwalletd", "KDE wallet"),
    Entry("~/.config/Bitwarden", "Bitwarden vault"),
    Entry("~/.config/Bitwarden CLI", "Bitwarden CLI vault"),
    Entry("~/.1password", "1Password agent and data"),
    Entry("~/.config/op", "1Password CLI login"),
    Entry("~/.ollama", "Ollama's private signing key"),
    Entry("~/.config/rclone", "rclone remotes and their tokens"),
    Entry("~/.Xauthority", "X display access cookie"),
    # Database clients' stored passwords.
    Entry("~/.pgpass", "PostgreSQL passwords (pgpass)"),
    Entry("~/.my.cnf", "MySQL client password"),
    # Build tools' and package managers' repository logins.
    Entry("~/.m2/settings.xml", "Maven repository passwords"),
    Entry("~/.gradle/gradle.properties", "Gradle repository credentials and signing keys"),
    Entry("~/.config/composer/auth.json", "Composer (PHP) repository tokens"),
    Entry("~/.composer/auth.json", "Composer (PHP) repository tokens"),
    Entry("~/.config/containers/auth.json", "Podman and Buildah registry logins"),
    # Coding agents: their API keys and OAuth logins.
    Entry("~/.codex", "Codex CLI login and API key"),
    Entry("~/.claude", "Claude Code login and sessions"),
    Entry("~/.claude.json", "Claude Code settings and account"),
    # Browser, mail, chat and sandboxed-app profiles: cookies, saved passwords, sessions.
    Entry("~/.mozilla", "Firefox profiles (cookies, saved passwords)"),
    Entry("~/.thunderbird", "Thunderbird profiles (mail, passwords)"),
    Entry("~/.config/google-chrome", "Chrome profiles (cookies, saved passwords)"),
    Entry("~/.config/chromium", "Chromium profiles (cookies, saved passwords)"),
    Entry("~/.config/BraveSoftware", "Brave profiles (cookies, saved passwords)"),
    Entry("~/.config/microsoft-edge", "Edge profiles (cookies, saved passwords)"),
    Entry("~/.config/vivaldi", "Vivaldi profiles (cookies, saved passwords)"),
    Entry("~/.config/opera", "Opera profiles (cookies, saved passwords)"),
    Entry("~/.config/Slack", "Slack sessions (cookies, workspace tokens)"),
    Entry("~/.config/discord", "Discord session token"),
    Entry("~/snap", "snap apps' data"),
    Entry("~/.var/app", "Flatpak apps' data"),
    # Shell and REPL histories: tokens pasted on a command line end up here.
    Entry("~/.bash_history", "shell history"),
    Entry("~/.zsh_history", "shell history"),
    Entry("~/.histfile", "shell history"),
    Entry("~/.local/share/fish", "fish shell history"),
    Entry("~/.python_history", "Python REPL history"),
    Entry("~/.psql_history", "psql history"),
    Entry("~/.mysql_history", "MySQL client history"),
    Entry("~/.node_repl_history", "Node REPL history"),
    Entry("~/.lesshst", "less history"),
)
DEFAULT_NEVER = tuple(e.path for e in CATALOG)

# Variables that move a store away from its catalog place: (variable, the catalog place it
# replaces). Every catalog entry at or below that place is hidden at the moved place too, as
# well as at the default (a store may exist in both). KUBECONFIG is a `:`-separated list of
# files. Which environment counts: the one of the process that builds the never-list, so at
# run time the daemon's (the worker inherits it; the sandbox itself gets none of these
# variables), and for `validate` the user's shell. Set them in the user manager's environment
# (~/.config/environment.d) so both agree (tests/routines/spec/test_credentials.py::
# test_the_catalog_follows_the_environment_that_moves_a_store).
OVERRIDES = (
    ("XDG_CONFIG_HOME", "~/.config"),
    ("XDG_DATA_HOME", "~/.local/share"),
    ("GH_CONFIG_DIR", "~/.config/gh"),
    ("CLOUDSDK_CONFIG", "~/.config/gcloud"),
    ("AZURE_CONFIG_DIR", "~/.azure"),
    ("CARGO_HOME", "~/.cargo"),
    ("DOCKER_CONFIG", "~/.docker"),
    ("KUBECONFIG", "~/.kube"),
    ("GNUPGHOME", "~/.gnupg"),
    ("PASSWORD_STORE_DIR", "~/.password-store"),
    ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws"),
    ("AWS_CONFIG_FILE", "~/.aws"),
    ("NPM_CONFIG_USERCONFIG", "~/.npmrc"),
    ("REGISTRY_AUTH_FILE", "~/.config/containers/auth.json"),
    ("CODEX_HOME", "~/.codex"),
    ("CLAUDE_CONFIG_DIR", "~/.claude"),
)

# The XDG base folders a variable may move: a moved one is as broad as its default.
_BROAD_MOVED = (
    ("XDG_CONFIG_HOME", "~/.config"),
    ("XDG_DATA_HOME", "~/.local/share"),
    ("XDG_STATE_HOME", "~/.local/state"),
    ("XDG_CACHE_HOME", "~/.cache"),
)

# File and folder names masked (sandbox) and refused (read tool) wherever they are below a
# declared folder: an app's folder the catalog does not know may still hold its token.
# Unlike a glob's, these wildcards match a leading dot too: `.gh_token` is a token file.
NAME_PATTERNS = (
    Entry(".env", "an environment file (API keys, database passwords)"),
    Entry(".env.*", "an environment file (API keys, database passwords)"),
    Entry(".envrc", "a direnv environment file (API keys, database passwords)"),
    Entry("credentials*", "a credentials file"),
    Entry("*token*", "a token file"),
    Entry("*.pem", "a key or certificate (PEM)"),
)

# Folders that hold many apps' secrets at once: an entry must name the app's own folder.
BROAD = (
    "~",
    "~/.config",
    "~/.local",
    "~/.local/share",
    "~/.local/state",
    "~/.cache",
    "~/.var",
    "~/snap",
)

# Kernel and runtime interfaces, never read by the read tool: /proc/*/environ holds the
# worker's environment, /run the user's sockets (sandbox/readtool.py refuses them too).
SYSTEM_NEVER = ("/proc", "/sys", "/dev", "/run")

_MAGIC = re.compile(r"[*?\[]")


def expand(path: str, home: str) -> str:
    """`~/x` → `<home>/x`, normalised; an absolute path normalised. Raises ValueError."""
    if "\0" in path or "\n" in path or "\r" in path:
        raise ValueError("holds a NUL, newline or carriage return")
    if path == "~":
        return home
    if path.startswith("~/"):
        path = home.rstrip("/") + path[1:]
    if not path.startswith("/"):
        raise ValueError('expected a path starting with "~/" or "/"')
    return os.path.normpath(path)


def never_paths(
    home: str,
    vinos_home: str,
    extra: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> tuple[str, ...]:
    """The never-list for a user whose real home is `home`, as absolute normalised paths.

    Each entry is given as written and, when a symlink leads elsewhere, as its real target
    too: hiding ~/.ssh must hide ~/dotfiles/ssh when ~/.ssh points there. A store moved by a
    variable of `environ` (OVERRIDES; os.environ when None) is hidden at both places. Raises
    ValueError for an extra entry that is not `~/...` or absolute, or is all of `~` or `/`.
    """
    out: list[str] = []
    moved = [p for p, _ in catalog_places(home, environ) if not p.startswith("~")]
    for entry in (*DEFAULT_NEVER, *moved, vinos_home, *extra):
        path = expand(entry, home)
        if path in ("/", home.rstrip("/") or "/"):
            raise ValueError(f"never-list entry {entry!r} would hide all of {path}")
        for p in (path, os.path.realpath(path)):
            if p not in out:
                out.append(p)
    return tuple(out)


def catalog_places(
    home: str, environ: Mapping[str, str] | None = None
) -> tuple[tuple[str, str], ...]:
    """(path, what it holds) for every catalog entry: its `~/...` place, then each absolute
    place a variable of `environ` moves it to (values that are not one app's own place,
    such as "", a relative path, `/`, the home or a parent of it, are ignored)."""
    env = os.environ if environ is None else environ
    out = [(e.path, e.holds) for e in CATALOG]
    for var, place in OVERRIDES:
        targets = env.get(var, "").split(":") if var == "KUBECONFIG" else [env.get(var, "")]
        for target in (os.path.normpath(t) for t in targets if t.startswith("/")):
            if "\0" in target or "\n" in target or under(home, target):
                continue
            for e in CATALOG:
                if e.path == place or e.path.startswith(place + "/"):
                    out.append((target + e.path[len(place) :], e.holds))
    return tuple(dict.fromkeys(out))


def broad_places(home: str, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """BROAD as absolute paths, with the XDG base folders where their variables move them."""
    env = os.environ if environ is None else environ
    out = [expand(b, home) for b in BROAD]
    for var, _default in _BROAD_MOVED:
        value = env.get(var, "")
        if value.startswith("/") and "\0" not in value and "\n" not in value:
            out.append(os.path.normpath(value))
    return tuple(dict.fromkeys(out))


def under(path: str, parent: str) -> bool:
    """Whether `path` is `parent` or below it (both absolute and normalised)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def holds(
    path: str, home: str, extra: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> str:
    """What the never-path `path` (absolute) holds, in plain words, for a refusal. `extra`
    are config.toml's `[sandbox].never` entries as written; what is neither is VINOS_HOME."""
    added = ((x, "added by config.toml [sandbox].never") for x in extra)
    for place, held in (*catalog_places(home, environ), *added):
        try:
            p = expand(place, home)
        except ValueError:
            continue
        if path in (p, os.path.realpath(p)):
            return held
    return "vinos-routine's own secrets and state"


def describe(entry: str, home: str, environ: Mapping[str, str] | None = None) -> str | None:
    """What the credential grant `entry` (`~/...`) gives, judged by its resolved path as well
    as by the path as written, for the capability card's credential lines; None for a plain
    folder or file. `home` is the real home the grant is resolved in.

    - A catalog entry, or a path inside one, or a link to either: what the entry holds.
    - A credential-named file or folder (`*token*`, …): what the name pattern says.
    - A folder that holds catalog entries without being one (`~/.config/git`, `~/.cargo`,
      `~/dotfiles` with ~/.config/gh linked into it): "hidden in it: …", since the sandbox
      masks them below a grant of an ordinary folder as below a `home` entry
      (tests/routines/test_redteam_card.py, tests/sandbox/test_escape_creds.py).
    """
    try:
        written = expand(entry, home)
    except ValueError:
        return None
    paths = dict.fromkeys((written, os.path.realpath(written)))
    places = [
        (held, p) for place, held in catalog_places(home, environ) for p in _places(place, home)
    ]
    for held, p in sorted(places, key=lambda hp: -len(hp[1])):
        if any(under(path, p) for path in paths):
            return held
    for path in paths:
        if pattern := name_pattern(posixpath.basename(path)):
            return pattern.holds
    inside = dict.fromkeys(
        held for held, p in places if any(under(p, path) and p != path for path in paths)
    )
    return "hidden in it: " + ", ".join(inside) if inside else None


def _places(entry: str, home: str) -> tuple[str, ...]:
    """A catalog place as written and, when a link leads elsewhere, its real target."""
    path = expand(entry, home)
    return tuple(dict.fromkeys((path, os.path.realpath(path))))


def name_pattern(name: str) -> Entry | None:
    """The NAME_PATTERNS entry a file or folder name matches, or None."""
    low = name.lower()
    return next((e for e in NAME_PATTERNS if fnmatch.fnmatchcase(low, e.path)), None)


def broad_problem(
    entry: str, home: str, key: str = "home", environ: Mapping[str, str] | None = None
) -> str | None:
    """Why `entry` (a `~/...` or absolute path) is too broad to declare, or None."""
    try:
        path = expand(entry, home)
    except ValueError:
        return None  # reported by the caller's own checks
    for b in broad_places(home, environ):
        if path == b:
            return (
                f'"{_tilde(path, home)}" holds many apps\' settings and secrets at once, so it '
                f'cannot be a {key}: name the app\'s own folder, such as "{_tilde(b, home)}/APP"'
            )
    return None


def home_problem(
    entry: str,
    home: str,
    never: Sequence[str],
    extra: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """Why `entry` of `home = [...]` cannot be declared, or None. `home` is the real home."""
    if not entry.startswith("~/") and entry != "~":
        return f'expected a path starting with "~/", found "{entry}"'
    try:
        path = expand(entry, home)
    except ValueError as exc:
        return f'"{entry}": {exc}'
    if path == home.rstrip("/"):
        return "all of ~ cannot be shown to a shell tool: name the app's own folder it needs"
    if "/../" in entry + "/" or "/./" in entry + "/":
        return f'"{entry}": . and .. components are not allowed'
    if problem := broad_problem(entry, home, "home entry", environ):
        return problem
    real = os.path.realpath(path)
    for n in never:
        if under(path, n) or under(real, n):
            return (
                f'"{entry}" is on the never-list ({_tilde(n, home)}: '
                f"{holds(n, home, extra, environ)}): "
                "no routine may see it; a command that needs it takes it as a credential "
                "([[agent.credentials]] or [[command.credentials]], bound to hosts)"
            )
    # Below a declared folder these names are masked; declared itself (or a folder inside
    # one), the file would be shown whole (tests/routines/spec/test_credentials.py::
    # test_a_credential_named_file_cannot_be_a_home_entry).
    for p in (path, real):
        below = p[len(home.rstrip("/")) + 1 :] if under(p, home) else posixpath.basename(p)
        for name in below.split("/"):
            if pattern := name_pattern(name):
                return (
                    f'"{entry}" is credential-named ("{name}": {pattern.holds}): no routine '
                    "may see it; a command that needs it takes it as a credential "
                    "([[agent.credentials]] or [[command.credentials]], bound to hosts)"
                )
    return None


# Folders of home whose files this user's own programs run, outside any sandbox: the shell's
# and the desktop's start-up files, autostart entries, systemd user units, environment.d,
# ~/.local/bin, a repository's hooks and config, direnv's .envrc, an editor's tasks. They are
# dot-names; and the folders on PATH (~/bin, ~/go/bin, as the environment of the process that
# decides names them), where a program written shadows a command (tests/routines/
# test_redteam_writes.py::test_a_write_folder_where_your_programs_start_from_is_refused).
RUNS_AS_YOU = ("~/bin",)


def runs_as_you(path: str, home: str, environ: Mapping[str, str] | None = None) -> str | None:
    """What makes `path` (absolute, normalised) a place this user's programs run files from,
    or None: a dot-name below `home`, or a folder on PATH (or ~/bin) at or below it."""
    if not under(path, home) or path == home.rstrip("/"):
        return None
    env = os.environ if environ is None else environ
    on_path = [d for d in env.get("PATH", "").split(":") if d.startswith("/")]
    for d in (*(expand(p, home) for p in RUNS_AS_YOU), *map(os.path.normpath, on_path)):
        if under(d, home) and d != home.rstrip("/") and (under(path, d) or under(d, path)):
            return f"{_tilde(d, home)}, on PATH"
    below = path[len(home.rstrip("/")) + 1 :]
    return next((n for n in below.split("/") if n.startswith(".")), None)


# Where a dotfiles repository's files are linked from: home's own dot-names, the folders
# below them, and these (a unit or an autostart entry linked in from the repository).
_LINKED_FROM = ("~/.config/systemd/user", "~/.config/autostart", "~/.local/bin")


def linked_in(path: str, home: str) -> str | None:
    """A dot-name of home (or a name in one of its folders, or in _LINKED_FROM) that is a
    link to a file at or below `path`, or None: ~/.bashrc → ~/dotfiles/bashrc makes
    ~/dotfiles a place your shell runs files from, whatever its own names are."""
    places = [home, *(expand(p, home) for p in _LINKED_FROM)]
    with contextlib.suppress(OSError):
        places += [e.path for e in os.scandir(home) if e.name.startswith(".") and _is_dir(e)]
    for place in places:
        try:
            entries = list(os.scandir(place))
        except OSError:
            continue
        for e in entries:
            hidden = place != home or e.name.startswith(".")
            if hidden and e.is_symlink() and under(os.path.realpath(e.path), path):
                return _tilde(e.path, home)
    return None


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def write_problem(
    entry: str,
    home: str,
    never: Sequence[str],
    extra: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """Why `entry` of `write = [...]` cannot be declared, or None: a home entry's rules, and
    two of a folder the model may rearrange. No never-list entry below it: a rename of the
    folder that holds one moves it out from under its name, unmasked at the next run
    (tests/routines/test_redteam_writes.py::
    test_a_never_entry_below_a_write_folder_is_moved_out_of_its_mask). And not where this
    user's programs start from (RUNS_AS_YOU): a file written there runs outside the sandbox."""
    if problem := home_problem(entry, home, never, extra, environ):
        return problem
    path = expand(entry, home)
    for p in (path, os.path.realpath(path)):
        name = runs_as_you(p, home, environ) or linked_in(p, home)
        if name:
            return (
                f'"{entry}" is where your own programs start from ("{name}": start-up files, '
                "autostart entries, systemd units, program folders): a file written there "
                "runs as you, outside any sandbox; name a folder of documents"
            )
        for n in never:
            if n != p and under(n, p):
                return (
                    f'"{entry}" holds {_tilde(n, home)} ({holds(n, home, extra, environ)}), '
                    "which is hidden by its name: a folder the routine may write can be "
                    "renamed, and the hidden one with it; name a folder that holds none"
                )
    return None


def credential_problem(entry: str, home: str, vinos_home: str) -> str | None:
    """Why `entry` cannot be granted as a credential path, or None: it must be a `~/...` path
    below $HOME, not a broad container, not inside VINOS_HOME (the API key lives there)."""
    if not entry.startswith("~/"):
        return f'expected a path starting with "~/", found "{entry}"'
    try:
        path = expand(entry, home)
    except ValueError as exc:
        return f'"{entry}": {exc}'
    if "/../" in entry + "/" or "/./" in entry + "/" or entry.rstrip("/") == "~":
        return f'"{entry}": expected one app\'s credential file or folder below ~'
    if problem := broad_problem(entry, home, "credential"):
        return problem
    ours = (vinos_home, expand("~/.vinos", home))
    for p in (path, os.path.realpath(path)):
        if any(under(p, v) or under(v, p) for v in ours):
            return f'"{entry}" is vinos-routine\'s own state ({vinos_home}): it is never granted'
        if not under(p, home) or p == home.rstrip("/"):
            return f'"{entry}" resolves to {p}, outside your home folder'
    return None


def read_problem(
    pattern: str,
    home: str,
    never: Sequence[str],
    own: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> str | None:
    """Why the `read:` glob `pattern` may not be declared (it can reach a never-path, a
    system interface, or its literal root is a broad container), or None.

    `own` are paths the routine may read although they are below a never-path (its own
    workspace): a pattern that starts with one of them literally is checked against the
    never-paths that are not its parents only.
    """
    try:
        parts = _parts(expand(pattern, home) if pattern.startswith("~") else pattern)
    except ValueError as exc:
        return f'"{pattern}": {exc}'
    mine = [o for o in own if _literal_prefix(parts, _parts(o))]
    for n in never:
        if any(under(o, n) for o in mine):
            continue
        if glob_reaches(parts, _parts(n)):
            return (
                f'"{pattern}" can reach {_tilde(n, home)} ({holds(n, home, extra)}), which is '
                "on the never-list: no routine may read it"
            )
    for system in SYSTEM_NEVER:
        if glob_reaches(parts, _parts(system)):
            return (
                f'"{pattern}" can reach {system}, a kernel or runtime interface (process '
                "environments, devices, sockets): the read tool never reads it"
            )
    root = "/" + "/".join(_literal_root(parts))
    if problem := broad_problem(root, home, "read: glob's root"):
        return f'"{pattern}": {problem}'
    return None


def glob_reaches(glob: Sequence[str], path: Sequence[str]) -> bool:
    """Whether a glob (components, `**` for any non-hidden dirs) can match `path` or anything
    below it. The same rules as sandbox/globs.py: a wildcard never matches a leading dot."""
    if not path:
        return True
    if not glob:
        return False
    head = glob[0]
    if head == "**":
        if glob_reaches(glob[1:], path):
            return True
        return not path[0].startswith(".") and glob_reaches(glob, path[1:])
    return _match_part(head, path[0]) and glob_reaches(glob[1:], path[1:])


def _match_part(pattern: str, name: str) -> bool:
    if not _MAGIC.search(pattern):
        return pattern == name
    if name.startswith(".") and not pattern.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, pattern)


def _parts(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.split("/") if p)


def _literal_prefix(glob: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    """Whether the glob's first components are exactly `prefix`, with no wildcard in them."""
    return len(glob) > len(prefix) and all(
        g == p and not _MAGIC.search(g) for g, p in zip(glob, prefix, strict=False)
    )


def _literal_root(parts: tuple[str, ...]) -> tuple[str, ...]:
    """The components before the first wildcard: the folder a glob reads from."""
    out: list[str] = []
    for part in parts:
        if _MAGIC.search(part) or part == "**":
            break
        out.append(part)
    return tuple(out)


def _tilde(path: str, home: str) -> str:
    return "~" + path[len(home.rstrip("/")) :] if under(path, home) else path
