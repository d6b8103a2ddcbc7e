"""The worker on the Anthropic route: start → its first request at a fake Anthropic server
(tests/fakes/fake_anthropic.py), and that request → the process gone (the reply, the Result,
and the exit: `os._exit`, no interpreter teardown), against a bare `python -c` that imports
anthropic and sends one request to the same fake, timed the same way, in the same run.

The worker is started both ways the daemon starts one: forked by the forkserver (its SDK
already imported) and spawned as `python -P -m worker`, interleaved with the floor and with
Claude Code's CLI, `claude -p --bare "hi"`, aimed at the same fake with ANTHROPIC_BASE_URL
(bench/workerstart.py). The CLI is installed by npm into a temp prefix once per bench run, at
the version bench/claudecode.py pins, with its nonessential traffic off (it makes one request,
to the fake). The forked worker's start is held to at most 1.2x the CLI's, and last request →
exit to 100 ms. Where npm or the install fails, the CLI's rows say why it was not measured
and the SDK floor stays the only baseline.

    python -m bench worker_anthropic
"""

from __future__ import annotations

import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench import claudecode
from bench.common import Row
from bench.workerstart import Peer, Starts, bench_job, measure, start_rows
from ipc import Job
from tests.fakes import FakeAnthropic
from tests.fakes import fake_anthropic as A

TARGET_EXIT_MS = 100.0
TARGET_VS_CLAUDE = 1.2  # the forked worker's start, at most this times `claude -p --bare`'s
CLAUDE = "claude -p --bare"
FLOOR = (
    "import sys, anthropic\n"
    "anthropic.Anthropic(base_url=sys.argv[1], api_key='sk-bench').messages.create(\n"
    "    model='claude-sonnet-4-5', max_tokens=64, messages=[{'role': 'user', 'content': 'hi'}])\n"
)
TOML = """
[routine]
description = "bench"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "anthropic"
system = "You write the user's morning brief."
"""


def _claude_rows(got: Starts, floor_txt: str, why: str | None) -> list[Row]:
    """The CLI's start → first request and last request → exit, against the SDK floor."""
    names = [
        f"{CLAUDE} ({claudecode.VERSION}) start → first request (median of {got.repeat})",
        f"{CLAUDE} ({claudecode.VERSION}) last request → exit (median of {got.repeat})",
    ]
    if why is not None:
        return [Row(name, math.nan, "ms", baseline=f"not measured: {why}") for name in names]
    rows = []
    for which, name in enumerate(names):
        ours, floor = got.ms(CLAUDE, which), got.ms("floor", which)
        rows.append(
            Row(name, ours, "ms", baseline=f"{floor_txt}: {floor:.0f} ms", ratio=ours / floor)
        )
    return rows


def _held_to_claude(forked: Row, got: Starts, why: str | None) -> Row:
    """The forked start row, its ratio and target now against the CLI's start."""
    target = f"<= {TARGET_VS_CLAUDE:g}x {CLAUDE}"
    if why is not None:
        return replace(forked, baseline=f"{forked.baseline}; {CLAUDE} not measured", target=target)
    theirs = got.ms(CLAUDE)
    ratio = forked.value / theirs
    return replace(
        forked,
        baseline=f"{CLAUDE}: {theirs:.0f} ms; {forked.baseline}",
        ratio=ratio,
        target=target,
        met=ratio <= TARGET_VS_CLAUDE,
    )


def run(quick: bool) -> list[Row]:
    repeat = 4 if quick else 12
    claude = claudecode.install()
    why = claude if isinstance(claude, str) else None
    with (
        FakeAnthropic(default=A.text("Brief. " * 50)) as fake,
        tempfile.TemporaryDirectory() as claude_home,
    ):

        def job(home: Path, i: int) -> Job:
            return bench_job(home, fake.url, i, TOML)

        keys = {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "sk-bench"}
        floor = [sys.executable, "-c", FLOOR, fake.url]
        peers = (
            ()
            if isinstance(claude, str)
            else (
                Peer(
                    CLAUDE,
                    (str(claude), "-p", "--bare", "hi"),
                    {**claudecode.ENV, "HOME": claude_home},
                ),
            )
        )
        got = measure(repeat, job, floor, lambda: fake.messages, keys, peers)
    we, be, fe = got.ms("spawn", 1), got.ms("floor", 1), got.ms("fork", 1)
    floor_txt = "python -c 'import anthropic; …create(…)'"
    forked, spawned = start_rows("Anthropic", got, floor_txt, None)
    claude_exit = "" if why else f"; {CLAUDE} {got.ms(CLAUDE, 1):.0f} ms"
    return [
        _held_to_claude(forked, got, why),
        spawned,
        *_claude_rows(got, floor_txt, why),
        Row(
            f"worker last request → exit, Anthropic route (median of {repeat})",
            we,
            "ms",
            baseline=f"{floor_txt}: {be:.0f} ms; forked {fe:.0f} ms{claude_exit}",
            ratio=we / be if be > 0 else None,
            target=f"<= {TARGET_EXIT_MS:.0f} ms",
            met=we <= TARGET_EXIT_MS,
        ),
    ]
