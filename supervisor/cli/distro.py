"""Which distribution this is (from /etc/os-release), and the command that installs packages
on it: a hint names the command for the machine it is printed on, not Arch's on Debian.

Pure: `family` and `install_command` take the file's text (tests/supervisor/test_distro.py);
`os_release` reads it.
"""

from __future__ import annotations

import enum
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "DASHBOARD_PACKAGES",
    "Family",
    "dashboard_hint",
    "family",
    "install_command",
    "os_release",
    "this_install",
]


class Family(enum.StrEnum):
    DEBIAN = "debian"  # Debian, Ubuntu, Mint, Raspberry Pi OS…: apt-get
    ARCH = "arch"  # Arch, Manjaro, EndeavourOS…: pacman
    FEDORA = "fedora"  # Fedora, RHEL, CentOS Stream…: dnf


_COMMANDS = {
    Family.DEBIAN: "sudo apt-get install",
    Family.ARCH: "sudo pacman -S",
    Family.FEDORA: "sudo dnf install",
}

# The dashboard's four libraries, as each family packages them.
DASHBOARD_PACKAGES: Mapping[Family, tuple[str, ...]] = {
    Family.DEBIAN: (
        "python3-starlette",
        "python3-uvicorn",
        "python3-jinja2",
        "python3-markdown-it",
    ),
    Family.ARCH: ("python-starlette", "python-uvicorn", "python-jinja", "python-markdown-it-py"),
    Family.FEDORA: (
        "python3-starlette",
        "python3-uvicorn",
        "python3-jinja2",
        "python3-markdown-it-py",
    ),
}
DASHBOARD_PYPI = ("starlette", "uvicorn", "jinja2", "markdown-it-py")


def _fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip("\"'")
    return out


def family(os_release_text: str) -> Family | None:
    """The family of the distribution /etc/os-release describes: its ID, else the first of
    ID_LIKE we know (Ubuntu is ID=ubuntu ID_LIKE=debian); None when none is known."""
    f = _fields(os_release_text)
    for word in [f.get("ID", ""), *f.get("ID_LIKE", "").split()]:
        for fam in Family:
            if word == fam.value or (fam is Family.FEDORA and word in ("rhel", "centos")):
                return fam
    return None


def install_command(fam: Family | None, packages: Mapping[Family, tuple[str, ...]]) -> str | None:
    """`sudo apt-get install …` for `fam`; None for a distribution we know no names for."""
    if fam is None or fam not in packages:
        return None
    return f"{_COMMANDS[fam]} {' '.join(packages[fam])}"


def dashboard_hint(os_release_text: str, python: str, venv: bool, pipx: bool) -> str:
    """How to get the dashboard's libraries for this install: into its own venv (pip's or
    pipx's), else from the distribution it runs on."""
    if pipx:
        return f"pipx inject vinos-routine {' '.join(DASHBOARD_PYPI)}"
    if venv:
        return f"{shlex.quote(python)} -m pip install {' '.join(DASHBOARD_PYPI)}"
    command = install_command(family(os_release_text), DASHBOARD_PACKAGES)
    if command is None:
        return f"install {', '.join(DASHBOARD_PYPI)} for {shlex.quote(python)}"
    return command


def os_release() -> str:
    """/etc/os-release (or /usr/lib/os-release), empty when neither can be read."""
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return ""


def this_install() -> tuple[str, bool, bool]:
    """(the interpreter, whether it is a venv's, whether that venv is pipx's)."""
    venv = sys.prefix != sys.base_prefix
    return sys.executable, venv, venv and "pipx" in Path(sys.prefix).parts
