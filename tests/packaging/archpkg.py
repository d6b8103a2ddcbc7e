"""Build, install and run the Arch package, for tests/packaging (no mocks: real makepkg, pacman,
bwrap and systemd tools).

- `build_package` runs makepkg as the (unprivileged) test user in a copy of the tree.
- `Pacman` installs into a scratch root. pacman refuses to run unless geteuid() == 0, so it runs
  under fakeroot, which fakes that and records the ownership pacman sets in a state file kept
  beside the root (`-i`/`-s`), so a later `pacman -Qkk` sees the files as the package has them.
  Scriptlets are skipped (`--noscriptlet`): pacman runs them chrooted into the root, which needs
  real root and a shell inside it; the tests run the .install functions with bash instead.
- `sandbox_argv` runs what was installed under bwrap with its absolute paths intact: the
  scratch root's /usr/bin/vinos-routine (and its thin launchers), /usr/lib/vinos-routine and
  /etc/vinos appear at those paths over the host's /usr and /etc (see there for how), and the
  project tree is not visible, so nothing can be imported from the checkout.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _top_level_packages() -> tuple[str, ...]:
    """The packages as pyproject.toml names them, through the script the PKGBUILD runs."""
    spec = importlib.util.spec_from_file_location("packages", REPO / "scripts/packages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.top_level_packages())


PACKAGES = _top_level_packages()
STARTERS = (
    "day-brief",
    "evening-shutdown",
    "github-review",
    "inbox-triage",
    "repo-digest",
    "research-recap",
)
INSTALL_LIB = "usr/lib/vinos-routine"
SYSTEM_PYTHON = "/usr/bin/python3"  # the launcher's interpreter (its #! line)

# A stale bytecode file planted in the copy the package is built from: it must not be shipped.
PLANTED_PYC = "routines/__pycache__/planted.cpython-311.pyc"

# Never copied into the build: the venv and caches, and earlier local makepkg output.
_SKIP_AT_ROOT = {".venv", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache", "build", "dist"}
_SKIP_IN_ARCH = {"pkg", "src"}


def require(tool: str) -> str:
    """The tool's path, or fail (never skip) saying how to install it."""
    path = shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
    if path is None:
        pytest.fail(f"{tool} is missing: run scripts/system-deps.sh as root (it installs it)")
    return path


def require_unprivileged() -> None:
    if os.geteuid() == 0:
        pytest.fail(
            "the packaging tests build with makepkg (which refuses root) and run the installed "
            "program (which refuses root): use `make test` or scripts/dev-pytest.sh"
        )


