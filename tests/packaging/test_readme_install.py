"""The README's install commands, exactly as it prints them, with the pip and pipx a Debian 12
user has (pip 23.0.1, pipx 1.1.0) and with today's, in throwaway venvs under a throwaway HOME:
each installs a `vinos-routine` that runs, and the dashboard extra's command from
docs/install.md adds the dashboard's libraries. (pip 23.0.1 refused the extra's earlier
spelling, `vinos-routine[dashboard] @ git+file://$PWD`.)

The distributions come from PyPI once a run, into a wheelhouse the installs read with no index
(PIP_NO_INDEX, PIP_FIND_LINKS: pip reads them, also inside pipx's venvs): each of the four
installs would otherwise ask the index again for every dependency, twice, which was most of
their time. The commands, the pip and pipx versions and the builds from the clone are the
README's.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.packaging.archpkg import OLD_PIP, OLD_PIPX, copy_tree, offline_pip, wheelhouse

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # pip from PyPI, then offline


def block_lines(page: Path, after: str) -> list[str]:
    """The command lines of the first ``` block after the line containing `after`."""
    text = page.read_text()
    block = re.search(r"```\n(.*?)```", text[text.index(after) :], re.S)
    assert block, f"no code block after {after!r} in {page}"
    lines = [ln.split("  #")[0].strip() for ln in block.group(1).splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


INSTALL = block_lines(REPO / "README.md", "**1. Install.**")
DASHBOARD = block_lines(REPO / "docs/install.md", "### The dashboard extra")


def command(lines: list[str], start: str) -> str:
    [found] = [ln for ln in lines if ln.startswith(start)]
    return found


def test_the_readme_gives_path_spellings_not_git_urls() -> None:
    assert command(INSTALL, "pipx install") == 'pipx install "$PWD"'
    assert command(INSTALL, "~/.local/lib/vinos-routine/bin/pip") == (
        '~/.local/lib/vinos-routine/bin/pip install "$PWD"'
    )
    assert command(DASHBOARD, "~/.local/lib/vinos-routine/bin/pip") == (
        '~/.local/lib/vinos-routine/bin/pip install "$PWD[dashboard]"'
    )


def clone(tmp_path: Path) -> Path:
    """A copy of the tree to build in, as a user's clone (building writes build/ into it)."""
    return copy_tree(tmp_path / "clone")


@pytest.fixture
def offline(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The run's wheelhouse, and pip told to install from it alone (here and in `shell`)."""
    house = wheelhouse(tmp_path_factory)
    for name, value in offline_pip(house).items():
        monkeypatch.setenv(name, value)
    # pip's cache: the test's own, not the user's ~/.cache/pip.
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path_factory.mktemp("pip-cache")))
    return house


def shell(line: str, tree: Path, home: Path, path: str) -> None:
    env = {"HOME": str(home), "PATH": path, "PWD": str(tree), "LANG": "C.UTF-8"}
    env |= {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    done = subprocess.run(
        ["bash", "-c", line],
        check=False,
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"`{line}` failed:\n{done.stdout}\n{done.stderr}"


SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


@pytest.mark.parametrize("pip", [OLD_PIP, "latest"])
def test_the_readmes_pip_commands_install_a_program_that_runs(
    tmp_path: Path, not_root: None, pip: str, offline: Path
) -> None:
    tree, home = clone(tmp_path), tmp_path / "home"
    home.mkdir()
    # The system's python3 -m venv: on Debian 12, ensurepip's pip 23.0.1.
    shell(command(INSTALL, "python3 -m venv"), tree, home, SYSTEM_PATH)
    pip_bin = home / ".local/lib/vinos-routine/bin/pip"
    spec = f"pip=={OLD_PIP}" if pip == OLD_PIP else "--upgrade pip"
    shell(f"{pip_bin} install -q {spec}", tree, home, SYSTEM_PATH)
    version = subprocess.run([pip_bin, "--version"], capture_output=True, text=True, check=True)
    if pip == OLD_PIP:
        assert version.stdout.startswith(f"pip {OLD_PIP} ")
    for line in (
        command(INSTALL, "~/.local/lib/vinos-routine/bin/pip"),
        command(INSTALL, "mkdir -p ~/.local/bin"),
        command(DASHBOARD, "~/.local/lib/vinos-routine/bin/pip"),
    ):
        shell(line, tree, home, SYSTEM_PATH)
    ran = subprocess.run(
        [home / ".local/bin/vinos-routine", "--version"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0 and ran.stdout.startswith("vinos-routine "), ran.stderr
    python = home / ".local/lib/vinos-routine/bin/python"
    subprocess.run([python, "-c", "import starlette, uvicorn, jinja2, markdown_it"], check=True)


@pytest.mark.parametrize("pipx", [OLD_PIPX, "latest"])
def test_the_readmes_pipx_commands_install_a_program_that_runs(
    tmp_path: Path, not_root: None, pipx: str, offline: Path
) -> None:
    tree, home = clone(tmp_path), tmp_path / "home"
    home.mkdir()
    tool = tmp_path / "pipx-tool"
    subprocess.run(["/usr/bin/python3", "-m", "venv", tool], check=True, timeout=300)
    spec = f"pipx=={pipx}" if pipx == OLD_PIPX else "pipx"
    subprocess.run([tool / "bin/pip", "install", "-q", spec], check=True, timeout=600)
    path = f"{tool / 'bin'}:{SYSTEM_PATH}"
    shell(command(INSTALL, "pipx install"), tree, home, path)
    ran = subprocess.run(
        [home / ".local/bin/vinos-routine", "--version"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0 and ran.stdout.startswith("vinos-routine "), ran.stderr
    shell(command(DASHBOARD, "pipx install"), tree, home, path)
    # pipx 1.1 keeps its venvs in ~/.local/pipx, later ones in ~/.local/share/pipx.
    [python] = list(home.glob(".local/**/pipx/venvs/vinos-routine/bin/python"))
    subprocess.run([python, "-c", "import starlette, uvicorn, jinja2, markdown_it"], check=True)
