"""The installed program, run from the scratch root at its real paths (/usr/bin/vinos-routine,
/usr/lib/vinos-routine, /etc/vinos) inside bwrap, as the unprivileged test user."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.packaging.archpkg import STARTERS, Installed

# Slow: builds, installs and starts the package (make test-fast leaves these out). One xdist
# group, "archpkg": the package is built and installed once per worker (conftest.py's session
# fixtures), so its tests stay on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("archpkg")]

VERSION = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())[
    "project"
]["version"]

# Leaves a mark beside itself (a worker's stdout goes to the supervisor, not to us).
HIJACK = (
    "import pathlib, sys; pathlib.Path(__file__).with_name('HIJACKED').touch(); "
    "print('HIJACKED: code from outside /usr/lib/vinos-routine ran'); sys.exit(0)"
)


def plant_shadow_packages(where: Path) -> list[Path]:
    """Packages named like ours, where a careless sys.path would pick them up; the marks they
    leave when they run."""
    marks = []
    for package in ("supervisor", "worker"):
        d = where / package
        d.mkdir(parents=True)
        (d / "__init__.py").write_text("")
        (d / "__main__.py").write_text(HIJACK + "\n")
        (d / "cli.py").write_text(f"def main():\n    {HIJACK}\n")
        marks.append(d / "HIJACKED")
    return marks


@pytest.mark.usefixtures("not_root")
def test_version(installed: Installed) -> None:
    out = installed("/usr/bin/vinos-routine", "--version")
    assert out.stdout.strip() == f"vinos-routine {VERSION}"


@pytest.mark.usefixtures("not_root")
def test_launcher_ignores_pythonpath_and_the_current_directory(installed: Installed) -> None:
    # The sandbox's working directory is installed.home.
    marks = plant_shadow_packages(installed.home)
    marks += plant_shadow_packages(installed.home / "elsewhere")
    out = installed(
        "/usr/bin/vinos-routine", "--version", PYTHONPATH=str(installed.home / "elsewhere")
    )
    assert not [m for m in marks if m.exists()]
    assert out.stdout.strip() == f"vinos-routine {VERSION}"


@pytest.mark.usefixtures("not_root")
def test_list_shows_the_starters_from_etc(installed: Installed) -> None:
    lines = json.loads(installed("/usr/bin/vinos-routine", "list", "--json").stdout)
    by_name = {line["name"]: line for line in lines}
    assert len(by_name) == len(lines), "a routine is listed twice"
    for name in STARTERS:
        assert name in by_name, f"{name} missing from `list`"
        line = by_name[name]
        assert line["origin"] == "system"
        assert line["valid"], line["errors"]
        assert not line["enabled"], "starters ship disabled"
    text = installed("/usr/bin/vinos-routine", "list").stdout
    for name in STARTERS:
        assert name in text


@pytest.mark.usefixtures("not_root")
def test_a_command_routine_runs(installed: Installed) -> None:
    (installed.vinos_home / "routines/pkg-hello.toml").write_text(
        "[routine]\n"
        'kind = "command"\n'
        'description = "the packaging test"\n'
        "[schedule]\n"
        'cron = "0 9 * * *"\n'
        "[command]\n"
        'run = "echo hello from the installed package"\n'
    )
    # The run starts `python -m worker` from here: a `worker` package in the current directory
    # must not be the one that runs.
    marks = plant_shadow_packages(installed.home)
    out = installed("/usr/bin/vinos-routine", "run", "pkg-hello", "--json", check=False)
    assert not [m for m in marks if m.exists()], "the worker was imported from the cwd"
    assert out.returncode == 0, out.stdout + out.stderr
    fin = json.loads(out.stdout)
    assert fin["status"] == "ok", fin
    outputs = sorted((installed.vinos_home / "routines/state/pkg-hello").glob("*.md"))
    assert len(outputs) == 1, outputs
    assert "hello from the installed package" in outputs[0].read_text()


@pytest.mark.usefixtures("not_root")
def test_sandbox_command_runs_the_installed_worker(installed: Installed) -> None:
    (installed.vinos_home / "routines/pkg-hello.toml").write_text(
        '[routine]\nkind = "command"\n[schedule]\ncron = "0 9 * * *"\n[command]\nrun = "true"\n'
    )
    marks = plant_shadow_packages(installed.home)
    out = installed(
        "/usr/bin/vinos-routine", "sandbox", "pkg-hello", "--", "echo sandboxed; id -u", check=False
    )
    assert not [m for m in marks if m.exists()], "worker.sandboxcli was imported from the cwd"
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[0] == "sandboxed"


@pytest.mark.usefixtures("not_root")
def test_the_spec_names_vinos_brief_and_vinos_routine_status_are_thin_launchers(
    installed: Installed,
) -> None:
    # The names the waybar module and the launcher panel call: the same commands, the same
    # output, from the same private install.
    status = installed("/usr/bin/vinos-routine-status", "--waybar").stdout
    assert status == installed("/usr/bin/vinos-routine", "status", "--waybar").stdout
    assert json.loads(status)["class"] in ("ok", "warning", "attention", "critical")
    brief = installed("/usr/bin/vinos-brief").stdout
    assert brief == installed("/usr/bin/vinos-routine", "brief").stdout
    usage = installed("/usr/bin/vinos-brief", "--help").stdout
    assert usage.startswith("usage: vinos-routine brief")


@pytest.mark.usefixtures("not_root")
def test_vinos_welcome_is_setup(installed: Installed) -> None:
    # The first-boot prompt's name: `vinos-routine setup`, the same report (--check: nothing
    # in the home is written).
    welcome = installed("/usr/bin/vinos-welcome", "--check", "--json", check=False)
    setup = installed("/usr/bin/vinos-routine", "setup", "--check", "--json", check=False)
    assert (welcome.returncode, welcome.stdout) == (setup.returncode, setup.stdout)
    report = json.loads(welcome.stdout)
    assert report["check"] is True
    assert any(i["what"] == "starters" for i in report["items"])
    usage = installed("/usr/bin/vinos-welcome", "--help").stdout
    assert usage.startswith("usage: vinos-routine setup")
