"""The Arch package: built with makepkg from the tree, installed with pacman into a scratch root,
its file list checked against what the tree says it must hold, and backup= honoured."""

from __future__ import annotations

import importlib.util
import marshal
import os
import re
import shutil
import stat
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.packaging.archpkg import (
    INSTALL_LIB,
    PACKAGES,
    PLANTED_PYC,
    STARTERS,
    SYSTEM_PYTHON,
    Built,
    Pacman,
    build_package,
    run,
    venv_site_packages,
)

# Slow: builds, installs and starts the package (make test-fast leaves these out). One xdist
# group, "archpkg": the package is built and installed once per worker (conftest.py's session
# fixtures), so its tests stay on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("archpkg")]

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
# PyPI name → Arch package, where it is not simply python-<name>.
ARCH_NAMES = {"pyseccomp": "python-libseccomp"}  # same API; Arch ships libseccomp's own binding


def pkginfo(package: Path) -> dict[str, list[str]]:
    info: dict[str, list[str]] = {}
    for line in run(["bsdtar", "-xOf", package, ".PKGINFO"]).stdout.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition(" = ")
            info.setdefault(key, []).append(value)
    return info


def system_python(expr: str) -> str:
    return run([SYSTEM_PYTHON, "-I", "-c", f"import importlib.util, sys; print({expr})"]).stdout


# The program, and the thin launchers for the names waybar, the launcher panel and the
# first-boot prompt call.
LAUNCHERS = (
    "usr/bin/vinos-routine",
    "usr/bin/vinos-brief",
    "usr/bin/vinos-routine-status",
    "usr/bin/vinos-welcome",
    "usr/bin/vinos-brief-menu",  # the walker panel (a shell script, packaging/walker)
)


def expected_files(tree: Path) -> set[str]:
    """Every file the package must hold, derived from the tree it was built from."""
    cache_tag = system_python("sys.implementation.cache_tag").strip()
    dist_info = f"{INSTALL_LIB}/vinos_routine-{VERSION}.dist-info"
    files = {
        *LAUNCHERS,
        "usr/lib/systemd/user/vinos-routined.service",
        "usr/lib/systemd/user/vinos-routined.socket",
        "usr/lib/systemd/user/vinos-routine-dashboard.service",
        "usr/lib/systemd/user/vinos-routine-dashboard.socket",
        "usr/share/licenses/vinos-routine/LICENSE",
        f"{dist_info}/METADATA",
        f"{dist_info}/INSTALLER",
        *(f"etc/vinos/routines/{name}.toml" for name in STARTERS),
    }
    for package in PACKAGES:
        for path in (tree / package).rglob("*"):
            if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
                continue
            rel = path.relative_to(tree)
            files.add(f"{INSTALL_LIB}/{rel}")
            if path.suffix == ".py":
                files.add(f"{INSTALL_LIB}/{rel.parent}/__pycache__/{path.stem}.{cache_tag}.pyc")
    doc = "usr/share/doc/vinos-routine"
    if (tree / "README.md").is_file():
        files.add(f"{doc}/README.md")
    if (tree / "docs").is_dir():
        docs = tree / "docs"
        files |= {f"{doc}/{p.relative_to(docs)}" for p in docs.rglob("*") if p.is_file()}
    completions = {
        "vinos-routine.bash": "usr/share/bash-completion/completions/vinos-routine",
        "_vinos-routine": "usr/share/zsh/site-functions/_vinos-routine",
        "vinos-routine.fish": "usr/share/fish/vendor_completions.d/vinos-routine.fish",
    }
    for name, dest in completions.items():
        if (tree / "packaging/completions" / name).is_file():
            files.add(dest)
    waybar = tree / "packaging/waybar"
    if waybar.is_dir():
        for f in waybar.iterdir():
            if f.is_file():
                where = "usr/share/applications" if f.suffix == ".desktop" else f"{doc}/waybar"
                files.add(f"{where}/{f.name}")
    return files


def test_file_list_matches_the_manifest(built: Built, installed_root: Pacman) -> None:
    listed = installed_root.files()
    files = {f for f in listed if not f.endswith("/")}
    expected = expected_files(built.tree)
    assert sorted(expected - files) == [], "missing from the installed package"
    assert sorted(files - expected) == [], "installed but not in the manifest"
    assert not [f for f in listed if "site-packages" in f or "dist-packages" in f]
    assert f"{INSTALL_LIB}/{PLANTED_PYC}" not in files


def test_installed_files_are_intact_with_the_right_modes(installed_root: Pacman) -> None:
    # pacman -Qkk compares every file with the package's .MTREE: type, mode, owner (root, as
    # the fakeroot state recorded it), size, mtime and checksum.
    out = installed_root("-Qkk", "vinos-routine").stdout
    assert re.search(r"vinos-routine: \d+ total files, 0 altered files", out), out
    root = installed_root.root
    for rel in installed_root.files():
        mode = stat.S_IMODE(os.lstat(root / rel).st_mode)
        want = 0o755 if rel.endswith("/") or rel in LAUNCHERS else 0o644
        assert mode == want, f"{rel}: {oct(mode)}"


