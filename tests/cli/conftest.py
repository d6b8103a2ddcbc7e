"""Fixtures for the CLI tests: `cli` runs the real CLI's entry point in-process
(tests/cli/inprocess.py; `cli.spawn` as a subprocess), `on_pty` on a pseudo-terminal
(see cli_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.cli.cli_helpers import Cli, OnPty, PtyRun, make_cli, start_pty


@pytest.fixture
def cli(vinos_env: Path, tmp_path: Path) -> Cli:
    return make_cli(vinos_env, tmp_path)


@pytest.fixture
def on_pty(cli: Cli) -> Iterator[OnPty]:
    """Start the CLI on a pseudo-terminal: on_pty(*args, env={...}) -> PtyRun."""
    runs: list[PtyRun] = []

    def start(*args: str, env: Mapping[str, str | None] | None = None) -> PtyRun:
        merged = cli.environ({"TERM": "xterm-256color", **(env or {})})
        run = start_pty(cli.argv(*args), merged, cli.home)
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.status is None:
            run.kill()
