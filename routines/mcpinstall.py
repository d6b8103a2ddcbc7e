"""What an MCP server's sandbox must see of its own installation, undeclared: the program
found on PATH, followed through its links to where it is really installed, and that
installation bound read-only (a venv such as pipx makes, an npm prefix's node_modules, or
a bin/ prefix such as nvm's), with the interpreter its `#!` line names. Nothing else of
$HOME is shown. tests/worker/test_worker_mcp_install.py holds the rules.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from routines.spec import McpServer
from routines.spec.never import broad_places, under

__all__ = ["Install", "InstallProblem", "changeable", "installer", "resolve_install"]

# Visible in every sandbox already (sandbox/argv.py binds them read-only).
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc")


class InstallProblem(Exception):
    """The server's program cannot be found or its installation cannot be shown."""


@dataclass(frozen=True, slots=True)
class Install:
    argv: tuple[str, ...]  # argv[0] the program's real path; `~/` words expanded
    binds: tuple[str, ...]  # real dirs (or files) bound read-only at the same path


def resolve_install(
    command: Sequence[str], *, home: str, path_env: str, never: Sequence[str] = ()
) -> Install:
    """`command` as the sandbox runs it, and what of the host it needs. `home` is the real
    home, `never` the never-list (absolute). Raises InstallProblem."""
    words = [_tilde(w, home) for w in command]
    found = _which(words[0], path_env)
    if found is None:
        raise InstallProblem(
            f"{command[0]!r} was not found on PATH ({path_env}); install it (pipx, npm) or "
            "give its full path"
        )
    real = os.path.realpath(found)
    binds: list[str] = []
    for path in (real, *_interpreters(real, path_env)):
        if problem := changeable(path):
            raise InstallProblem(problem)
        root = _root(path)
        if root is not None and not any(under(path, b) for b in binds):
            _check(root, home, never)
            binds = [b for b in binds if not under(b, root)] + [root]
    return Install((real, *words[1:]), tuple(binds))


def installer(
    *, home: str, path_env: str, never: Sequence[str] = ()
) -> Callable[[McpServer], tuple[tuple[str, ...], str]]:
    """routines.policy.Installer for this host: a server's installation folders, or why none
    could be found (shown on the card; the run refuses to start it)."""

    def resolve(server: McpServer) -> tuple[tuple[str, ...], str]:
        try:
            got = resolve_install(server.command, home=home, path_env=path_env, never=never)
        except InstallProblem as exc:
            return (), str(exc)
        return got.binds, ""

    return resolve


def _tilde(word: str, home: str) -> str:
    return home + word[1:] if word.startswith("~/") else word


def _which(word: str, path_env: str) -> str | None:
    if "/" in word:
        return os.path.abspath(word) if os.access(word, os.X_OK) else None
    for d in path_env.split(os.pathsep):
        candidate = os.path.join(d or ".", word)
        if d and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _interpreters(real: str, path_env: str) -> list[str]:
    """The real path of the interpreter a script's `#!` line names (through `env`)."""
    try:
        with open(real, "rb") as f:
            head = f.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    else:
        words = words[:1]
    if not words:
        return []
    found = _which(words[0], path_env)
    return [os.path.realpath(found)] if found else []


def _root(path: str) -> str | None:
    """The installation `path` belongs to, or None when the sandbox sees it already."""
    if any(under(path, s) for s in _SYSTEM):
        return None
    parts = path.split("/")
    for i in range(2, len(parts)):
        d = "/".join(parts[:i])
        if os.path.isfile(os.path.join(d, "pyvenv.cfg")):
            return d  # a venv (pipx, uv tool, a project's .venv)
    if "node_modules" in parts:
        return "/".join(parts[: parts.index("node_modules") + 1])  # the outermost: its deps
    parent = os.path.dirname(path)
    if os.path.basename(parent) == "bin" and os.path.isdir(os.path.join(parent, "..", "lib")):
        return os.path.dirname(parent)  # a prefix: ~/.nvm/versions/node/v20, /opt/x
    return path


def changeable(path: str, uid: int | None = None, gid: int | None = None) -> str | None:
    """Why someone other than this user or root could change what runs at `path` (a real
    path), or None. The file and every folder above it must be owned by this user or root,
    and writable by nobody else: not by others (a sticky folder, /tmp, protects the entries
    of its users), and not by a group other than this user's own or root's. A program in
    another user's folder ran as the person with the routine's grants
    (tests/cli/test_redteam_mcp_owner.py); sshd's StrictModes is the same rule."""
    import stat

    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    p = path
    while True:
        try:
            st = os.lstat(p)
        except OSError as exc:
            return f"the server's program {path} cannot be checked: {p}: {exc.strerror}"
        if st.st_uid not in (uid, 0):
            return (
                f"the server's program {path} can be changed by another user: {p} belongs to "
                f"uid {st.st_uid}; install it as yourself (pipx, npm) or as root"
            )
        sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if (st.st_mode & 0o002 and not sticky) or (
            st.st_mode & 0o020 and st.st_gid not in (gid, 0)
        ):
            return (
                f"the server's program {path} can be changed by another user: {p} is "
                f"writable by {'everyone' if st.st_mode & 0o002 else f'group {st.st_gid}'}; "
                f"chmod go-w {p}"
            )
        if p == "/":
            return None
        p = os.path.dirname(p)


def _check(root: str, home: str, never: Sequence[str]) -> None:
    broad = broad_places(home)  # moved XDG base folders are as broad as their defaults
    if root in broad or under(home, root):
        raise InstallProblem(
            f"the server is installed in {root}, which is too broad to show to its sandbox; "
            "install it with pipx or npm into a prefix of its own"
        )
    for n in never:
        if under(root, n) or under(n, root):
            raise InstallProblem(
                f"the server is installed in {root}, which is or holds {n} (on the never-list)"
            )
