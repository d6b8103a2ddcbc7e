"""Fixtures for the worker tests: fake providers on 127.0.0.1 and the worker's environment."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeAnthropic, FakeOllama
from tests.packaging.archpkg import once_per_run
from tests.worker.forked import close_forkservers
from tests.worker.worker_harness import API_KEY, worker_env


@pytest.fixture(scope="session", autouse=True)
def forkserver() -> Iterator[None]:
    """The test process's forkserver (tests/worker/forked.py), ended and reaped at its end."""
    yield
    close_forkservers()


@pytest.fixture
def home(vinos_env: Path) -> Path:
    return vinos_env


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with FakeOllama() as fake:
        yield fake


@pytest.fixture
def claude() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def env(claude: FakeAnthropic) -> dict[str, str]:
    """The worker's environment: the fake Anthropic and a (fake) API key."""
    return worker_env(ANTHROPIC_BASE_URL=claude.url, ANTHROPIC_API_KEY=API_KEY)


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A PATH entry of this test's own: the worker passes PATH to each sandbox (bwrap and
    the server both carry it), so it marks this test's processes, not a parallel test's
    (worker_harness.marked_processes finds them)."""
    mark = str(tmp_path / "marker-bin")
    monkeypatch.setenv("PATH", f"{mark}:{os.environ['PATH']}")
    return mark


# --- MCP servers from npm, installed once a test run into a tmp prefix ---

# Pinned: the tests assert these servers' own tool names and texts, which a new release may
# change; raise the versions together with those assertions.
FS_PACKAGE = "@modelcontextprotocol/server-filesystem@2026.8.31"
EVERYTHING_PACKAGE = "@modelcontextprotocol/server-everything@2026.8.31"


@pytest.fixture(scope="session")
def npm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One npm cache for the session's installs (a package's shared deps are fetched once)."""
    return tmp_path_factory.mktemp("npm-cache")


def npm_install(package: str, prefix: Path, cache: Path) -> Path:
    """`npm install PACKAGE` into `prefix` from the registry, as a fresh machine gets it;
    its `node_modules/.bin` (the test fails, never skips, when npm cannot install it)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(f"npm is needed for the tests of {package}")
    done = subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(prefix),
            "--cache",
            str(cache),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            package,
        ],
        check=False,
        timeout=300,
        capture_output=True,
        text=True,
        # The system's CA store, as pip and git use (a TLS-inspecting proxy's CA is there).
        env={
            **os.environ,
            "npm_config_update_notifier": "false",
            "NODE_OPTIONS": "--use-openssl-ca",
        },
    )
    if done.returncode != 0:
        pytest.fail(f"npm install {package} failed:\n{done.stdout}\n{done.stderr}")
    return prefix / "node_modules" / ".bin"


# Once a run, not once a pytest-xdist worker (each install took ~9 s of a test's setup, up to
# four times): the prefix is only read after.
@pytest.fixture(scope="session")
def fs_server(tmp_path_factory: pytest.TempPathFactory, npm_cache: Path) -> Path:
    """@modelcontextprotocol/server-filesystem, npm-installed into a prefix of the run."""
    prefix = once_per_run(
        tmp_path_factory, "npm-prefix", lambda into: npm_install(FS_PACKAGE, into, npm_cache)
    )
    return prefix / "node_modules/.bin/mcp-server-filesystem"


@pytest.fixture(scope="session")
def everything_server(tmp_path_factory: pytest.TempPathFactory, npm_cache: Path) -> Path:
    """@modelcontextprotocol/server-everything (the MCP reference servers' test server:
    images, resources, annotations, progress, sampling), npm-installed likewise."""
    prefix = once_per_run(
        tmp_path_factory,
        "npm-prefix-everything",
        lambda into: npm_install(EVERYTHING_PACKAGE, into, npm_cache),
    )
    return prefix / "node_modules/.bin/mcp-server-everything"
