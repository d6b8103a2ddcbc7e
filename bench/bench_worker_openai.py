"""Worker start-up on an OpenAI-compatible route: from spawning `python -m worker` to its
first request at a fake Chat Completions server (a config.toml [providers.NAME] with
`local = true`, as LM Studio or llama.cpp), against a bare `python -c` that imports httpx2
and sends one request to the same fake, timed the same way, in the same run. Target: at most
1.3x, the figure the Ollama route is held to (bench_worker.py, whose method this follows).

    python -m bench worker_openai
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_worker import REPO, TARGET, _job
from bench.common import Row
from ipc import Hello, encode
from tests.fakes import FakeOpenAI
from tests.fakes import fake_openai as OA

FLOOR = (
    "import sys, httpx2; "
    "httpx2.post(sys.argv[1] + '/chat/completions', "
    "json={'model': 'qwen2.5-7b-instruct', 'messages': [], 'stream': True})"
)
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
    job = dataclasses.replace(
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


def _bare_httpx2(fake: FakeOpenAI, env: dict[str, str]) -> float:
    seen = len(fake.chats)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", FLOOR, fake.base_url], check=True, cwd=REPO, env=env)
    chats = fake.chats
    if len(chats) != seen + 1:
        raise RuntimeError("the bare httpx2 request did not arrive")
    return chats[-1].at - t0


def run(quick: bool) -> list[Row]:
    repeat = 5 if quick else 20
    reply = OA.text("Brief. " * 50)
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI(default=reply) as fake:
        home = Path(tmp) / "vinos"
        (home / "routines").mkdir(parents=True)
        cache = Path(tmp) / "pycache"
        env = {**os.environ, "VINOS_HOME": str(home), "PYTHONPYCACHEPREFIX": str(cache)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("ANTHROPIC_API_KEY", None)
        _worker_to_first_request(home, fake, 0, env)  # warm the page cache and bytecode
        _bare_httpx2(fake, env)
        worker, base = [], []
        for i in range(1, repeat + 1):  # interleaved, so a noisy moment hits both alike
            worker.append(_worker_to_first_request(home, fake, i, env))
            base.append(_bare_httpx2(fake, env))
    w_ms, b_ms = statistics.median(worker) * 1000, statistics.median(base) * 1000
    ratio = w_ms / b_ms
    return [
        Row(
            name=f"worker start to first OpenAI-compatible request (median of {repeat})",
            value=w_ms,
            unit="ms",
            baseline=f"python -c 'import httpx2; httpx2.post(...)': {b_ms:.1f} ms",
            ratio=ratio,
            target=f"<= {TARGET:g}x",
            met=ratio <= TARGET,
        )
    ]