def _ignore(directory: str, names: list[str]) -> set[str]:
    here = Path(directory)
    # Bytecode caches are never copied: the suite's other workers write them while this copy
    # runs (a `*.pyc.<id>` temp file renamed away between listing and copying failed the copy),
    # and the build must not see them anyway (the planted .pyc is added to the copy afterwards).
    caches = {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo"))}
    if here == REPO:
        return caches | {n for n in names if n in _SKIP_AT_ROOT or n.endswith(".egg-info")}
    if here == REPO / "packaging" / "arch":
        return caches | {n for n in names if n in _SKIP_IN_ARCH or ".pkg.tar" in n}
    return caches


def copy_tree(dest: Path) -> Path:
    """A writable copy of the checkout as it is now (makepkg writes next to the PKGBUILD)."""
    shutil.copytree(REPO, dest, ignore=_ignore, symlinks=True)
    return dest


def run(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
    check: bool = True,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command; with check, fail the test showing its output when it exits non-zero."""
    proc = subprocess.run(
        [str(a) for a in argv],
        env=dict(env) if env is not None else None,
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, argv))}\nexited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


def once_per_run(
    factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]
) -> Path:
    """The directory `name`, made by `make` once for the whole test run, whichever pytest-xdist
    worker asks first; the others wait on its lock, then use what it made.

    For what is only read afterwards (a built wheel, an installed venv): the workers' tests then
    run side by side instead of each building the same thing, or all of them queueing on the one
    worker that built it. It is made in place (a venv's scripts name their own path); a `make`
    that failed leaves no mark, so the next caller starts again and fails with its own output.
    """
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, above each worker's popen-gwN
    made = root / name
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (made / ".made").is_file():
            shutil.rmtree(made, ignore_errors=True)
            made.mkdir()
            make(made)
            (made / ".made").touch()
    return made


OLD_PIP, OLD_PIPX = "23.0.1", "1.1.0"  # Debian 12 (bookworm)


def _wanted() -> list[list[str]]:
    """What the wheel's, the README's and pipx's installs take: the program's dependencies with
    the dashboard extra, its build backend, and each pip and pipx with theirs (pipx 1.1 also
    puts setuptools and wheel in its shared venv). One download each: pip 23.0.1 and today's
    pip cannot be resolved together."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    program = [
        *project["dependencies"],
        *project["optional-dependencies"]["dashboard"],
        *pyproject["build-system"]["requires"],
        "wheel",
    ]
    return [program, [f"pip=={OLD_PIP}"], ["pip"], [f"pipx=={OLD_PIPX}"], ["pipx"]]


def _download(house: Path) -> None:
    # Side by side (each waits on the index, not the CPU), each into a folder of its own (two may
    # fetch one file); then all in the one folder pip is pointed at.
    jobs = [(house / f"from-{n}", requirements) for n, requirements in enumerate(_wanted())]
    pips = [
        subprocess.Popen(
            [sys.executable, "-m", "pip", "download", "-q", "-d", into, *requirements],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for into, requirements in jobs
    ]
    for pip, (into, requirements) in zip(pips, jobs, strict=True):
        out, _ = pip.communicate(timeout=900)
        assert pip.returncode == 0, f"pip download {requirements} failed:\n{out}"
        for dist in into.iterdir():
            if not (house / dist.name).exists():
                dist.rename(house / dist.name)


def wheelhouse(factory: pytest.TempPathFactory) -> Path:
    """Every distribution the packaging tests' pip and pipx installs take, from PyPI once a run:
    each install would otherwise ask the index again for every dependency, which was most of
    their time (what is installed, and how, is as before)."""
    return once_per_run(factory, "wheelhouse", _download)


def offline_pip(house: Path) -> dict[str, str]:
    """pip's settings (read by every pip: in venvs, pipx's, build isolation's) to install from
    `house` alone, and without byte-compiling what it installs: pip compiles every module of
    every dependency (the SDKs' thousands) at install, ~3 s of CPU an install of the program
    (measured with pip 23.0.1: 5.5 s against 2.3 s), and a test's installs import a few of
    them, each compiled at its first import as it would be anyway. Installed files, scripts and
    metadata are as before. PIP_COMPILE=0, not PIP_NO_COMPILE=1: pip stores an environment
    variable's boolean in its option's destination, `compile` for both --compile and
    --no-compile, so PIP_NO_COMPILE=1 means compile."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house), "PIP_COMPILE": "0"}


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **extra}


@dataclass(frozen=True)
class Built:
    package: Path  # the .pkg.tar.* file
    tree: Path  # the copy of the checkout it was built from


def build_package(tree: Path, work: Path) -> Path:
    """Run makepkg (--nodeps: Arch's repositories are out of reach) in `tree`; the package path."""
    require_unprivileged()
    require("makepkg")
    require("fakeroot")
    require("bsdtar")
    out = work / "out"
    for d in ("out", "build", "srcdest", "logs", "home"):
        (work / d).mkdir(parents=True, exist_ok=True)
    env = clean_env(
        work / "home",
        PKGDEST=str(out),
        BUILDDIR=str(work / "build"),
        SRCDEST=str(work / "srcdest"),
        LOGDEST=str(work / "logs"),
        PACKAGER="vinos-routine tests <tests@localhost>",
    )
    run(
        ["makepkg", "--nodeps", "--noconfirm", "--cleanbuild"], env=env, cwd=tree / "packaging/arch"
    )
    built = sorted(out.glob("vinos-routine-*.pkg.tar*"))
    assert len(built) == 1, f"makepkg made {built}"
    return built[0]


@dataclass(frozen=True)
class Pacman:
    """pacman on a scratch root, under fakeroot (see the module docstring)."""

    root: Path
    # Keep fakeroot's record of ownership across calls (for -Qkk); saving it costs a second.
    track_owners: bool = True

    @property
    def state(self) -> Path:
        return self.root.parent / f"{self.root.name}.fakeroot"

    @property
    def conf(self) -> Path:
        return self.root.parent / f"{self.root.name}.pacman.conf"

    def init(self) -> Pacman:
        require("pacman")
        (self.root / "var/lib/pacman").mkdir(parents=True)
        (self.root / "var/cache/pacman/pkg").mkdir(parents=True)
        (self.root / "var/log").mkdir(parents=True)
        # The host's pacman.conf is not ours to depend on (Debian's has CheckSpace, which
        # looks at the host's mounts); this is all pacman needs for -U.
        self.conf.write_text("[options]\nArchitecture = auto\n")
        self.state.touch()
        return self

    def __call__(
        self, *args: str, check: bool = True, fake: str = "read"
    ) -> subprocess.CompletedProcess[str]:
        """pacman ARGS; fake="write" for what changes the root (saves the fakeroot state, which
        costs faked a second), "read" for what needs the ownership seen, "none" otherwise."""
        r = self.root
        prefix: list[str | Path] = []
        if fake == "write" and self.track_owners:
            prefix = ["fakeroot", "-i", self.state, "-s", self.state, "--"]
        elif fake == "write":
            prefix = ["fakeroot", "--"]
        elif fake == "read":
            prefix = ["fakeroot", "-i", self.state, "--"]
        return run(
            [
                *prefix,
                "pacman", "--config", self.conf, "--root", r, "--dbpath", r / "var/lib/pacman",
                "--cachedir", r / "var/cache/pacman/pkg", "--logfile", r / "var/log/pacman.log",
                "--hookdir", r / "etc/pacman.d/hooks", "--gpgdir", r / "etc/pacman.d/gnupg",
                "--noconfirm", *args,
            ],
            env=clean_env(r),
            check=check,
        )  # fmt: skip

    def install(self, package: Path) -> None:
        # --nodeps twice skips dependency checks altogether: the root holds nothing else.
        self("--noscriptlet", "--nodeps", "--nodeps", "-U", str(package), fake="write")

    def files(self) -> list[str]:
        """The package's files and directories as pacman recorded them, relative to the root."""
        lines = self("-Ql", "vinos-routine", fake="none").stdout.splitlines()
        prefix = f"vinos-routine {self.root}/"
        assert all(line.startswith(prefix) for line in lines), lines[:3]
        return [line[len(prefix) :] for line in lines]


# --- running what was installed -------------------------------------------------------------


def venv_site_packages() -> Path:
    """The test venv's site-packages, which stands in for Arch's python-* packages."""
    if sys.prefix == sys.base_prefix:
        pytest.fail("run the tests with the project's venv (make test, scripts/dev-pytest.sh)")
    probe = run([SYSTEM_PYTHON, "-I", "-c", "import sys; print(sys.version_info[:2])"])
    if probe.stdout.strip() != str(sys.version_info[:2]):
        pytest.fail(
            f"the venv's Python {sys.version_info[:2]} is not {SYSTEM_PYTHON} "
            f"{probe.stdout.strip()}: its compiled modules would not load under the installed "
            f"launcher; rebuild the venv from {SYSTEM_PYTHON} (make clean venv)"
        )
    return Path(sysconfig.get_paths()["purelib"])


def system_site_dir() -> str:
    """The first site-packages directory /usr/bin/python3 -I searches that exists on the host."""
    out = run(
        [SYSTEM_PYTHON, "-I", "-c", "import site; print('\\n'.join(site.getsitepackages()))"]
    ).stdout.split()
    for d in out:
        if Path(d).is_dir() and d.startswith("/usr/"):
            return d
    pytest.fail(f"{SYSTEM_PYTHON} has no site-packages directory under /usr: {out}")


def _merge(target: str, host: str, extra: Mapping[str, Path], link_farm: bool) -> list[str]:
    """bwrap ops that show `host`'s entries at `target` plus `extra` entries from elsewhere.

    bwrap cannot add a mount point inside a read-only bind of a host directory (it would have
    to create it on the host), so `target` becomes a tmpfs holding the host's entries again.
    With link_farm, entries are symlinks into the whole host directory bound at
    target/.host (a few hundred bind mounts cost seconds; symlinks cost nothing, and they
    resolve inside nested sandboxes too, which bind /usr recursively). Python binaries are
    bound, not linked, so the interpreter finds its prefix from its own path as on the host.
    """
    ops = ["--tmpfs", target]
    if link_farm:
        ops += ["--ro-bind", host, f"{target}/.host"]
    for name in sorted(os.listdir(host)):
        if name in extra:
            continue
        src = os.path.join(host, name)
        dst = f"{target}/{name}"
        if os.path.islink(src):
            ops += ["--symlink", os.readlink(src), dst]
        elif link_farm and not name.startswith("python"):
            ops += ["--symlink", f".host/{name}", dst]
        else:
            ops += ["--ro-bind-try", src, dst]
    for name, path in extra.items():
        ops += ["--ro-bind", str(path), f"{target}/{name}"]
    return ops


def sandbox_argv(
    root: Path, *, env: Mapping[str, str], writable: Sequence[Path], cwd: Path
) -> list[str]:
    """bwrap argv (up to and including `--`) showing the installed package at its real paths.

    Python dependencies: the launcher runs /usr/bin/python3 -I, which sees only the system
    site-packages, where Arch's python-anthropic & co. would be. Here the test venv's
    site-packages is bound over that directory, so the installed launcher, the daemon and the
    worker run exactly as installed (same interpreter, flags and sys.path) with the venv's
    libraries. The editable install's .pth hooks in there are masked: the checkout is not
    mounted anyway, and every import of ours must resolve to /usr/lib/vinos-routine.
    """
    site = venv_site_packages()
    ops = [
        require("bwrap"),
        "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
        "--die-with-parent", "--new-session", "--clearenv",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            ops += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            ops += ["--ro-bind", top, top]
    launchers = ("vinos-routine", "vinos-brief", "vinos-routine-status", "vinos-welcome")
    ops += _merge("/usr/bin", "/usr/bin", {n: root / "usr/bin" / n for n in launchers}, True)
    ops += _merge("/usr/lib", "/usr/lib", {"vinos-routine": root / INSTALL_LIB}, False)
    ops += _merge("/etc", "/etc", {"vinos": root / "etc/vinos"}, False)
    target = system_site_dir()
    ops += ["--ro-bind", str(site), target]
    for pth in sorted(site.glob("__editable__*.pth")):
        ops += ["--ro-bind", "/dev/null", f"{target}/{pth.name}"]
    ops += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--ro-bind-try", "/sys", "/sys"]
    for w in writable:
        ops += ["--bind", str(w), str(w)]
    for key, value in env.items():
        ops += ["--setenv", key, value]
    ops += ["--chdir", str(cwd), "--"]
    return ops


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
