"""The worker as a process: its pipe protocol, the protected stdout, exit codes, dying with
its parent, its title, no `anthropic` on the Ollama route; outputs, webhooks and command
routines."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from msgspec.structs import replace

from ipc import Hello, LineReader, Message, Result, encode
from routines.runs import RunStatus
from tests.fakes import FakeOllama, FakeServer, Reply
from tests.fakes import ollama_replies as O
from tests.worker.worker_harness import (
    REPO,
    WorkerRun,
    command_toml,
    make_job,
    routine_toml,
    run_worker,
    spawn,
    worker_env,
)

LONG = "Here is the brief for today, with every detail that matters to you. " * 6

# Runs `python -m worker` in-process so the test can look at it at exit (the worker leaves
# through os._exit, worker.main.leave): what is imported, and what a stray print or write to
# fd 1 does after the run.
PROBE = textwrap.dedent(
    """
    import atexit, os, runpy, sys
    real_exit = os._exit
    def at_exit(code):
        print("stray print after the run", flush=True)
        os.write(1, b"stray write to fd 1\\n")
        sys.stderr.write("modules: anthropic=%s httpx=%s\\n" % (
            "anthropic" in sys.modules, "httpx" in sys.modules))
        sys.stderr.flush()
        real_exit(code)
    os._exit = at_exit
    atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
    sys.argv = ["worker"]
    runpy.run_module("worker", run_name="__main__", alter_sys=True)
    """
)


def _probe(job_bytes: bytes) -> tuple[int, bytes, str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        input=job_bytes,
        capture_output=True,
        check=False,
        cwd=REPO,
        env=worker_env(),
        timeout=60,
    )
    return proc.returncode, proc.stdout, proc.stderr.decode()


def _messages(out: bytes) -> list[Message]:
    reader = LineReader(io.BytesIO(out))
    msgs: list[Message] = []
    while (m := reader.read()) is not None:
        msgs.append(m)
    return msgs


def test_stdout_carries_only_messages_and_the_ollama_route_never_imports_anthropic(
    home: Path, ollama: FakeOllama
) -> None:
    ollama.add(O.text(LONG))
    job = make_job(home, routine_toml(route="ollama"), ollama_url=ollama.url)
    code, out, err = _probe(encode(Hello()) + encode(job))
    assert code == 0, err
    msgs = _messages(out)  # every line parses: nothing stray reached the pipe
    assert msgs[0] == Hello() and isinstance(msgs[-1], Result) and msgs[-1].status == "ok"
    assert "stray print after the run" in err and "stray write to fd 1" in err
    assert "modules: anthropic=False httpx=False" in err
    # It left through os._exit, after flushing: no interpreter teardown, no atexit hook.
    assert "atexit ran" not in err


def test_the_auto_route_loads_anthropic_only_when_it_escalates(
    home: Path, ollama: FakeOllama
) -> None:
    ollama.add(O.text(LONG))
    job = make_job(home, routine_toml(route="auto"), ollama_url=ollama.url)
    code, _, err = _probe(encode(Hello()) + encode(job))
    assert code == 0 and "modules: anthropic=False" in err


@pytest.mark.parametrize(
    ("stdin", "needle"),
    [
        (b"garbage\n", "not JSON"),
        (b"", "expected hello first, found end of input"),
        (encode(Hello()), "expected a job after hello, found end of input"),
        (encode(Hello(protocol=9)), "protocol 9 is not 1"),
        (
            encode(Hello()) + encode(Result(status=RunStatus.OK)),
            "expected a job after hello, found result",
        ),
        (encode(Hello()) + b'{"type": "job"', "stream ended inside a line"),
    ],
    ids=["garbage", "empty", "no-job", "protocol", "not-a-job", "truncated"],
)
def test_bad_input_exits_2_without_a_result(stdin: bytes, needle: str) -> None:
    r = run_worker(None, stdin=stdin)
    assert r.returncode == 2
    assert r.messages == []  # only the worker's hello went out
    assert needle in r.stderr


def test_an_invalid_routine_is_a_failed_run_not_a_broken_worker(home: Path) -> None:
    job = make_job(home, "[routine]\nkind = 3\n")
    r = run_worker(job)
    assert r.returncode == 0
    assert r.result.status == "failed" and "the routine is invalid" in (r.result.error or "")


def test_the_worker_dies_with_its_parent() -> None:
    parent = textwrap.dedent(
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-m", "worker"], cwd={str(REPO)!r},
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        child.stdout.readline()  # its hello: PR_SET_PDEATHSIG is set by then
        print(child.pid, flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None
    worker_pid = int(proc.stdout.readline())
    worker = psutil.Process(worker_pid)
    assert worker.is_running()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs([worker], timeout=30)  # bounded wait, not a timing check
    assert alive == [], "the worker outlived its parent"
    assert gone


def test_a_sibling_cannot_read_the_worker_environ() -> None:
    """PR_SET_DUMPABLE(0) (worker/process.py no_dumping): another process of the same user
    cannot read the worker's environ (its API key) or mem, once it has said hello."""
    key = "sk-ant-dumpable-" + "x" * 16
    proc = spawn(worker_env(ANTHROPIC_API_KEY=key))
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline()  # its hello: the prctl is set before it
        sibling = textwrap.dedent(
            f"""
            for name in ("environ", "mem"):
                try:
                    f = open("/proc/{proc.pid}/" + name, "rb")
                except PermissionError:
                    print(name, "denied")
                    continue
                with f:  # mem opens, then reads only mapped offsets: opening is the leak
                    print(name, "opened", {key!r}.encode() in f.read() if name == "environ" else "")
            """
        )
        out = subprocess.run(
            [sys.executable, "-c", sibling], capture_output=True, text=True, check=True
        ).stdout
        assert out == "environ denied\nmem denied\n"
    finally:
        proc.kill()
        proc.communicate()


