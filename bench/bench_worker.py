"""Worker start-up on the Ollama route: from starting the worker (forked by the forkserver, and
spawned as `python -P -m worker`: bench/workerstart.py) to its first request at a fake Ollama
server, against the floor of any Python client on the same HTTP stack: a bare `python -c` that
imports httpx2 and sends one request to the same fake, timed the same way, in the same run.
Target: at most 1.3x, for the forked worker (what the daemon starts whenever its forkserver is
up); the spawned one is reported beside it as the fallback.

The job is a local-only routine (route = "ollama", no tools, no memory): what a scheduled
local run pays before its first model call.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.common import Row
from bench.workerstart import bench_job, measure, start_rows
from ipc import Job
from tests.fakes import FakeOllama
from tests.fakes import fake_ollama as O

TARGET = 1.3
FLOOR = (
    "import sys, httpx2; "
    "httpx2.post(sys.argv[1] + '/api/chat', json={'model': 'llama3.2:3b', 'messages': []})"
)
TOML = """
[routine]
description = "bench"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "ollama"
system = "You write the user's morning brief."
"""


def run(quick: bool) -> list[Row]:
    repeat = 5 if quick else 20
    with FakeOllama(default=O.text("Brief. " * 50)) as fake:

        def job(home: Path, i: int) -> Job:
            return bench_job(home, fake.url, i, TOML)

        got = measure(repeat, job, [sys.executable, "-c", FLOOR, fake.url], lambda: fake.chats)
    return start_rows("Ollama", got, "python -c 'import httpx2; httpx2.post(...)'", TARGET)
