"""Fixtures for tests/packaging: the package is built once per session and installed once into a
shared read-only scratch root; tests that change a root install their own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.packaging.archpkg import PLANTED_PYC, Built, Installed, Pacman, build_package, copy_tree


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
        writable=(tmp_path, runtime),  # the runtime dir is not below tmp_path (conftest.py)
    )
