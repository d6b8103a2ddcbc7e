"""Helpers for the sandbox tests (imported by name: tests/sandbox is on sys.path via its
conftest). A planted home with secrets to steal, and ways to run commands in the real sandbox."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from routines.spec.never import NAME_PATTERNS, never_paths
from sandbox import Limits, ShellPolicy, ShellResult, routine_policy, run_shell

REPO = Path(__file__).resolve().parent.parent.parent


@dataclass
class Box:
    """One routine's world: `home` holds planted secrets carrying `marker`."""

    home: Path
    state: Path  # routine r1's state dir (never visible in the sandbox)
    other_state: Path  # routine r2's
    workspace: Path  # r1's workspace (writable, kept between runs)
    scratch: Path  # r1's scratch dir for this run (writable, the working directory)
    marker: str  # in every planted secret: it must never show up in any output
    masks: tuple[str, ...] = ()  # config.toml's [sandbox].never
    declared: tuple[str, ...] = ()  # the routine's home = [...]

    def never(self) -> tuple[str, ...]:
        real = os.path.realpath(self.home)
        return never_paths(real, real + "/.vinos", self.masks)

    def policy(
        self,
        *,
        network: bool | tuple[str, ...] = False,
        limits: Limits = Limits(),  # noqa: B008 - frozen
        declared: tuple[str, ...] | None = None,
        credentials: tuple[str, ...] = (),
        lan: bool = False,
    ) -> ShellPolicy:
        """The worker's policy for r1 (worker/shellpolicy.py): the never-list and the
        credential-name patterns as the worker passes them."""
        return routine_policy(
            home=self.home,
            workspace=self.workspace,
            scratch_dir=self.scratch,
            network=network,
            declared=self.declared if declared is None else declared,
            never=self.never(),
            limits=limits,
            environ={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb"},
            credentials=credentials,
            never_names=tuple(e.path for e in NAME_PATTERNS),
            lan=lan,
        )

    def run(self, command: str, *, timeout: float = 20.0, **kw: object) -> ShellResult:
        return run_shell(command, self.policy(**kw), timeout_sec=timeout)  # type: ignore[arg-type]


def make_box(tmp_path: Path) -> Box:
    """Plant a home under tmp_path: secrets carrying a marker, state dirs r1 and r2."""
    marker = "VINOS-SECRET-" + secrets.token_hex(8)
    home = tmp_path / "home"
    planted = {
        ".ssh/id_rsa": f"-----BEGIN OPENSSH PRIVATE KEY----- {marker}\n",
        ".aws/credentials": f"[default]\naws_secret_access_key = {marker}\n",
        ".vinos/secrets/anthropic-key": f"sk-ant-{marker}\n",
        ".netrc": f"machine example.com password {marker}\n",
        ".gnupg/private-keys-v1.d/key.key": marker,
        ".config/rclone/rclone.conf": f"pass = {marker}\n",
        ".vinos/routines/state/r2/memory.md": f"r2's memory {marker}\n",
        ".vinos/routines/state/ledger.db": marker,
    }
    for rel, text in planted.items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (home / ".ssh").chmod(0o700)
    (home / "notes.txt").write_text("ordinary notes\n")
    state = home / ".vinos/routines/state/r1"
    state.mkdir(parents=True)
    (state / "memory.md").write_text("r1's memory\n")
    workspace = home / ".vinos/routines/workspace/r1"
    workspace.mkdir(parents=True)
    scratch = home / ".vinos/routines/scratch/r1/run-1"
    scratch.mkdir(parents=True)
    return Box(
        home=home,
        state=state,
        other_state=home / ".vinos/routines/state/r2",
        workspace=workspace,
        scratch=scratch,
        marker=marker,
        masks=("~/.config/rclone",),
        declared=("~/notes.txt", "~/.config"),
    )


def python_in_sandbox(code: str) -> str:
    """A one-line shell command running `code` with the system python3 inside the sandbox
    (commands may not hold newlines, so the code travels base64-encoded)."""
    blob = base64.b64encode(code.encode()).decode()
    return f"/usr/bin/python3 -c \"import base64; exec(base64.b64decode('{blob}'))\""


def read_back(line: str) -> list[str]:
    """The words bash reads from an argv shown on one line (sandbox/argv.py argv_line: shlex's
    quoting, and $'...' for the `bash -c` text, which Python's shlex cannot read)."""
    out = subprocess.run(
        ["/bin/bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, check=True
    ).stdout
    return out.decode().split("\0")[:-1]


def sleep_marker(seconds: int) -> str:
    """A `sleep` argument no other test uses (`seconds`.random digits): processes_with looks
    host-wide, and another pytest worker may be running the same parametrized test, whose
    sandbox would otherwise match (a full run failed so)."""
    return f"{seconds}.{secrets.randbelow(10**9):09d}"


def processes_with(marker: str) -> list[psutil.Process]:
    """Host processes whose command line mentions `marker`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in arg for arg in proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            continue
    return [p for p in found if p.pid != os.getpid()]


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """Run `code` in a fresh interpreter of this venv (its own probe cache); return stdout."""
    full = dict(os.environ if env is None else env)
    full["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
