"""`vinos-routine run NAME --dry-run`: the resolved job printed, nothing run.

The CLI runs under strace (-f: it and every process it starts), which records each connect()
and execve(): a dry run opens no network connection and starts no sandbox, tool or gate;
`--gate` runs the gate in its sandbox and nothing else. The fake Anthropic server (a real HTTP
server the worker would reach) sees no request either.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from routines.spec.paths import paths
from tests.fakes import FakeAnthropic

REPO = Path(__file__).resolve().parents[2]

ROUTINE = """[routine]
enabled = true

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[trigger]
fire = true

[gate]
run = "touch {marker}; echo 'two new files'"

[agent]
route = "anthropic"
system = "You tidy the downloads folder."
tools = ["shell:touch {tool_marker}"]
home = ["~/dl"]

[budget]
max_dollars_per_day = 1.0
"""


@pytest.fixture
def claude() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def dry(claude: FakeAnthropic, trace: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ANTHROPIC_BASE_URL": claude.url,
           "ANTHROPIC_API_KEY": "sk-ant-test-0123456789"}  # fmt: skip
    argv = [sys.executable, "-m", "supervisor", "run", "tidy", "--dry-run", *extra]
    strace = shutil.which("strace")
    assert strace is not None, "strace is part of the test image (the dry-run's oracle)"
    traced = [strace, "-f", "-qq", "-e", "trace=connect,execve", "-o", str(trace), *argv]
    return subprocess.run(traced, env=env, capture_output=True, text=True, check=False)


def write_tidy() -> tuple[Path, Path]:
    """The routine under test, written; the files its gate and its tool would touch."""
    p = paths()
    (Path.home() / "dl").mkdir(exist_ok=True)
    ws = p.workspace("tidy")
    marker, tool_marker = ws / "gate-ran", ws / "tool-ran"
    p.routines_dir.mkdir(parents=True, exist_ok=True)
    (p.routines_dir / "tidy.toml").write_text(
        ROUTINE.format(marker=marker, tool_marker=tool_marker)
    )
    return marker, tool_marker


def calls(trace: Path) -> tuple[list[str], list[str]]:
    lines = trace.read_text().splitlines()
    connects = [ln for ln in lines if "connect(" in ln and ("AF_INET" in ln or "AF_INET6" in ln)]
    execs = [ln.split('execve("', 1)[1].split('"', 1)[0] for ln in lines if 'execve("' in ln]
    return connects, execs


def test_a_dry_run_prints_the_job_and_runs_nothing(
    not_root: None, claude: FakeAnthropic, tmp_path: Path
) -> None:
    marker, tool_marker = write_tidy()

    done = dry(claude, tmp_path / "trace", "--json")
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    assert job["system_prompt"].startswith("You tidy the downloads folder.\n\n---\nYou are running")
    assert [t["name"] for t in job["tools"]] == ["run_shell", "report_outcome"]
    gate = f"touch {marker}; echo 'two new files'"
    assert set(job["sandbox_argv"]) == {f"touch {tool_marker}", gate}
    assert all(argv.split()[0].endswith("bwrap") for argv in job["sandbox_argv"].values())
    assert len(job["next_fires"]) == 3 and job["next_fires"][0].endswith("06:00:00+00:00")
    assert job["triggers"] == {"after": [], "on": [], "watch": [], "fire": True}
    assert job["route"]["label"] == "anthropic"
    est = job["estimate"]
    assert est["paid_first"] and 0 < est["low"] < est["high"]
    assert {"label": "gate", "text": f"touch {marker}; echo 'two new files' (in its sandbox, "
            "before any model call)"} in job["card"]  # fmt: skip
    assert "gate_result" not in job

    connects, execs = calls(tmp_path / "trace")
    assert connects == []
    assert sum("python" in Path(e).name for e in execs) >= 2  # the trace follows the children
    assert not any(Path(e).name in ("bwrap", "bash", "sh", "touch") for e in execs), execs
    assert claude.requests == []
    assert not marker.exists() and not tool_marker.exists()


def test_dry_run_gate_runs_the_gate_only(
    not_root: None, claude: FakeAnthropic, tmp_path: Path
) -> None:
    marker, tool_marker = write_tidy()

    done = dry(claude, tmp_path / "trace", "--gate", "--json")
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    assert job["gate_result"] == {"exit_code": 0, "verdict": "go", "text": "two new files\n"}
    assert marker.exists() and not tool_marker.exists()
    connects, execs = calls(tmp_path / "trace")
    assert connects == [] and claude.requests == []
    assert any(Path(e).name == "bwrap" for e in execs)  # the gate, in its sandbox


def test_the_text_dry_run_says_the_same(
    not_root: None, claude: FakeAnthropic, tmp_path: Path
) -> None:
    write_tidy()
    done = dry(claude, tmp_path / "trace")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "dry run of tidy (agent): nothing is run"
    assert lines[1].startswith("next fires: ") and "fire: vinos-routine fire tidy" in lines
    assert any(ln.startswith("route: anthropic (local ollama:") for ln in lines)
    assert any(ln.startswith("estimated cost: $0.0") for ln in lines)
    assert "  You tidy the downloads folder." in lines
    assert "tools: run_shell, report_outcome" in lines
    assert sum(ln.startswith("sandbox argv for ") for ln in lines) == 2
