"""Where everything lives on disk (docs/retention.md lists it). Every test overrides VINOS_HOME."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FLEET_DATABASE_ENV",
    "Paths",
    "fleet_database_env",
    "paths",
    "runtime_base",
    "signature_path",
]

# A fleet's database; set, it turns the fleet on by itself (routines/spec/config.py `_fleet`).
# Here rather than there: `list`'s kept rows ask it without loading config.toml's parser
# (tests/routines/test_rowsnap.py::test_a_fleet_turned_on_by_its_variable_never_gets_the_kept_list).
FLEET_DATABASE_ENV = "VINOS_FLEET_DATABASE"


def fleet_database_env() -> str:
    """VINOS_FLEET_DATABASE as set, stripped; "" when it is not."""
    return os.environ.get(FLEET_DATABASE_ENV, "").strip()


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
    def ntfy_token_file(self) -> Path:
        """[notify.ntfy]'s access token (optional, 0600): supervisor/engine/phone.py."""
        return self.secrets_dir / "ntfy-token"

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
    base = runtime_base(os.environ.get("XDG_RUNTIME_DIR"), os.getuid(), home, os.path.isdir)
    return Paths(home=home, system_dir=system, runtime_dir=base / "vinos-routine")


def runtime_base(xdg: str | None, uid: int, home: Path, is_dir: Callable[[str], bool]) -> Path:
    """The parent of the runtime dir (the control socket, the daemon's lock): $XDG_RUNTIME_DIR;
    else /run/user/UID when logind made it; else, where no login session made one (a
    container, WSL, `su` without a session), VINOS_HOME/run: the user's own, never a shared
    /tmp another user could take first. Without it the daemon run by hand there could not
    take its lock (tests/routines/spec/test_paths.py).
    supervisor/cli/thinclient.py's socket_path mirrors this, for its speed."""
    if xdg:
        return Path(xdg)
    run_user = f"/run/user/{uid}"
    return Path(run_user) if is_dir(run_user) else home / "run"


def signature_path(routine_file: Path) -> Path:
    """The detached signature beside a routine file (routines.signing): NAME.toml.sig."""
    return routine_file.with_name(routine_file.name + ".sig")
