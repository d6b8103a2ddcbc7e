"""The local route against llama-server, as scenarios run twice: live against a real server
built from source (`make test-models`, tests/worker/test_worker_llama_live.py, which records
the exchanges) and replayed from those recordings in `make test`
(tests/worker/test_worker_llama_replay.py). Each scenario runs the real worker and asserts
wire facts, never the model's words: what the server said (its usage, its status codes) is
read from the exchanges, so the same checks hold live and replayed.

`url` is where the worker's provider points (a Recorder in front of the real server, or a
Replay); `tools_template` says which of the two live servers a scenario needs: one started
with `--jinja --chat-template-file chatml-tools.jinja` (a template that shows tools), one
with the model's own template (SmolLM2's, which cannot).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from tests.fakes import openai_replies as OA
from tests.fakes.recorded import Inject
from tests.fakes.server import Recorded, Reply
from tests.worker.worker_harness import WorkerRun, make_job, routine_toml, run_worker, worker_env

__all__ = ["SCENARIOS", "Scenario", "server_usage"]

MODEL = "smollm2"


@dataclass(frozen=True)
class Scenario:
    name: str
    tools_template: bool
    run: Callable[[Path, str], WorkerRun]
    check: Callable[[WorkerRun, list[dict[str, Any]]], None]
    inject: Inject | None = None


def _provider(url: str) -> dict[str, Any]:
    return {
        "llama": {
            "kind": "openai",
            "base_url": url + "/v1",
            "local": True,
            "key_file": None,
            "prices": {},
        }
    }


def _run(
    home: Path,
    url: str,
    *,
    system: str = "You write a two-line status note.",
    tools: tuple[str, ...] = (),
    agent: str = "max_output_tokens = 48",
    route: str = "llama",
    env: dict[str, str] | None = None,
    pricing: dict[str, list[float]] | None = None,
) -> WorkerRun:
    if route == "llama":
        agent = f'model = "{MODEL}"\n{agent}'
    toml = routine_toml(route=route, system=system, tools=tools, extra_agent=agent)
    job = msgspec.structs.replace(make_job(home, toml, pricing=pricing), providers=_provider(url))
    return run_worker(job, env=env or worker_env())


def _chats(exchanges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in exchanges if e["path"] == "/v1/chat/completions"]


def server_usage(exchange: dict[str, Any]) -> tuple[int, int]:
    """(prompt, completion) tokens as the server's own usage chunk said."""
    for line in exchange["response"].splitlines():
        if line.startswith("data: {"):
            usage = json.loads(line[6:]).get("usage")
            if usage:
                return usage["prompt_tokens"], usage["completion_tokens"]
    raise AssertionError(f"no usage in {exchange['response'][:300]!r}")


def _finish_reasons(exchange: dict[str, Any]) -> list[str]:
    out = []
    for line in exchange["response"].splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices") or ():
                if choice.get("finish_reason"):
                    out.append(choice["finish_reason"])
    return out


# -- usage recorded equals the server's; the stream merges -----------------------------------


def _plain(home: Path, url: str) -> WorkerRun:
    return _run(home, url)


def _check_plain(r: WorkerRun, exchanges: list[dict[str, Any]]) -> None:
    (chat,) = _chats(exchanges)
    assert chat["status"] == 200 and chat["content_type"].startswith("text/event-stream")
    assert chat["request"]["stream_options"] == {"include_usage": True}
    assert r.result.status == "ok", r.result
    # The run's local counts are the server's own usage chunk, not an estimate.
    assert (r.total("local_input"), r.total("local_output")) == server_usage(chat)
    assert r.output().strip()


# -- tools refused on a template without tools ------------------------------------------------


def _tools_refused(home: Path, url: str) -> WorkerRun:
    return _run(home, url, tools=("shell:date",))


def _check_tools_refused(r: WorkerRun, exchanges: list[dict[str, Any]]) -> None:
    assert [e["path"] for e in exchanges] == ["/props"]
    props = json.loads(exchanges[0]["response"])
    assert props["chat_template_caps"]["supports_tools"] is False
    assert r.result.status == "failed"
    assert "chat template cannot show tools" in (r.result.error or "")


# -- the tools template: offered, and a malformed call recovered -------------------------------


def _malformed_first(req: Recorded, index: int) -> Reply | None:
    """The first answer is a tool call with broken arguments (a small proxy injects it: the
    real model cannot be made to write one); the follow-up goes to the real server."""
    if index != 0:
        return None
    call = OA.tool_calls(("report_outcome", '{"status": "done", "summ'), model=MODEL)
    return OA.streamed(call)


