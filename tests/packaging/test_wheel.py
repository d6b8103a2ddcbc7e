"""The wheel and the sdist, as a user installs them: built from a copy of the tree with
`python -m build`, the wheel installed (not editable) into a fresh venv as the unprivileged test
user, and the installed `vinos-routine` used from a directory far from the checkout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from tests.packaging.archpkg import (
    PACKAGES,
    REPO,
    copy_tree,
    offline_pip,
    once_per_run,
    require_unprivileged,
    run,
    wheelhouse,
)

# Slow: builds, installs and starts the package (make test-fast leaves these out). The wheel
# and its two installs are made once a run (once_per_run) and only read after. The tests that
# use them stay on one worker (the "wheel" xdist group), but the one that drives the real user
# manager joins test_systemd_user.py's group ("user-manager"): one manager, one
# ~/.config/systemd/user.
pytestmark = [pytest.mark.slow]
WHEEL = pytest.mark.xdist_group("wheel")
USER_MANAGER = pytest.mark.xdist_group("user-manager")

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
DIST = "vinos_routine"
WAIT = 60.0  # a bound on waits for events that must happen, never a speed assertion
# Top-level directories of the tree that are not shipped: their own __init__.py is for running
# them in place (python -m bench), not for installing.
NOT_SHIPPED = {"tests", "bench"}


def package_files(tree: Path) -> set[str]:
    """Every file under the shipped packages in `tree`, relative to it (no bytecode)."""
    out = set()
    for package in PACKAGES:
        for path in (tree / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                out.add(path.relative_to(tree).as_posix())
    return out


def test_every_top_level_package_is_listed_in_pyproject() -> None:
    """A new package (a dashboard/, say) is added to pyproject.toml's include list, the one
    place the wheel, the Arch package and mypy take it from, or it would be left behind."""
    in_tree = {
        d.name
        for d in REPO.iterdir()
        if (d / "__init__.py").is_file() and d.name not in NOT_SHIPPED
    }
    assert set(PACKAGES) == in_tree, (
        "pyproject.toml [tool.setuptools.packages.find] include lists "
        f"{sorted(PACKAGES)}; the tree's packages are {sorted(in_tree)}"
    )
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in PACKAGES:  # each with its subpackages
        assert f"{package}.*" in include, f"pyproject.toml: include lacks {package}.*"


@dataclass(frozen=True)
class Dists:
    wheel: Path
    sdist: Path
    tree: Path


def build_dists(work: Path, house: Path) -> None:
    tree = copy_tree(work / "tree")
    # Build isolation: pip installs the build backend pyproject.toml names, as for a user.
    env = {**os.environ, **offline_pip(house)}
    run([sys.executable, "-m", "build", "--outdir", work / "dist", tree], env=env, cwd=work,
        timeout=600)  # fmt: skip


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    require_unprivileged()
    house = wheelhouse(tmp_path_factory)
    work = once_per_run(tmp_path_factory, "wheel-dists", lambda w: build_dists(w, house))
    (wheel,) = (work / "dist").glob("*.whl")
    (sdist,) = (work / "dist").glob("*.tar.gz")
    return Dists(wheel, sdist, work / "tree")


@dataclass(frozen=True)
class Venv:
    root: Path  # the venv the program is installed in
    program: Path  # the `vinos-routine` a user runs
    home: Path
    vinos_home: Path
    runtime: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "PATH": f"{self.program.parent}:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "VINOS_HOME": str(self.vinos_home),
            "VINOS_SYSTEM_DIR": str(self.home / "no-system-routines"),
            "XDG_RUNTIME_DIR": str(self.runtime),
        }

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # From $HOME, far from the checkout: nothing can be imported from the tree.
        return run([self.program, *args], env=self.env, cwd=self.home, check=check)

    def site_packages(self) -> Path:
        (site,) = self.root.glob("lib/python3*/site-packages")
        return site


def install(how: str, dists: Dists, base: Path, house: Path) -> None:
    """Installed as the README says: the built wheel with pip into a venv of its own, or the
    clone with `pipx install .`."""
    # Dependencies from the run's wheelhouse (archpkg.wheelhouse); nothing else from this
    # process's environment.
    pip_env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    pip_env |= offline_pip(house)
    if how == "pip":
        root = base / "venv"
        run([sys.executable, "-m", "venv", root])
        run([root / "bin/python", "-m", "pip", "install", "-q", dists.wheel], env=pip_env,
            cwd=base, timeout=600)  # fmt: skip
    else:
        tools = base / "pipx-itself"
        run([sys.executable, "-m", "venv", tools])
        run([tools / "bin/python", "-m", "pip", "install", "-q", "pipx>=1.5"], env=pip_env,
            cwd=base, timeout=600)  # fmt: skip
        pipx_env = {
            **pip_env,
            "PIPX_HOME": str(base / "pipx"),
            "PIPX_BIN_DIR": str(base / "bin"),
            "PIPX_MAN_DIR": str(base / "man"),
        }
        # `pipx install .` in a clone, as the README says (pip builds the wheel from the tree).
        run([tools / "bin/pipx", "install", "."], env=pipx_env, cwd=dists.tree, timeout=600)


@pytest.fixture(scope="module", params=["pip", "pipx"])
def venv(
    request: pytest.FixtureRequest, dists: Dists, tmp_path_factory: pytest.TempPathFactory
) -> Venv:
    """The install (made once a run, then only run), with a HOME and state of this module's."""
    how: str = request.param
    house = wheelhouse(tmp_path_factory)
    base = once_per_run(
        tmp_path_factory, f"installed-{how}", lambda into: install(how, dists, into, house)
    )
    if how == "pip":
        root, program = base / "venv", base / "venv/bin/vinos-routine"
    else:
        root, program = base / "pipx/venvs/vinos-routine", base / "bin/vinos-routine"
    assert program.is_file(), f"{how} installed no {program}"
    home = tmp_path_factory.mktemp(f"{how}-home") / "home"
    vinos_home = home / ".vinos"
    runtime = home.parent / "run"
    for d in (vinos_home / "routines", home / "no-system-routines", runtime):
        d.mkdir(parents=True)
    runtime.chmod(0o700)
    return Venv(root, program, home, vinos_home, runtime)


