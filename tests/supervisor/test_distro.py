"""The distribution from /etc/os-release, and the install command a hint names for it: pure,
on the files these distributions ship (the dashboard hint named Arch's packages on Debian)."""

from __future__ import annotations

import pytest

from supervisor.cli.distro import (
    DASHBOARD_PACKAGES,
    Family,
    dashboard_hint,
    family,
    install_command,
)

DEBIAN_12 = """\
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
ID=debian
"""
UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n'
ARCH = 'NAME="Arch Linux"\nID=arch\nBUILD_ID=rolling\n'
MANJARO = 'NAME="Manjaro Linux"\nID="manjaro"\nID_LIKE="arch"\n'
FEDORA = 'NAME="Fedora Linux"\nID=fedora\nVERSION_ID=41\n'
ALMA = 'NAME="AlmaLinux"\nID="almalinux"\nID_LIKE="rhel centos fedora"\n'
ALPINE = 'NAME="Alpine Linux"\nID=alpine\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DEBIAN_12, Family.DEBIAN),
        (UBUNTU, Family.DEBIAN),
        (ARCH, Family.ARCH),
        (MANJARO, Family.ARCH),
        (FEDORA, Family.FEDORA),
        (ALMA, Family.FEDORA),
        (ALPINE, None),
        ("", None),
    ],
)
def test_the_family_is_the_id_or_the_first_known_id_like(text: str, expected: Family) -> None:
    assert family(text) is expected


def test_the_dashboard_hint_names_this_distributions_command() -> None:
    system = ("/usr/bin/python3", False, False)
    assert dashboard_hint(DEBIAN_12, *system) == (
        "sudo apt-get install python3-starlette python3-uvicorn python3-jinja2 python3-markdown-it"
    )
    assert dashboard_hint(UBUNTU, *system) == dashboard_hint(DEBIAN_12, *system)
    assert dashboard_hint(ARCH, *system) == (
        "sudo pacman -S python-starlette python-uvicorn python-jinja python-markdown-it-py"
    )
    assert dashboard_hint(FEDORA, *system).startswith("sudo dnf install python3-starlette ")
    assert dashboard_hint(ALPINE, *system) == (
        "install starlette, uvicorn, jinja2, markdown-it-py for /usr/bin/python3"
    )
    assert install_command(None, DASHBOARD_PACKAGES) is None


def test_a_venv_install_gets_the_libraries_into_its_own_venv_whatever_the_distribution() -> None:
    venv = "/home/ana/.local/lib/vinos-routine/bin/python"
    assert dashboard_hint(DEBIAN_12, venv, True, False) == (
        f"{venv} -m pip install starlette uvicorn jinja2 markdown-it-py"
    )
    pipx = "/home/ana/.local/pipx/venvs/vinos-routine/bin/python"
    assert dashboard_hint(ARCH, pipx, True, True) == (
        "pipx inject vinos-routine starlette uvicorn jinja2 markdown-it-py"
    )