def _malformed(home: Path, url: str) -> WorkerRun:
    return _run(home, url)


def _check_malformed(r: WorkerRun, exchanges: list[dict[str, Any]]) -> None:
    props, first, second, *_ = exchanges
    assert props["path"] == "/props"
    assert json.loads(props["response"])["chat_template_caps"]["supports_tools"] is True
    assert first["injected"] and not second["injected"]
    # The call went back well-formed, so the real server answered it (not its 500).
    (call,) = second["request"]["messages"][-2]["tool_calls"]
    assert isinstance(json.loads(call["function"]["arguments"]), dict)
    assert second["status"] == 200, second["response"][:300]
    assert "tools" in second["request"]
    assert r.result.status == "ok", r.result


# -- a runaway reply stopped at max_output_tokens ---------------------------------------------


def _runaway(home: Path, url: str) -> WorkerRun:
    # A cap far below any answer: the reply is cut whatever the model writes.
    system = "List one hundred things to do today, one a line, with a sentence on each."
    return _run(home, url, system=system, agent="max_output_tokens = 6")


def _check_runaway(r: WorkerRun, exchanges: list[dict[str, Any]]) -> None:
    (chat,) = _chats(exchanges)
    assert chat["request"]["max_tokens"] == 6
    assert _finish_reasons(chat) == ["length"]
    assert server_usage(chat)[1] == 6 == r.total("local_output")
    assert (r.result.status, r.result.outcome) == ("ok", "needs-attention")
    assert "cut at max_output_tokens (6 tokens" in r.result.summary


# -- the context-overflow 400 ----------------------------------------------------------------


def _overflow(home: Path, url: str) -> WorkerRun:
    # About 3,600 tokens of prompt for a server started with a 2,048-token context.
    return _run(home, url, system="Summarise the log that follows. " + "log line words " * 1200)


def _check_overflow(r: WorkerRun, exchanges: list[dict[str, Any]]) -> None:
    (chat,) = _chats(exchanges)
    assert chat["status"] == 400
    assert json.loads(chat["response"])["error"]["type"] == "exceed_context_size_error"
    assert r.result.status == "failed"
    assert "outgrew the model's context window" in (r.result.error or "")


# -- auto: the premium leg on llama-server's own /v1/messages, through the anthropic SDK -------


def _auto(home: Path, url: str) -> WorkerRun:
    agent = (
        f'local_provider = "llama"\nlocal_model = "{MODEL}"\npremium_model = "{MODEL}"\n'
        "max_output_tokens = 32"
    )
    env = worker_env(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-ant-local-llama-server")
    return _run(home, url, route="auto", agent=agent, env=env, pricing={MODEL: [1.0, 1.0]})


def _check_auto(r: WorkerRun, exchanges: list[dict[str, Any]]) -> None:
    (chat,) = _chats(exchanges)
    (message,) = [e for e in exchanges if e["path"] == "/v1/messages"]
    assert message["status"] == 200, message["response"][:300]
    # Up to 32 tokens, so under 40 words: low_confidence fires, the turn goes to the premium
    # leg, here llama-server's own Anthropic Messages endpoint, through the anthropic SDK.
    assert r.result.route == "local->premium" and r.result.escalated, r.result
    assert r.result.escalated_reason == "low_confidence"
    assert (r.total("local_input"), r.total("local_output")) == server_usage(chat)
    answer = json.loads(message["response"])
    usage = answer["usage"]
    counted = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    assert r.total("input") == sum(usage.get(k) or 0 for k in counted)
    assert r.total("output") == usage["output_tokens"]
    if answer["stop_reason"] == "max_tokens":  # the premium leg too stops at 32: not ok
        assert r.result.status == "failed" and "cut off at max_tokens (32 tokens" in (
            r.result.error or ""
        )
    else:
        assert r.result.status == "ok"


SCENARIOS = (
    Scenario("plain", False, _plain, _check_plain),
    Scenario("tools_refused", False, _tools_refused, _check_tools_refused),
    Scenario("malformed_recovered", True, _malformed, _check_malformed, _malformed_first),
    Scenario("runaway", False, _runaway, _check_runaway),
    Scenario("context_overflow", False, _overflow, _check_overflow),
    Scenario("auto_messages", False, _auto, _check_auto),
)