@WHEEL
@pytest.mark.timeout(900)
def test_wheel_holds_every_module_and_no_tests(dists: Dists) -> None:
    names = set(zipfile.ZipFile(dists.wheel).namelist())
    shipped = {n for n in names if not n.startswith(f"{DIST}-{VERSION}.dist-info/")}
    expected = package_files(dists.tree)
    # A data file (not .py) is shipped only when pyproject.toml's package-data names it.
    assert sorted(expected - shipped) == [], (
        "in the tree's packages but not in the wheel: a new package goes in "
        "[tool.setuptools.packages.find] include, a data file in [tool.setuptools.package-data]"
    )
    assert sorted(shipped - expected) == [], "in the wheel but not in the tree's packages"
    assert not [n for n in names if "tests/" in n or Path(n).name.startswith("test_")]
    assert not [n for n in names if n.endswith((".pyc", ".pyo"))]
    meta = zipfile.ZipFile(dists.wheel).read(f"{DIST}-{VERSION}.dist-info/METADATA").decode()
    assert "License-Expression: MIT" in meta.splitlines()
    assert "License-File: LICENSE" in meta.splitlines()
    assert f"{DIST}-{VERSION}.dist-info/licenses/LICENSE" in names
    # The sdist can rebuild the wheel: the same package files, and what the build reads.
    with tarfile.open(dists.sdist) as sdist:
        prefix = f"{DIST}-{VERSION}/"
        members = {m.name.removeprefix(prefix) for m in sdist.getmembers() if m.isfile()}
    assert {"pyproject.toml", "LICENSE", "README.md"} <= members
    assert sorted(expected - members) == [], "in the tree's packages but not in the sdist"


