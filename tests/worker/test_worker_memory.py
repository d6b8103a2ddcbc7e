"""Memory end to end: session, persistent, shared; the 4 KB cap and trimming; the summary
from one local call; Ollama unreachable is a WARN on an ok run; concurrent appends. At the end,
trimming, entries and the user turn (worker/memory.py, worker/prompts.py) without a process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ipc import Hello, encode
from tests.fakes import FakeAnthropic, FakeOllama
from tests.fakes import anthropic_replies as A
from tests.fakes import ollama_replies as O
from tests.worker.worker_harness import REPO, make_job, routine_toml, run_worker, spawn, worker_env
from worker import memory, prompts

LONG = "Three meetings today; the release is blocked on review. " * 8
SUMMARY = "The release was blocked on review. Three meetings were on the calendar."


def test_session_memory_keeps_nothing(home: Path, ollama: FakeOllama) -> None:
    ollama.add(O.text(LONG))
    job = make_job(home, routine_toml(memory="session"), ollama_url=ollama.url, memory="old notes")
    r = run_worker(job)
    assert r.result.status == "ok"
    assert len(ollama.chats) == 1  # no summary call
    user = ollama.chats[0].body["messages"][1]["content"]
    assert "old notes" not in user and memory.PREFIX not in user
    assert not (home / "routines" / "state" / "day-brief" / "memory.md").exists()


def test_persistent_memory_is_prepended_and_a_summary_appended(
    home: Path, ollama: FakeOllama
) -> None:
    path = home / "routines" / "state" / "day-brief" / "memory.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("## 2026-07-24 06:00 · day-brief\nYesterday was quiet.\n")
    ollama.add(O.text(LONG), O.text(SUMMARY, prompt_eval_count=150, eval_count=30))
    job = make_job(
        home,
        routine_toml(memory="persistent"),
        ollama_url=ollama.url,
        memory=path.read_text(),
        memory_path=path,
    )
    r = run_worker(job)
    assert r.result.status == "ok"
    user = ollama.chats[0].body["messages"][1]["content"]
    assert user.startswith("Prior context from earlier runs:\n\n## 2026-07-24 06:00 · day-brief")
    assert user.index("Yesterday was quiet.") < user.index("It is Saturday")
    summary_call = ollama.chats[1].body
    assert "tools" not in summary_call and summary_call["options"]["num_predict"] == 200
    assert "Three meetings today" in summary_call["messages"][1]["content"]
    assert path.read_text() == (
        "## 2026-07-24 06:00 · day-brief\nYesterday was quiet.\n\n"
        f"## 2026-07-25 06:00 · day-brief\n{SUMMARY}\n"
    )
    assert r.usages[-1].local_input == 150  # the summary call is accounted, at $0
    assert r.total("dollars") == 0


def test_shared_memory_creates_the_shared_journal(home: Path, ollama: FakeOllama) -> None:
    path = home / "routines" / "state" / "shared" / "memory.md"
    ollama.add(O.text(LONG), O.text(SUMMARY))
    job = make_job(
        home, routine_toml(memory="shared"), ollama_url=ollama.url, name="evening", memory_path=path
    )
    r = run_worker(job)
    assert r.result.status == "ok"
    assert path.read_text() == f"## 2026-07-25 06:00 · evening\n{SUMMARY}\n"


def test_appending_past_4_kb_trims_the_oldest_to_a_line_boundary(
    home: Path, ollama: FakeOllama
) -> None:
    path = home / "routines" / "state" / "day-brief" / "memory.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    old = "".join(
        f"## 2026-06-{i:02d} 06:00 · day-brief\n{'x' * 150} entry {i}\n\n" for i in range(1, 22)
    )
    path.write_text(old)
    assert 3900 < len(old) <= 4096
    ollama.add(O.text(LONG), O.text(SUMMARY))
    job = make_job(
        home,
        routine_toml(memory="persistent"),
        ollama_url=ollama.url,
        memory=old,
        memory_path=path,
    )
    assert run_worker(job).result.status == "ok"
    text = path.read_text()
    assert len(text) <= memory.CAP
    assert text.endswith(f"## 2026-07-25 06:00 · day-brief\n{SUMMARY}\n")
    assert "entry 1\n" not in text and "entry 21\n" in text
    kept = text[: text.index("## 2026-07-25")]
    assert old.endswith(kept) and len(kept) < len(old)
    assert old[len(old) - len(kept) - 1] == "\n"  # the cut fell on a line boundary


def test_a_huge_hand_edited_memory_is_capped_in_the_prompt(home: Path, ollama: FakeOllama) -> None:
    big = "".join(f"line {i} " + "y" * 90 + "\n" for i in range(200))  # ~20 KB
    ollama.add(O.text(LONG), O.text(SUMMARY))
    path = home / "m.md"
    job = make_job(
        home, routine_toml(memory="persistent"), ollama_url=ollama.url, memory=big, memory_path=path
    )
    assert run_worker(job).result.status == "ok"
    user = ollama.chats[0].body["messages"][1]["content"]
    remembered = user.split("\n\n", 1)[1].split("\n\n---\n")[0]
    assert len(remembered) <= memory.CAP and remembered.startswith("line ")
    assert "line 199 " in remembered and "line 0 " not in remembered


def test_ollama_unreachable_for_the_summary_is_a_warning_and_the_run_is_ok(
    home: Path, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    path = home / "routines" / "state" / "day-brief" / "memory.md"
    claude.add(A.text(LONG))
    job = make_job(
        home,
        routine_toml(route="anthropic", memory="persistent"),
        ollama_url="http://127.0.0.1:9",
        memory_path=path,
    )
    r = run_worker(job, env=env)
    assert r.result.status == "ok" and r.result.output_file
    warns = [e.text for e in r.events_of("warn")]
    assert any(w.startswith("memory not updated: cannot reach Ollama") for w in warns), warns
    assert not path.exists()


def test_two_runs_appending_to_shared_memory_at_once_keep_both(home: Path) -> None:
    path = home / "routines" / "state" / "shared" / "memory.md"
    with FakeOllama() as one, FakeOllama() as two:
        one.add(O.text(LONG), O.text("Summary from the first routine."))
        two.add(O.text(LONG), O.text("Summary from the second routine."))
        procs = []
        for name, fake in (("alpha", one), ("beta", two)):
            job = make_job(
                home,
                routine_toml(memory="shared"),
                name=name,
                ollama_url=fake.url,
                memory_path=path,
            )
            proc = spawn(worker_env())
            assert proc.stdin is not None
            proc.stdin.write(encode(Hello()) + encode(job))
            proc.stdin.flush()
            procs.append(proc)
        for proc in procs:
            out, err = proc.communicate(b"", timeout=60)
            assert proc.returncode == 0 and b'"status":"ok"' in out, err
    text = path.read_text()
    assert "· alpha\nSummary from the first routine.\n" in text
    assert "· beta\nSummary from the second routine.\n" in text


STRESS = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from worker import memory
    path, tag = Path(sys.argv[1]), sys.argv[2]
    for i in range(40):
        memory.append(path, f"## {tag} {i}\\nbody {tag} {i}\\n", cap=10**6)
    """
)


