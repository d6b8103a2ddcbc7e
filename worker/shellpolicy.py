"""The one place a Routine becomes a sandbox ShellPolicy (for the worker and `vinos-routine
sandbox`, so the CLI runs a command exactly as the routine's shell tool would)."""

from __future__ import annotations

import os
from pathlib import Path

from routines.policy import action_scope, never_for, server_scope, shell_scope
from routines.spec import Action, McpServer, Permissions, Routine
from routines.spec.config import SandboxSettings
from routines.spec.never import NAME_PATTERNS, broad_problem, credential_problem
from routines.spec.paths import Paths
from sandbox import Limits, ShellPolicy, UnsafeValue, routine_policy
from worker.writetool import make_folder

__all__ = ["limits_for", "never_for", "shell_policy_for", "shell_timeout_for"]
# (`shell_policy_for(..., action=)` gives an approved action its own network and home.)


def limits_for(settings: SandboxSettings) -> Limits:
    """config.toml [sandbox] → the sandbox's resource limits."""
    return Limits(
        file_size_mb=settings.max_file_size_mb,
        open_files=settings.max_open_files,
        address_space_mb=settings.max_address_space_mb,
        processes=settings.max_processes,
        run_memory_mb=settings.max_run_memory_mb,
        workspace_mb=settings.max_workspace_mb,
    )


def shell_policy_for(
    routine: Routine,
    *,
    paths: Paths,
    scratch_dir: Path,
    settings: SandboxSettings,
    action: Action | None = None,
    mcp: McpServer | None = None,
    permissions: Permissions | None = None,
) -> ShellPolicy:
    """The policy for `routine`'s shell calls: its workspace and `scratch_dir` writable, its
    declared `home = [...]` read-only, nothing else of $HOME.

    Creates the workspace and scratch dirs when missing (bwrap can only bind what exists);
    their parents are never bound, so no sandbox can put a link where they are. No secret
    reaches the sandbox: not the API key, with network or without.
    Raises sandbox.UnsafeValue (a ValueError) for a path bwrap must never see, or a declared
    path on the never-list.

    With `action`, the same sandbox with that action's own `network` and `home` instead of
    the routine's: an approved action sees what it declares, no more (and no credential).

    The routine's credential grants are bound read-only, and its calls then reach only the
    union of their hosts and its own host list (Routine.egress).

    With `mcp`, that MCP server's own `home`, network and credentials (McpServer.egress).

    The routine's `write = [...]` folders are read-write under `permissions` "files" and
    "everything" (the run's, as the supervisor decided; the file's own when None), created
    when missing; under "ask" they are read-only like a home entry, and a write there goes
    through write_file, which asks the person (worker/writetool.py).
    """
    workspace = paths.workspace(routine.name)
    for d in (workspace, scratch_dir):
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        never = never_for(paths, settings)
    except ValueError as exc:
        raise UnsafeValue(f"config.toml [sandbox].never: {exc}") from exc
    # What it is given is the policy's scope (routines/policy.py), the one the card renders.
    scope = (
        action_scope(action)
        if action
        else server_scope(mcp)
        if mcp
        else shell_scope(routine, permissions)
    )
    granted = tuple(c.path for c in scope.credentials)
    home, vinos_home = os.path.realpath(Path.home()), os.path.realpath(paths.home)
    for path in granted:  # the loader checked it; VINOS_HOME may have moved since
        if problem := credential_problem(path, home, vinos_home):
            raise UnsafeValue(f"credential: {problem}")
    declared = scope.home + (scope.write if scope.write_asks else ())
    writable = () if scope.write_asks else scope.write
    for entry in (*declared, *writable):
        if problem := broad_problem(entry, home, "home entry"):
            raise UnsafeValue(f"home: {problem}")
    for entry in writable:  # bwrap binds only what exists (sandbox.routine_policy refuses links)
        try:
            if not os.path.lexists(folder := os.path.join(home, entry[2:])):
                make_folder(folder)
        except OSError as exc:
            raise UnsafeValue(f"write: {entry!r} cannot be made a folder: {exc}") from exc
    return routine_policy(
        home=Path.home(),
        workspace=workspace,
        scratch_dir=scratch_dir,
        network=scope.network,
        declared=declared,
        never=never,
        limits=limits_for(settings),
        bwrap=settings.bwrap,
        credentials=granted,
        never_names=tuple(e.path for e in NAME_PATTERNS),
        lan=settings.lan,
        writable=writable,
    )


def shell_timeout_for(routine: Routine) -> float:
    """The wall clock of one shell call: [agent].shell_timeout_sec, or [command].timeout_sec."""
    if routine.agent is not None:
        return float(routine.agent.shell_timeout_sec)
    assert routine.command is not None
    return float(routine.command.timeout_sec)
