"""Worker start-up on an OpenAI-compatible route: from spawning `python -m worker` to its
first request at a fake Chat Completions server (a config.toml [providers.NAME] with
`local = true`, as LM Studio or llama.cpp), against a bare `python -c` that imports the
openai SDK (the route's client library) and sends one streamed request to the same fake,
timed the same way, in the same run. Target: at most
1.3x, the figure the Ollama route is held to (bench_worker.py, whose method this follows).

    python -m bench worker_openai
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import msgspec

from bench.bench_worker import REPO, _job, start_against_floor
from bench.common import Row
from ipc import Hello, encode
from tests.fakes import FakeOpenAI
from tests.fakes import fake_openai as OA

FLOOR = (
    "import sys, openai; "
    "list(openai.OpenAI(base_url=sys.argv[1], api_key='sk-bench', max_retries=0)"
    ".chat.completions.create(model='qwen2.5-7b-instruct', messages=[], stream=True))"
)
FLOOR_LABEL = "python -c 'import openai; ….create(stream=True)'"
TOML = """
[routine]
description = "bench"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "lmstudio"
model = "qwen2.5-7b-instruct"
system = "You write the user's morning brief."
"""


def _worker_to_first_request(home: Path, fake: FakeOpenAI, i: int, env: dict[str, str]) -> float:
    provider = {
        "kind": "openai",
        "base_url": fake.base_url,
        "local": True,
        "key_file": None,
        "prices": {},
    }
    job = msgspec.structs.replace(
        _job(home, "http://127.0.0.1:9", i), routine_toml=TOML, providers={"lmstudio": provider}
    )
    data = encode(Hello()) + encode(job)
    seen = len(fake.chats)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env=env,
    )
    out, _ = proc.communicate(data, timeout=60)
    chats = fake.chats
    if len(chats) != seen + 1 or proc.returncode != 0 or b'"status":"ok"' not in out:
        raise RuntimeError(f"worker run {i} did not make exactly one request and succeed")
    return chats[-1].at - t0


def _bare_sdk(fake: FakeOpenAI, env: dict[str, str]) -> float:
    seen = len(fake.chats)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", FLOOR, fake.base_url], check=True, cwd=REPO, env=env)
    chats = fake.chats
    if len(chats) != seen + 1:
        raise RuntimeError("the bare SDK request did not arrive")
    return chats[-1].at - t0


def run(quick: bool) -> list[Row]:
    repeat = 5 if quick else 20
    with FakeOpenAI(default=OA.text("Brief. " * 50)) as fake:
        row = start_against_floor(
            "OpenAI-compatible",
            repeat,
            lambda home, i, env: _worker_to_first_request(home, fake, i, env),
            lambda env: _bare_sdk(fake, env),
            floor=FLOOR_LABEL,
        )
    return [row]
