"""What a routine may do: one policy object, from the routine file, config.toml and the host.

Each sandboxed part of a routine is a `Scope`: its own shell calls (or its command), each MCP
server, each approved action. A scope says what of the person's files it sees (home entries,
masked; credentials, bound whole; an MCP server's installation, masked), which of their
folders it may write (`write`: read-write, or read-only with each write asking the person),
and where it can connect. `policy_of` returns them all; the sandbox is built from one scope
(worker/shellpolicy.py → sandbox.routine_policy → the bwrap argv) and the capability card
renders every scope (supervisor/cli/commands/capabilities.py). Neither decides a grant of its
own: tests/worker/test_policy_card.py walks every grant kind and checks that what widens the
argv is on the card.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from routines.spec import Action, Credential, McpServer, Permissions, Routine
from routines.spec.config import SandboxSettings
from routines.spec.never import never_paths
from routines.spec.paths import Paths

__all__ = [
    "Installer",
    "Policy",
    "Scope",
    "ScopeKind",
    "action_scope",
    "host_policy",
    "never_for",
    "policy_of",
    "server_scope",
    "servers_of",
    "shell_scope",
]


class ScopeKind(StrEnum):
    SHELL = "shell"  # the routine's shell tool calls, or its command
    MCP = "mcp"  # one MCP server, for the whole run
    ACTION = "action"  # one approved action, run once


@dataclass(frozen=True, slots=True)
class Scope:
    """Everything one sandboxed part of a routine is given beyond the empty sandbox."""

    kind: ScopeKind
    name: str  # the routine's, the server's or the action's name
    home: tuple[str, ...] = ()  # `~/...` read-only; credential-named files below masked
    credentials: tuple[Credential, ...] = ()  # bound read-only, whole
    network: bool | tuple[str, ...] = False  # its own list and its credentials' hosts
    own_hosts: tuple[str, ...] = ()  # its own list alone (the card says which is which)
    argv: tuple[str, ...] = ()  # MCP: what it runs (the file's words)
    install: tuple[str, ...] = ()  # MCP: its installation, read-only, masked like home
    install_problem: str = ""  # MCP: why its installation could not be found
    # SHELL of an agent routine: its `write = [...]` folders (`~/...`, masked like home).
    write: tuple[str, ...] = ()
    # True: `write` is bound read-only and each write_file call there pauses the run for the
    # person (permissions "ask"); False: read-write, and write_file writes ("files",
    # "everything"). tests/supervisor/test_daemon_writes.py::
    # test_ask_pauses_at_a_write_and_approve_writes_it_with_the_real_result drives "ask".
    write_asks: bool = True

    @property
    def widens(self) -> bool:
        """Whether it sees any file of the person's or reaches any host."""
        return bool(self.home or self.credentials or self.network or self.install or self.write)


# An MCP server's command → (its installation's folders, or a problem). Host-dependent (PATH,
# where things are installed): routines/mcpinstall.py `installer`.
Installer = Callable[[McpServer], tuple[tuple[str, ...], str]]


@dataclass(frozen=True, slots=True)
class Policy:
    routine: str
    scopes: tuple[Scope, ...]
    read_globs: tuple[str, ...] = ()  # the read tool's `read:` entries (host side, no sandbox)
    lan: bool = False  # config.toml [sandbox].lan: `network = true` reaches the LAN too
    # How max_run_memory_mb is kept on this host, kernel or sampled ("": not looked at);
    # supervisor/engine/runcgroup.py says it, the card shows it.
    run_limits: str = ""
    # How max_workspace_mb is kept on this host, kernel or polled ("": not looked at);
    # sandbox/overlay.py quota_in_force says it, the card shows it.
    disk_quota: str = ""

    def of(self, kind: ScopeKind, name: str) -> Scope:
        for scope in self.scopes:
            if scope.kind is kind and scope.name == name:
                return scope
        raise KeyError(f"{kind.value} {name!r}")


def shell_scope(routine: Routine, permissions: Permissions | None = None) -> Scope:
    """The routine's shell calls (or its command): its home, its write folders, its
    credentials, Routine.egress. `permissions`: what a run may do unasked (the supervisor's
    `effective_permissions`, which a run's job carries); the file's own when None (the card,
    which says "while its signature verifies")."""
    unasked = routine.permissions if permissions is None else permissions
    return Scope(
        ScopeKind.SHELL,
        routine.name,
        home=routine.home,
        credentials=routine.credentials,
        network=routine.egress,
        own_hosts=routine.network if isinstance(routine.network, tuple) else (),
        write=routine.write,
        write_asks=unasked is Permissions.ASK,
    )


def server_scope(server: McpServer, installer: Installer | None = None) -> Scope:
    """One MCP server: its own home, credentials and McpServer.egress, and its installation
    when `installer` is given."""
    scope = Scope(
        ScopeKind.MCP,
        server.name,
        home=server.home,
        credentials=server.credentials,
        network=server.egress,
        own_hosts=server.network if isinstance(server.network, tuple) else (),
        argv=server.command,
    )
    if installer is None:
        return scope
    install, problem = installer(server)
    return replace(scope, install=install, install_problem=problem)


def action_scope(action: Action) -> Scope:
    """An approved action: its own home and network, never a credential."""
    return Scope(ScopeKind.ACTION, action.name, home=action.home, network=action.network)


def servers_of(routine: Routine) -> tuple[McpServer, ...]:
    if routine.agent is not None:
        return routine.agent.mcp
    return routine.command.mcp_servers if routine.command is not None else ()


def policy_of(routine: Routine, *, lan: bool = False, installer: Installer | None = None) -> Policy:
    """The routine's policy: its shell scope, each server's, each action's."""
    scopes = [shell_scope(routine)]
    scopes += [server_scope(s, installer) for s in servers_of(routine)]
    scopes += [action_scope(a) for a in routine.actions]
    globs = routine.agent.read_patterns if routine.agent is not None else ()
    return Policy(routine.name, tuple(scopes), tuple(globs), lan)


def never_for(paths: Paths, settings: SandboxSettings) -> tuple[str, ...]:
    """The never-list of this user: the defaults, VINOS_HOME, and config.toml's additions."""
    home = os.path.realpath(Path.home())
    extra = (*settings.never, *settings.masks)
    return never_paths(home, os.path.realpath(paths.home), extra)


def host_policy(routine: Routine, paths: Paths, settings: SandboxSettings, path_env: str) -> Policy:
    """`policy_of` on this host: config.toml's [sandbox] and each server's installation as
    found on `path_env` (the sandbox's PATH), as the card shows it before a run."""
    from routines.mcpinstall import installer

    try:
        never = never_for(paths, settings)
    except ValueError:
        never = ()  # config.toml's error is reported where it is read; the defaults still hold
    home = os.path.realpath(Path.home())
    resolve = installer(home=home, path_env=path_env, never=never)
    return policy_of(routine, lan=settings.lan, installer=resolve)