def test_concurrent_appends_from_many_processes_never_lose_or_tear_an_entry(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared" / "memory.md"
    procs = [
        subprocess.Popen([sys.executable, "-c", STRESS, str(path), f"p{n}"], cwd=REPO)
        for n in range(4)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    text = path.read_text()
    for n in range(4):
        for i in range(40):
            assert f"## p{n} {i}\nbody p{n} {i}\n" in text
    assert text.count("## ") == 160
    leftovers = [p for p in os.listdir(path.parent) if p.startswith(".memory.md.")]
    assert leftovers == []


def test_trim_is_linear_and_the_append_reads_a_capped_tail(tmp_path: Path) -> None:
    """A hand-grown 20 MB journal: trimming walks it once (the old loop sliced it 40,000
    times) and the append reads only its tail."""
    from worker import memory

    big = ("x" * 99 + "\n") * 200_000
    kept = memory.trim(big)
    assert len(kept) <= memory.CAP and kept.endswith("x\n") and kept.startswith("x")
    path = tmp_path / "memory.md"
    path.write_text("OLDEST\n" + big)
    memory.append(path, memory.entry("r", datetime(2026, 7, 25, 6, 0), "newest"))
    text = path.read_text()
    assert len(text) <= memory.CAP and text.endswith("newest\n") and "OLDEST" not in text


@given(st.lists(st.text(alphabet="ab \n", max_size=300), max_size=40))
def test_trim_fits_the_cap_and_keeps_the_newest_text(chunks: list[str]) -> None:
    text = "".join(chunks)
    out = memory.trim(text, cap=1000, step=100)
    assert len(out) <= 1000
    assert text.endswith(out)
    if len(text) <= 1000:
        assert out == text


def test_trim_cuts_about_500_characters_to_the_next_newline() -> None:
    lines = [f"{i:04d} " + "z" * 94 + "\n" for i in range(41)]  # 41 lines of 100 chars
    out = memory.trim("".join(lines))
    assert out == "".join(lines[6:])  # ~500 chars, realigned: lines 0-5 go (the 6th ends at 600)
    assert memory.trim("a" * 5000, cap=4096) == "a" * 4000  # no newline at all: 500 at a time


def test_for_prompt_keeps_the_newest_whole_lines() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    out = memory.for_prompt(text, cap=100)
    assert len(out) <= 100 and out.endswith("line 999") and out.startswith("line ")
    assert memory.for_prompt("\nshort\n") == "short"


def test_entry_and_append(tmp_path: Path) -> None:
    started = datetime(2026, 7, 25, 6, 0, tzinfo=timezone(timedelta(hours=-4)))
    e = memory.entry("day-brief", started, "One.\n  Two.")
    assert e == "## 2026-07-25 06:00 · day-brief\nOne. Two.\n"
    path = tmp_path / "deep" / "memory.md"
    memory.append(path, e)
    memory.append(path, e)
    assert path.read_text() == e + "\n" + e
    assert (path.stat().st_mode & 0o777) == 0o600


def test_user_turn_puts_memory_first() -> None:
    assert prompts.user_turn("Do it.", "") == "Do it."
    assert (
        prompts.user_turn("Do it.", "old\n")
        == "Prior context from earlier runs:\n\nold\n\n---\nDo it."
    )
