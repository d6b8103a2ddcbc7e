"""The local route against a real llama-server and a real small model (`make test-models`;
skipped elsewhere: it needs the server built from source, scripts/llama_server.py).

Two servers run, both with `--jinja`: one with a template that shows tools
(tests/fixtures/llama/chatml-tools.jinja), one with SmolLM2's own, which cannot. Each
scenario of llama_scenarios.py runs the real worker through a recording proxy; with
VINOS_RECORD_FIXTURES=DIR the exchanges are written there as the fixtures `make test`
replays (tests/worker/test_worker_llama_replay.py), naming the server build. One more runs
the local route as a person does: `vinos-routine run NAME` with a real daemon up.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from routines.spec.paths import paths
from tests.fakes.recorded import FIXTURES, Recorder, save
from tests.supervisor.daemonkit import DaemonProcess, rows, write_routine
from tests.worker.llama_scenarios import MODEL, SCENARIOS, Scenario, server_usage

pytestmark = pytest.mark.skipif(
    os.environ.get("VINOS_TEST_MODELS") != "1",
    reason="a real llama-server: `make test-models` runs these",
)

REPO = Path(__file__).resolve().parents[2]
CTX = 2048


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"llama-server exited {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"llama-server did not become healthy:\n{log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def built() -> Any:
    sys.path.insert(0, str(REPO / "scripts"))  # a script, not a package: loaded by name
    return importlib.import_module("llama_server").ensure()


@pytest.fixture(scope="module")
def servers(built: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[bool, str]]:
    """{tools_template: url} of the two servers, each with its build info."""
    procs: list[subprocess.Popen[bytes]] = []
    urls: dict[bool, str] = {}
    logs = tmp_path_factory.mktemp("llama")
    try:
        for tools in (False, True):
            port = _free_port()
            argv = [
                str(built.server), "-m", str(built.model), "--host", "127.0.0.1",
                "--port", str(port), "-c", str(CTX), "-np", "1", "-t", "2", "--jinja",
                "--no-webui", "--no-warmup",
            ]  # fmt: skip
            if tools:
                argv += ["--chat-template-file", str(FIXTURES / "chatml-tools.jinja")]
            log = logs / f"server-{tools}.log"
            with log.open("wb") as out:
                procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT))
            urls[tools] = f"http://127.0.0.1:{port}"
            _wait_healthy(urls[tools], procs[-1], log)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


def _server_info(url: str, built: Any, tools: bool) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/props", timeout=10) as resp:
        props = json.loads(resp.read())
    return {
        "package": built.build,
        "build_info": props.get("build_info"),
        "model": built.model.name,
        "flags": ["--jinja", "-c", str(CTX)]
        + (["--chat-template-file", "chatml-tools.jinja"] if tools else []),
    }


def _record(name: str, exchanges: list[dict[str, Any]], info: dict[str, Any]) -> None:
    out = os.environ.get("VINOS_RECORD_FIXTURES")
    if out:
        save(name, exchanges, info, Path(out))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_live(home: Path, servers: dict[bool, str], built: Any, scenario: Scenario) -> None:
    upstream = servers[scenario.tools_template]
    with Recorder(upstream, inject=scenario.inject) as proxy:
        r = scenario.run(home, proxy.url)
        exchanges = list(proxy.exchanges)
    _record(scenario.name, exchanges, _server_info(upstream, built, scenario.tools_template))
    scenario.check(r, exchanges)


def test_live_refuses_tool_arguments_that_are_not_json(
    servers: dict[bool, str], built: Any
) -> None:
    """What FakeOpenAI imitates: a request whose assistant tool call carries arguments that
    are not JSON is answered 500 "Failed to parse tool call arguments as JSON"."""
    body = {
        "model": "smollm2",
        "max_tokens": 8,
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "report_outcome", "arguments": '{"status": "do'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "{}"},
        ],
    }
    with Recorder(servers[True]) as proxy:
        req = urllib.request.Request(
            proxy.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=60)
        exchanges = list(proxy.exchanges)
    assert info.value.code == 500
    (ex,) = exchanges
    assert "Failed to parse tool call arguments as JSON" in ex["response"]
    _record("arguments_not_json", exchanges, _server_info(servers[True], built, True))


NOTE = f"""[routine]
description = "a status note from llama-server"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "llama"
model = "{MODEL}"
system = "You write a two-line status note."
max_output_tokens = 48

[budget]
max_dollars_per_day = 0.5
"""


def test_live_through_the_cli_and_the_daemon(
    home: Path, servers: dict[bool, str], tmp_path: Path, not_root: None
) -> None:
    """`vinos-routine run NAME` → the daemon → a worker → llama-server (SmolLM2's template; the
    routine has no tools of its own): the ledger's local tokens are the server's own usage
    chunk, and the run costs $0 on a local provider."""
    with Recorder(servers[False]) as proxy:
        config = paths().config_file
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(
            f'[providers.llama]\nkind = "openai"\nbase_url = "{proxy.url}/v1"\nlocal = true\n'
        )
        write_routine("status-note", NOTE)
        d = DaemonProcess(tmp_path).start()
        try:
            done = d.cli("run", "status-note", timeout=600)
        finally:
            assert d.stop() == 0, d.log()
        exchanges = list(proxy.exchanges)
    assert done.returncode == 0, done.stdout + done.stderr + d.log()
    (chat,) = [e for e in exchanges if e["path"] == "/v1/chat/completions"]
    assert chat["status"] == 200
    [row] = rows("status-note")
    assert (row.status, row.route, row.model) == ("ok", "llama", MODEL)
    assert (row.local_input_tokens, row.local_output_tokens) == server_usage(chat)
    assert row.dollars == 0
