"""An OpenAI-compatible provider through a real daemon: config.toml declares it, a routine
names it, `run` goes daemon → worker → FakeOpenAI, and the ledger records the route, the
model and the dollars from the provider's own prices. The key (key_file) reaches neither the
ledger, the run log nor the daemon's log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from routines.spec.paths import paths
from tests.fakes import FakeOpenAI
from tests.fakes import openai_replies as OA
from tests.supervisor.daemonkit import DaemonProcess, rows, write_routine

pytestmark = pytest.mark.slow  # a real daemon

KEY = "sk-or-v1-daemon-test-5a5a5a"
MODEL = "anthropic/claude-sonnet-4"
ROUTINE = f"""[routine]
description = "a brief on OpenRouter"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "openrouter"
model = "{MODEL}"
system = "You write the user's morning brief."

[budget]
max_dollars_per_day = 1.0
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(models=(MODEL,)) as fake:
        yield fake


def test_a_declared_provider_runs_through_the_daemon(
    tmp_path: Path, not_root: None, server: FakeOpenAI
) -> None:
    p = paths()
    key = p.home / "secrets" / "openrouter-key"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text(KEY)
    key.chmod(0o600)
    url = server.base_url
    p.config_file.write_text(
        f"""[providers.openrouter]
kind = "openai"
base_url = "{url}"
key_file = "{key}"
prices = {{ "{MODEL}" = {{ input = 3.0, output = 15.0 }} }}
"""
    )
    server.add(
        OA.text(
            "# Brief\n\n" + "All quiet today. " * 20,
            model=MODEL,
            prompt_tokens=2000,
            completion_tokens=400,
        )
    )
    write_routine("brief", ROUTINE)
    d = DaemonProcess(tmp_path).start()
    fin = d.request("run", {"name": "brief"})
    assert fin["status"] == "ok", fin
    assert server.chats[0].headers["authorization"] == f"Bearer {KEY}"
    [row] = rows("brief")
    assert (row.status, row.route, row.model) == ("ok", "openrouter", MODEL)
    assert row.dollars == pytest.approx((2000 * 3.0 + 400 * 15.0) / 1e6)
    assert d.stop() == 0
    logs = d.log() + "".join(
        f.read_text() for f in (p.home / "routines" / "state" / "brief" / "runs").glob("*.jsonl")
    )
    assert logs and KEY not in logs and KEY not in repr(row)
