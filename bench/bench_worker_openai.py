"""Worker start-up on an OpenAI-compatible route: from starting the worker (forked by the
forkserver, and spawned: bench/workerstart.py) to its first request at a fake Chat Completions
server (a config.toml [providers.NAME] with `local = true`, as LM Studio or llama.cpp), against
a bare `python -c` that imports the openai SDK (the route's client library, as the Anthropic
bench's floor is the anthropic SDK) and sends one streamed request to the same fake, timed the
same way, in the same run. Target: at most 1.3x for the forked worker, the figure the Ollama route
is held to (bench_worker.py, whose method this follows); the spawned one is the fallback.

    python -m bench worker_openai
"""

from __future__ import annotations

import sys
from pathlib import Path

from msgspec.structs import replace

from bench.bench_worker import TARGET
from bench.common import Row
from bench.workerstart import bench_job, measure, start_rows
from ipc import Job
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


def run(quick: bool) -> list[Row]:
    repeat = 5 if quick else 20
    with FakeOpenAI(default=OA.text("Brief. " * 50)) as fake:
        provider = {
            "kind": "openai",
            "base_url": fake.base_url,
            "local": True,
            "key_file": None,
            "prices": {},
        }

        def job(home: Path, i: int) -> Job:
            job = bench_job(home, "http://127.0.0.1:9", i, TOML)
            return replace(job, providers={"lmstudio": provider})

        floor = [sys.executable, "-c", FLOOR, fake.base_url]
        got = measure(repeat, job, floor, lambda: fake.chats)
    return start_rows("OpenAI-compatible", got, FLOOR_LABEL, TARGET)
