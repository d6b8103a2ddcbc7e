"""`make demo` as the README promises it: a normal user on Debian, whose PATH has no /sbin,
runs it in place (scripts/as-user.sh → scripts/system-deps.sh demo-here → the demo) from a venv
that holds the product and its runtime dependencies only, and when something is missing it is
told the exact packages the demo needs, nothing more."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_demo import run_demo

REPO = Path(__file__).resolve().parent.parent
# A normal Debian user's PATH: no /sbin or /usr/sbin, where ldconfig lives.
DEBIAN_USER_PATH = "/usr/local/bin:/usr/bin:/bin"


# Its own deadline: the fresh venv's pip install (up to 600 s, the network's and the load's
# pace) and the demo (up to 300 s) are both inside it; the suite's 120 s is for one test's own
# work, and this one's setup alone took longer at load 10.
@pytest.mark.timeout(960)
@pytest.mark.slow  # the demo starts a real daemon and waits for its first run
def test_make_demo_runs_for_a_normal_user_with_debians_path(tmp_path: Path, not_root: None) -> None:
    env = {
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PATH": DEBIAN_USER_PATH,
        "LANG": "C.UTF-8",
        "DEMO_HOME": str(tmp_path / "demo-home"),
        # The demo's venv (the Makefile's demo-venv target) built afresh, as in a fresh clone.
        "DEMO_VENV": str(tmp_path / "demo-venv"),
    }
    for key in ("VINOS_HOME", "VINOS_SYSTEM_DIR", "XDG_RUNTIME_DIR"):
        env[key] = os.environ[key]
    # The venv first, on its own deadline (`make demo` then finds it made and installs nothing).
    subprocess.run(
        ["make", "-s", "-C", str(REPO), "demo-venv"],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,  # a fresh venv: pip installs the runtime dependencies
    )
    done = run_demo(["make", "-s", "-C", str(REPO), "demo"], env, tmp_path / "clock-offset")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "system-deps" not in done.stderr
    assert "Daemon stopped (exit 0)" in done.stdout
    # The commands it shows can be pasted into a shell as they are.
    assert "$ vinos-routine schedule explain --every 'every weekday at 9:00'" in done.stdout
    assert list((tmp_path / "demo-home/routines/state/machine-check").glob("*.md"))
    # It ran from the demo's venv, which has the product and none of the test tools.
    found = subprocess.run(
        [tmp_path / "demo-venv/bin/python", "-c", FIND_MODULES, "supervisor", *TEST_TOOLS],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    assert found == ["supervisor"]


# What `.[test]` adds (pyproject.toml) and the demo must not install.
TEST_TOOLS = ("pytest", "playwright", "mypy", "psycopg", "mcp_server_time", "croniter", "mkdocs")
FIND_MODULES = (
    "import importlib.util, sys; print(*(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
)


def fake_path_without_bwrap(tmp_path: Path) -> Path:
    """A PATH directory with what system-deps.sh calls, but no bwrap and no ldconfig."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python3", "grep", "id"):
        found = shutil.which(tool, path=DEBIAN_USER_PATH)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return bin_dir


def test_system_deps_for_the_demo_names_only_the_packages_the_demo_needs(
    tmp_path: Path, not_root: None
) -> None:
    bin_dir = fake_path_without_bwrap(tmp_path)
    done = subprocess.run(
        ["/bin/bash", str(REPO / "scripts" / "system-deps.sh"), "demo-here"],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    err = done.stderr
    # bwrap is missing; libseccomp is installed (found without ldconfig on PATH).
    assert "missing for 'make demo': bwrap\n" in err
    if Path("/usr/bin/apt-get").exists():
        assert "install them with: sudo apt-get install bubblewrap\n" in err
    else:
        assert "install them with: sudo pacman -S --needed bubblewrap\n" in err
    for unrelated in ("chromium", "postgresql", "pacman-package-manager", "make test"):
        assert unrelated not in err