def test_the_worker_sets_its_process_title(home: Path, ollama: FakeOllama) -> None:
    ollama.add(O.text(LONG, delay=60))
    job = make_job(home, routine_toml(route="ollama"), ollama_url=ollama.url)
    proc = spawn(worker_env())
    try:
        assert proc.stdin is not None
        proc.stdin.write(encode(Hello()) + encode(job))
        proc.stdin.flush()
        for _ in range(600):  # until it is waiting on the fake (bounded, not a timing check)
            if ollama.chats:
                break
            time.sleep(0.05)
        assert ollama.chats
        title = Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
        assert title == b"vinos-routine worker day-brief"
    finally:
        proc.kill()
        proc.communicate()


# --- outputs ---


def test_the_output_file_is_named_and_titled_from_started_at(
    home: Path, ollama: FakeOllama
) -> None:
    ollama.add(O.text(LONG))
    toml = routine_toml(route="ollama", output='title = "Today · {{date}} ({{name}})"\n')
    job = make_job(home, toml, ollama_url=ollama.url, started_at="2026-03-08T23:45:00+09:00")
    r = run_worker(job)
    assert r.result.output_file == "2026-03-08-2345.md"
    assert r.output() == f"# Today · 2026-03-08 (day-brief)\n\n{LONG.strip()}\n"
    assert list(Path(job.scratch_dir).iterdir()) == [Path(job.scratch_dir) / "2026-03-08-2345.md"]


@pytest.mark.parametrize("status", [204, 500])
def test_a_webhook_output_is_posted_once(home: Path, ollama: FakeOllama, status: int) -> None:
    class Hook(FakeServer):
        scripted = frozenset({("POST", "/hook")})

    with Hook([Reply(status)]) as hook:
        ollama.add(O.text(LONG))
        toml = routine_toml(route="ollama", output=f'type = "webhook"\nurl = "{hook.url}/hook"\n')
        r = run_worker(make_job(home, toml, ollama_url=ollama.url))
        assert len(hook.requests) == 1
        body = hook.requests[0].body
    assert body["routine"] == "day-brief" and body["run_id"] == "run-1"
    assert body["markdown"].startswith("# day-brief · 2026-07-25\n")
    assert r.result.output_file == "2026-07-25-0600.md"  # the file is kept either way
    if status == 204:
        assert r.result.status == "ok" and r.result.error is None
    else:
        assert r.result.status == "failed" and "answered HTTP 500" in (r.result.error or "")


# --- command routines ---


def _command(home: Path, run: str, timeout_sec: int = 30) -> WorkerRun:
    return run_worker(make_job(home, command_toml(run, timeout_sec=timeout_sec), name="disk"))


def test_a_command_routine_writes_its_stdout(home: Path, not_root: None) -> None:
    r = _command(home, "printf 'disk ok\\nall good\\n'; echo noise >&2")
    res = r.result
    assert (res.status, res.route, res.summary, res.model) == ("ok", "command", "disk ok", "")
    assert r.output() == "# disk · 2026-07-25\n\ndisk ok\nall good\n"
    assert r.usages == []


def test_a_failing_command_reports_its_exit_code_and_stderr_tail(
    home: Path, not_root: None
) -> None:
    r = _command(home, "echo partial; for i in $(seq 1 30); do echo line $i >&2; done; exit 3")
    res = r.result
    assert (res.status, res.route, res.output_file) == ("failed", "command", None)
    assert res.error is not None and "exited with code 3" in res.error
    assert "line 30" in res.error and "line 20" not in res.error  # the tail only
    assert r.returncode == 0


def test_a_command_that_times_out_reports_timeout(home: Path, not_root: None) -> None:
    r = _command(home, "sleep 30", timeout_sec=1)
    assert r.result.status == "timeout"
    assert r.result.error == "the command timed out after 1 s (timeout_sec)"


@pytest.mark.slow
def test_a_command_over_max_run_memory_mb_together_is_killed_and_the_run_says_why(
    home: Path, not_root: None
) -> None:
    """Three processes of 150 MB, each well under the per-process limit, over a 300 MB cap
    for the call: [sandbox].max_run_memory_mb reaches the sandbox through the job."""
    hog = "/usr/bin/python3 -c 'import time; b = b\"x\" * (150 << 20); time.sleep(60)'"
    job = make_job(home, command_toml(f"{hog} & {hog} & {hog} & wait", timeout_sec=60), name="disk")
    r = run_worker(replace(job, sandbox={"max_run_memory_mb": 300}))
    res = r.result
    assert (res.status, res.output_file) == ("failed", None)
    assert (res.error or "").startswith("the command failed: killed: the command's processes used")
    # /tmp's tmpfs is a quarter of the budget at most (64 MB by default), so the processes
    # get the rest: the message says the split.
    assert (res.error or "").endswith(
        "together, over the 236 MB that max_run_memory_mb = 300 leaves beside /tmp's 64 MB"
    )


def test_a_worker_bug_exits_70_after_a_failed_result(home: Path) -> None:
    """Bad data from the supervisor (an unknown sandbox setting) breaks the worker itself."""
    job = replace(make_job(home, command_toml("true"), name="disk"), sandbox={"bogus": 1})
    r = run_worker(job)
    assert r.returncode == 70
    assert r.result.status == "failed"
    assert (r.result.error or "").startswith("the worker crashed: TypeError")
    assert "Traceback" in r.stderr
