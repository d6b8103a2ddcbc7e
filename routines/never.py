"""The never-list: places of $HOME no routine may show a shell tool (`home = [...]`) or read
(`read:` globs), whatever it declares (tests/test_never.py).

Pure functions over paths: `routines.loader` refuses a routine that declares one,
`worker/` passes the expanded list to the sandbox (masks under a declared parent) and to the
read tool (a resolved path under one is refused at run time). config.toml's `[sandbox].never`
adds paths; `~/.vinos` (and VINOS_HOME wherever it is) is always on it, except the routine's
own workspace, which its shell tools may write anyway.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence

__all__ = [
    "DEFAULT_NEVER",
    "expand",
    "glob_reaches",
    "home_problem",
    "never_paths",
    "read_problem",
    "under",
]

# Credential stores, agent sockets, browser and mail profiles, shell histories, model keys.
# A directory here also hides every Unix socket in it: a read-only bind does not stop
# connect() on a socket, so an ssh-agent under ~/.1password would sign for the sandbox.
DEFAULT_NEVER = (
    "~/.vinos",  # secrets, every routine's state, other routines' files (webhook tokens)
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.netrc",
    "~/.password-store",
    "~/.git-credentials",
    "~/.docker",  # config.json holds registry credentials; Docker Desktop's socket lives here
    "~/.kube",
    "~/.local/share/keyrings",
    "~/.1password",
    "~/.config/op",
    "~/.ollama",  # the private key Ollama signs with
    "~/.config/rclone",
    "~/.Xauthority",
    # Browser, mail and sandboxed-app profiles: cookies, saved passwords, sessions.
    "~/.mozilla",
    "~/.thunderbird",
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/BraveSoftware",
    "~/snap",
    "~/.var/app",
    # Shell and REPL histories: tokens pasted on a command line end up here.
    "~/.bash_history",
    "~/.zsh_history",
    "~/.histfile",
    "~/.local/share/fish",
    "~/.python_history",
    "~/.psql_history",
    "~/.mysql_history",
    "~/.node_repl_history",
    "~/.lesshst",
)

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


def never_paths(home: str, vinos_home: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The never-list for a user whose real home is `home`, as absolute normalised paths.

    Each entry is given as written and, when a symlink leads elsewhere, as its real target
    too: hiding ~/.ssh must hide ~/dotfiles/ssh when ~/.ssh points there. Raises ValueError
    for an extra entry that is not `~/...` or absolute, or is all of `~` or `/`.
    """
    out: list[str] = []
    for entry in (*DEFAULT_NEVER, vinos_home, *extra):
        path = expand(entry, home)
        if path in ("/", home.rstrip("/") or "/"):
            raise ValueError(f"never-list entry {entry!r} would hide all of {path}")
        for p in (path, os.path.realpath(path)):
            if p not in out:
                out.append(p)
    return tuple(out)


def under(path: str, parent: str) -> bool:
    """Whether `path` is `parent` or below it (both absolute and normalised)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def home_problem(entry: str, home: str, never: Sequence[str]) -> str | None:
    """Why `entry` of `home = [...]` cannot be declared, or None. `home` is the real home."""
    if not entry.startswith("~/"):
        return f'expected a path starting with "~/", found "{entry}"'
    try:
        path = expand(entry, home)
    except ValueError as exc:
        return f'"{entry}": {exc}'
    if path == home.rstrip("/"):
        return "all of ~ cannot be shown to a shell tool: name the directories it needs"
    if "/../" in entry + "/" or "/./" in entry + "/":
        return f'"{entry}": . and .. components are not allowed'
    real = os.path.realpath(path)
    for n in never:
        if under(path, n) or under(real, n):
            return f'"{entry}" is on the never-list ({_tilde(n, home)}): no routine may see it'
    return None


def read_problem(
    pattern: str, home: str, never: Sequence[str], own: Sequence[str] = ()
) -> str | None:
    """Why the `read:` glob `pattern` may not be declared (it can reach a never-path), or None.

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
                f'"{pattern}" can reach {_tilde(n, home)}, which is on the never-list: '
                "no routine may read it"
            )
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


def _tilde(path: str, home: str) -> str:
    return "~" + path[len(home.rstrip("/")) :] if under(path, home) else path
