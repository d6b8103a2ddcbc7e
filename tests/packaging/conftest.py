"""Fixtures for tests/packaging: the package is built once per session and installed once into a
shared read-only scratch root; tests that change a root install their own."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from archpkg import PLANTED_PYC, Built, Pacman, build_package, copy_tree, run, sandbox_argv


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    work = tmp_path_factory.mktemp("makepkg")
    tree = copy_tree(work / "tree")
    planted = tree / PLANTED_PYC
    planted.parent.mkdir(exist_ok=True)
    planted.write_bytes(b"not bytecode from this build")
    return Built(build_package(tree, work), tree)


@pytest.fixture(scope="session")
def installed_root(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Pacman:
    """The package installed into a scratch root; tests must not change it."""
    pacman = Pacman(tmp_path_factory.mktemp("installed") / "root").init()
    pacman.install(built.package)
    return pacman


@dataclass(frozen=True)
class Installed:
    """Runs commands inside the sandbox that shows `root`'s package at its real paths."""

    root: Path
    home: Path  # HOME inside (a fresh directory: the sandbox binds $HOME read-only)
    vinos_home: Path
    runtime_dir: Path
    writable: tuple[Path, ...]

    @property
    def env(self) -> dict[str, str]:
        # VINOS_SYSTEM_DIR stays unset: the installed default, /etc/vinos/routines, is tested.
        return {
            "HOME": str(self.home),
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "VINOS_HOME": str(self.vinos_home),
            "XDG_RUNTIME_DIR": str(self.runtime_dir),
        }

    def argv(self, command: Sequence[str], **env: str) -> list[str]:
        prefix = sandbox_argv(
            self.root, env={**self.env, **env}, writable=self.writable, cwd=self.home
        )
        return [*prefix, *command]

    def __call__(
        self, *command: str, check: bool = True, timeout: float = 120, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return run(self.argv(command, **env), check=check, timeout=timeout)

    def popen(self, command: Sequence[str], **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(command, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def installed(installed_root: Pacman, tmp_path: Path, vinos_env: Path) -> Installed:
    home = tmp_path / "home"
    home.mkdir()
    runtime = Path(os.environ["XDG_RUNTIME_DIR"])
    return Installed(
        root=installed_root.root,
        home=home,
        vinos_home=vinos_env,
        runtime_dir=runtime,
        writable=(tmp_path,),
    )