def test_bytecode_is_fresh_and_records_installed_paths(installed_root: Pacman) -> None:
    venv_site_packages()  # fails unless this interpreter is the launcher's Python version
    magic = bytes.fromhex(system_python("importlib.util.MAGIC_NUMBER.hex()").strip())
    lib = installed_root.root / INSTALL_LIB
    sources = sorted(lib.rglob("*.py"))
    assert len(sources) > len(PACKAGES)
    for source in sources:
        pyc = Path(importlib.util.cache_from_source(str(source)))
        data = pyc.read_bytes()
        rel = source.relative_to(installed_root.root)
        assert data[:4] == magic, f"{pyc}: not for {SYSTEM_PYTHON}"
        # Flags 0b11: hash-based and checked against the source on import (see the PKGBUILD).
        assert int.from_bytes(data[4:8], "little") == 0b11, f"{pyc}: not checked-hash"
        assert data[8:16] == importlib.util.source_hash(source.read_bytes()), f"{pyc}: stale"
        assert marshal.loads(data[16:]).co_filename == f"/{rel}"


def test_metadata_dependencies_and_backup(built: Built, installed_root: Pacman) -> None:
    info = pkginfo(built.package)
    assert info["pkgname"] == ["vinos-routine"]
    assert info["pkgver"][0].split("-")[0] == VERSION, "PKGBUILD pkgver != pyproject version"
    assert info["arch"] == ["any"]
    assert info["license"] == ["MIT"]
    depends = set(info["depend"])
    assert {"python", "bubblewrap"} <= depends
    for spec in PYPROJECT["project"]["dependencies"]:
        req = Requirement(spec)
        if req.marker is not None and not req.marker.evaluate({"python_version": "3.11"}):
            continue  # only for Pythons older than any Arch ships
        arch = ARCH_NAMES.get(req.name, f"python-{req.name.lower()}")
        assert arch in depends, f"pyproject depends on {req.name}; the PKGBUILD lacks {arch}"
    assert {o.split(":")[0] for o in info["optdepend"]} == {
        "libnotify",
        "ollama",
        "waybar",
        "openssh",
        "python-psycopg",
        "walker",
    }
    # Every file under etc/ survives local edits.
    etc = {f for f in installed_root.files() if f.startswith("etc/") and not f.endswith("/")}
    assert set(info["backup"]) == etc


def test_install_scriptlet_tells_the_user_how_to_start(built: Built) -> None:
    script = run(["bsdtar", "-xOf", built.package, ".INSTALL"]).stdout
    out = run(
        ["bash", "-euc", 'eval "$1"; post_install; post_upgrade 2 1; pre_remove 1', "-", script]
    ).stdout
    assert "systemctl --user enable --now vinos-routined" in out
    assert "      vinos-welcome\n" in out  # the first-boot prompt's name for `setup`
    assert "systemctl --user restart vinos-routined" in out
    assert "systemctl --user disable --now vinos-routined" in out


def test_upgrade_keeps_edited_starter_and_removal_keeps_it_as_pacsave(
    built: Built, tmp_path: Path
) -> None:
    pacman = Pacman(tmp_path / "root", track_owners=False).init()
    pacman.install(built.package)
    etc = pacman.root / "etc/vinos/routines"
    edited = etc / "day-brief.toml"
    mine = edited.read_text() + "\n# my own edit\n"
    edited.write_text(mine)

    pacman.install(built.package)  # the same package again: nothing new to merge
    assert edited.read_text() == mine
    assert not list(etc.glob("*.pacnew"))

    # A newer release whose day-brief and evening-shutdown starters changed.
    tree = tmp_path / "tree"
    shutil.copytree(built.tree, tree, symlinks=True)
    pkgbuild = tree / "packaging/arch/PKGBUILD"
    text, n = re.subn(
        r"^pkgrel=(\d+)$", lambda m: f"pkgrel={int(m[1]) + 1}", pkgbuild.read_text(), flags=re.M
    )
    assert n == 1
    pkgbuild.write_text(text)
    for name in ("day-brief", "evening-shutdown"):
        starter = tree / f"routines/starters/{name}.toml"
        starter.write_text(starter.read_text() + "\n# changed upstream\n")
    newer = build_package(tree, tmp_path / "work")
    pacman.install(newer)

    assert edited.read_text() == mine, "an upgrade overwrote the user's edit"
    upstream = (tree / "routines/starters/day-brief.toml").read_text()
    assert (etc / "day-brief.toml.pacnew").read_text() == upstream
    # An unedited starter simply follows the package.
    evening = (tree / "routines/starters/evening-shutdown.toml").read_text()
    assert (etc / "evening-shutdown.toml").read_text() == evening
    assert sorted(p.name for p in etc.glob("*.pacnew")) == ["day-brief.toml.pacnew"]

    pacman("-R", "vinos-routine", fake="write")
    assert (etc / "day-brief.toml.pacsave").read_text() == mine
    assert not (pacman.root / INSTALL_LIB).exists()
    assert not (pacman.root / "usr/bin/vinos-routine").exists()
    assert not (etc / "evening-shutdown.toml").exists()
