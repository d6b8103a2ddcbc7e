"""The one place a Routine becomes a sandbox ShellPolicy (for the worker and `vinos-routine
sandbox`, so the CLI runs a command exactly as the routine's shell tool would)."""

from __future__ import annotations

from pathlib import Path

from routines.config import SandboxSettings
from routines.paths import Paths
from routines.spec import Routine
from sandbox import Limits, ShellPolicy, routine_policy

__all__ = ["limits_for", "shell_policy_for", "shell_timeout_for"]


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
) -> ShellPolicy:
    """The policy for `routine`'s shell calls: its state dir and `scratch_dir` writable.

    Creates the state and scratch dirs when missing (bwrap can only bind what exists). The
    secrets dir of this VINOS_HOME is masked too, wherever VINOS_HOME lives under $HOME.
    No secret reaches the sandbox: not the API key, with network or without.
    Raises sandbox.UnsafeValue (a ValueError) for a path bwrap must never see.
    """
    state = paths.routine_state(routine.name)
    for d in (state, scratch_dir):
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return routine_policy(
        home=Path.home(),
        state_dir=state,
        scratch_dir=scratch_dir,
        network=routine.network,
        extra_masks=(*settings.masks, str(paths.secrets_dir)),
        limits=limits_for(settings),
        bwrap=settings.bwrap,
    )


def shell_timeout_for(routine: Routine) -> float:
    """The wall clock of one shell call: [agent].shell_timeout_sec, or [command].timeout_sec."""
    if routine.agent is not None:
        return float(routine.agent.shell_timeout_sec)
    assert routine.command is not None
    return float(routine.command.timeout_sec)
