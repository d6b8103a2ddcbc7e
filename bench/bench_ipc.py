"""Decoding the wire: msgspec's one pass over a line (`ipc.messages.from_line`) against the
way a line it refuses is read again to explain it, orjson then `from_dict` (msgspec.convert
behind checks of the type and the fields' names), on the same lines in the same run; and what
importing msgspec adds to `import ipc` (every worker and the daemon pay it; the thin client
does not import ipc).

Target: the one pass no slower than the explaining path per line (on an idle machine it is
about half; against the hand-written checks it replaced, about 11x faster). msgspec's part of
a fresh interpreter's `import ipc` is shown, without a target (both `-X importtime`
cumulatives of one run, median of 9; msgspec is charged the standard modules it is first to
import, enum and re among them, which ipc needs anyway).

    python -m bench ipc
"""

from __future__ import annotations

import statistics
import subprocess
import sys

import orjson

from bench.common import Row, median_seconds

TARGET_RATIO = 1.0


def _lines() -> list[bytes]:
    from ipc import Event, EventKind, Hello, Job, Result, RunStatus, Trigger, Usage, encode

    toml = '[routine]\nname = "day-brief"\n' + "# a routine file's comment line\n" * 60
    job = Job(
        run_id="r1",
        routine_name="day-brief",
        routine_path="/h/routines/day-brief.toml",
        routine_toml=toml,
        routine_origin="user",
        trigger=Trigger.SCHEDULE,
        slot="2026-12-04T06:00:00Z",
        started_at="2026-12-04T07:00:00+01:00",
        max_tokens=None,
        dollars_left=0.5,
        memory="m" * 500,
        vinos_home="/h",
        state_dir="/h/state/day-brief",
        scratch_dir="/h/state/day-brief/.scratch/r1",
        memory_path=None,
        ollama_url="http://127.0.0.1:11434",
        pricing={"claude-sonnet-4-6": [3.0, 15.0]},
        sandbox={"bwrap": "/usr/bin/bwrap", "never": ["~/.ssh"]},
    )
    return [
        encode(m)
        for m in (
            Hello(),
            job,
            Event(EventKind.TOOL_RESULT, "shell: ok", {"exit": 0, "out": "x" * 300}),
            Usage(input=1200, output=300, dollars=0.0081, model="claude-sonnet-4-6"),
            Result(status=RunStatus.OK, summary="done", tools_used=["shell"]),
        )
    ]


def _import_us() -> tuple[int, int]:
    """msgspec's and ipc's cumulative import times in one fresh `import ipc`, in us."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import ipc"],
        capture_output=True,
        text=True,
        check=True,
    )
    cumulative: dict[str, int] = {}
    for line in done.stderr.splitlines():
        fields = [f.strip() for f in line.removeprefix("import time:").split("|")]
        if len(fields) == 3 and fields[1].isdigit():
            cumulative[fields[2]] = int(fields[1])
    return cumulative["msgspec"], cumulative["ipc"]


def run(quick: bool) -> list[Row]:
    from ipc.messages import from_dict, from_line

    lines = [line.rstrip(b"\n") for line in _lines()]
    rounds = 200 if quick else 2000

    def one_pass() -> None:
        for _ in range(rounds):
            for line in lines:
                from_line(line)

    def old_path() -> None:
        for _ in range(rounds):
            for line in lines:
                from_dict(orjson.loads(line))

    per = rounds * len(lines)
    repeat = 3 if quick else 7
    old = median_seconds(old_path, repeat) / per * 1e6
    new = median_seconds(one_pass, repeat) / per * 1e6
    ratio = new / old
    samples = [_import_us() for _ in range(3 if quick else 9)]
    msgspec_ms = statistics.median(m for m, _ in samples) / 1000
    ipc_ms = statistics.median(i for _, i in samples) / 1000
    share = statistics.median(m / i for m, i in samples)
    return [
        Row(
            "ipc: decode one line (msgspec, one pass)",
            new,
            "us",
            baseline=f"orjson + from_dict: {old:.1f} us",
            ratio=ratio,
            target=f"<= {TARGET_RATIO}x",
            met=ratio <= TARGET_RATIO,
        ),
        Row(
            "ipc: msgspec's part of `import ipc`",
            msgspec_ms,
            "ms",
            baseline=f"import ipc: {ipc_ms:.1f} ms",
            ratio=share,
        ),
    ]