@WHEEL
@pytest.mark.timeout(900)
def test_installed_wheel_runs(venv: Venv) -> None:
    assert venv("--version").stdout.strip() == f"vinos-routine {VERSION}"
    # The code that runs is the venv's copy, not the checkout's.
    where = run(
        [venv.root / "bin/python", "-c", "import supervisor.cli.commands, worker.providers as w; "
         "print(w.__file__)"],
        env=venv.env,
        cwd=venv.home,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(venv.site_packages()), where

    starters = sorted((venv.site_packages() / "routines/starters").glob("*.toml"))
    assert len(starters) >= 5, starters
    out = venv("validate", "--json", *map(str, starters))
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert sorted(r["file"] for r in results) == [str(s) for s in starters]
    assert all(r["ok"] and not r["errors"] for r in results), results

    explained = venv("schedule", "explain", "30 6 * * 1-5").stdout
    assert "Every weekday at 6:30 AM" in explained, explained
    assert "Mon..Fri *-*-* 06:30:00" in explained, explained

    (venv.vinos_home / "routines/wheel-hello.toml").write_text(
        '[routine]\nkind = "command"\n[schedule]\ncron = "0 9 * * *"\n'
        '[command]\nrun = "echo hello from the wheel"\n'
    )
    fin = json.loads(venv("run", "wheel-hello", "--json").stdout)
    assert fin["status"] == "ok", fin
    (output,) = (venv.vinos_home / "routines/state/wheel-hello").glob("*.md")
    assert "hello from the wheel" in output.read_text()


@WHEEL
@pytest.mark.timeout(900)
def test_installed_daemon_answers_status_and_stops(venv: Venv) -> None:
    daemon = subprocess.Popen(
        [venv.program, "daemon"],
        env=venv.env,
        cwd=venv.home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert daemon.poll() is None, daemon.communicate()
            st = json.loads(venv("status", "--json").stdout)
            if st["daemon"]:
                break
            assert time.monotonic() < deadline, f"the daemon never answered status: {st}"
            time.sleep(0.2)
        assert st["pid"] == daemon.pid
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=WAIT)
        assert daemon.returncode == 0, err
        assert json.loads(venv("status", "--json").stdout)["daemon"] is False
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.communicate()


def user_manager(runtime: Path) -> None:
    """Fail under CI, skip elsewhere, unless a `systemd --user` manager answers at `runtime`
    (scripts/user-manager.sh starts one; make test does, as root)."""
    problem = ""
    if not (runtime / "systemd/private").exists():
        problem = f"no user manager: {runtime}/systemd/private does not exist"
    else:
        state = subprocess.run(
            ["systemctl", "--user", "is-system-running"],
            env={"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(runtime)},
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if state not in ("running", "degraded"):
            problem = f"the user manager says {state!r}"
    if problem:
        how = "as root, scripts/user-manager.sh start $USER starts one (make test does)"
        if os.environ.get("CI"):
            pytest.fail(f"{problem}; {how}")
        pytest.skip(f"{problem} (not under CI); {how}")


@USER_MANAGER
@pytest.mark.timeout(900)
def test_setup_gives_a_unit_that_fires_a_scheduled_run(venv: Venv) -> None:
    """A pip or pipx install, `setup`, `enable --now` under the real user manager: the unit
    setup wrote starts this install's daemon, which runs a once-a-minute routine on schedule,
    with the settings of ~/.config/vinos-routine/daemon.env in its environment (the unit's
    EnvironmentFile=: how a variable set in a shell reaches a daemon systemd starts)."""
    runtime = Path(f"/run/user/{os.getuid()}")
    user_manager(runtime)
    home = Path(os.path.expanduser("~"))  # where the user manager looks for units
    units = home / ".config/systemd/user"
    written = [units / u for u in ("vinos-routined.service", "vinos-routined.socket")]
    dashboard = [
        units / u for u in ("vinos-routine-dashboard.service", "vinos-routine-dashboard.socket")
    ]
    completion = home / ".local/share/bash-completion/completions/vinos-routine"
    daemon_env = home / ".config/vinos-routine/daemon.env"
    for leftover in (*written, units / "vinos-routined.service.d", completion, daemon_env):
        assert not leftover.exists(), f"{leftover} exists: another run's, or the user's own"
    env = {**venv.env, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime), "SHELL": "/bin/bash"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run([venv.program, *args], env=env, cwd=venv.home, timeout=WAIT)

    def systemctl(*args: str) -> subprocess.CompletedProcess[str]:
        return run(["systemctl", "--user", *args], env=env, check=False, timeout=WAIT)

    try:
        out = cli("setup").stdout
        assert "ran systemctl --user daemon-reload" in out, out
        assert f"ExecStart={venv.program} daemon\n" in written[0].read_text()
        # Once a minute, at the second 10 s from now rather than at each minute's start (up to
        # 60 s away): the first slot comes soon after the daemon is up. A daemon slow to start
        # misses none of the test: the next minute's slot is the same scheduled run, later.
        second = (datetime.now().second + 10) % 60
        (venv.vinos_home / "routines/every-minute.toml").write_text(
            '[routine]\nkind = "command"\nenabled = true\n[schedule]\n'
            f'oncalendar = "*:*:{second:02d}"\n'
            '[command]\nrun = "echo fired by the unit setup wrote"\n'
        )
        daemon_env.parent.mkdir(parents=True, exist_ok=True)
        daemon_env.write_text("# read by the unit setup wrote\nVINOS_TEST_DAEMON_ENV=reached\n")
        started = systemctl("enable", "--now", "vinos-routined.service")
        assert started.returncode == 0, started.stderr
        pid = int(systemctl("show", "vinos-routined", "-p", "MainPID", "--value").stdout)
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"VINOS_TEST_DAEMON_ENV=reached" in environ
        # The daemon the unit started is this install's: it loaded its libraries from the venv.
        assert str(venv.site_packages()) in Path(f"/proc/{pid}/maps").read_text()
        deadline = time.monotonic() + 150  # the slot (at most a minute away), then the run
        rows: list[dict[str, object]] = []
        while not [r for r in rows if r.get("trigger") == "schedule" and r.get("status") == "ok"]:
            assert time.monotonic() < deadline, f"no scheduled run: {rows}"
            time.sleep(1)
            lines = cli("history", "every-minute", "--json").stdout.splitlines()
            rows = [json.loads(line) for line in lines]
        (output,) = (venv.vinos_home / "routines/state/every-minute").glob("*.md")
        assert "fired by the unit setup wrote" in output.read_text()
        assert "daemon: running" in cli("status").stdout
    finally:
        systemctl("disable", "--now", "vinos-routined.service", "vinos-routined.socket")
        for path in (*written, *dashboard):
            path.unlink(missing_ok=True)
        completion.unlink(missing_ok=True)
        daemon_env.unlink(missing_ok=True)
        systemctl("daemon-reload")
        systemctl("reset-failed")
