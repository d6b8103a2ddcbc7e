"""Where everything lives on disk (docs/retention.md lists it). Every test overrides VINOS_HOME."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Paths", "paths", "signature_path"]


@dataclass(frozen=True, slots=True)
class Paths:
    home: Path  # VINOS_HOME, default ~/.vinos
    system_dir: Path  # VINOS_SYSTEM_DIR, default /etc/vinos/routines
    runtime_dir: Path  # $XDG_RUNTIME_DIR/vinos-routine

    @property
    def routines_dir(self) -> Path:
        return self.home / "routines"

    @property
    def config_file(self) -> Path:
        return self.routines_dir / "config.toml"

    @property
    def secrets_dir(self) -> Path:
        return self.home / "secrets"

    @property
    def api_key_file(self) -> Path:
        return self.secrets_dir / "anthropic-key"

    @property
    def allowed_signers(self) -> Path:
        """ssh allowed-signers: keys whose signature lets a routine act without asking."""
        return self.home / "allowed_signers"

    @property
    def state_dir(self) -> Path:
        return self.routines_dir / "state"

    @property
    def ledger(self) -> Path:
        return self.state_dir / "ledger.db"

    @property
    def shared_memory(self) -> Path:
        return self.state_dir / "shared" / "memory.md"

    @property
    def control_socket(self) -> Path:
        return self.runtime_dir / "control.sock"

    @property
    def daemon_lock(self) -> Path:
        return self.runtime_dir / "daemon.lock"

    @property
    def workspace_root(self) -> Path:
        """Parent of every routine's workspace; never bound into a sandbox itself."""
        return self.routines_dir / "workspace"

    @property
    def sandbox_scratch_root(self) -> Path:
        """Parent of the per-run scratch dirs; never bound into a sandbox itself."""
        return self.routines_dir / "scratch"

    def workspace(self, name: str) -> Path:
        """The routine's persistent workspace: writable by its shell tools, so the runtime
        never reads or writes below it (it is the parent of nothing the runtime uses)."""
        return self.workspace_root / name

    def run_scratch(self, name: str, run_id: str) -> Path:
        """One run's scratch dir for its shell tools (their working directory), removed at the
        end of the run by a descriptor-based walk that follows no link."""
        return self.sandbox_scratch_root / name / run_id

    def routine_state(self, name: str) -> Path:
        return self.state_dir / name

    def scratch(self, name: str, run_id: str) -> Path:
        """Where the worker stages the run's output for the supervisor; no sandbox sees it."""
        return self.state_dir / name / ".scratch" / run_id

    def run_log(self, name: str, run_id: str) -> Path:
        return self.state_dir / name / "runs" / f"{run_id}.jsonl"

    def conversation(self, name: str, run_id: str) -> Path:
        """The run's conversation, what `reply` continues (routines/conversation.py)."""
        return self.state_dir / name / "runs" / f"{run_id}.conversation.json"

    def last_run(self, name: str) -> Path:
        return self.state_dir / name / "last-run.json"

    def memory(self, name: str) -> Path:
        return self.state_dir / name / "memory.md"


def paths() -> Paths:
    """The paths for this process's environment (read each call: tests change it)."""
    home = Path(os.environ.get("VINOS_HOME") or Path.home() / ".vinos")
    system = Path(os.environ.get("VINOS_SYSTEM_DIR") or "/etc/vinos/routines")
    xdg = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return Paths(home=home, system_dir=system, runtime_dir=Path(xdg) / "vinos-routine")


def signature_path(routine_file: Path) -> Path:
    """The detached signature beside a routine file (routines.signing): NAME.toml.sig."""
    return routine_file.with_name(routine_file.name + ".sig")
