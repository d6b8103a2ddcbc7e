"""Fixtures for the worker tests: fake providers on 127.0.0.1 and the worker's environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import FakeAnthropic, FakeOllama
from worker_harness import API_KEY, worker_env


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
