"""Stand-in workers for tests/supervisor/test_spawn.py: real processes that speak (or break)
the worker protocol in one scripted way each. `python fakeworker.py MODE [ARG]`.

Modes:
  ok           hello, an event, a usage, a result naming output.md (written in scratch_dir)
  sprawl MARK  hello; start `sleep MARK1` in its own group and `sleep MARK2` in a new session
               (both descendants), ignore SIGTERM, and hang
  hang         hello, then sleep forever (SIGTERM ends it)
  copyback     hello, a copy_back event, then hang
  copyback-ok  hello, a copy_back event, then a result
  spend        hello, then a $0.01 usage every 10 ms, for ever
  tokens       hello, then a usage of 1,000 premium tokens every 10 ms, for ever
  local        hello, five usages of 10,000 local (Ollama) tokens, a result
  garbage      hello, then a line that is not JSON, then hang
  no-hello     an event first
  two-results  hello, a result, a second result
  exit3        hello, then exit status 3 with no result
  chatty       hello, 3 stderr lines (one 10,000 chars long), a result
  propose DIR  hello; writes the job's decisions to DIR/RUN_ID.json, proposes the action
               `send-reply` (input "Hi Bob\n"), then reports ok as `ok` does
  job DIR      hello; writes the job it was sent to DIR/RUN_ID.json, then reports ok as `ok` does
  gated DIR    hello; a routine named held* notes DIR/NAME.entered and waits for DIR/NAME.go;
               then writes output.md in scratch_dir and reports ok, or failed when it cannot;
               a routine named *mail proposes `send-reply` (input "Hi Bob\n") before it reports
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import msgspec

from ipc import Event, EventKind, Hello, Job, LineReader, Proposal, Result, Usage, encode
from routines.runs import RunStatus


def send(msg: object) -> None:
    sys.stdout.buffer.write(encode(msg))  # type: ignore[arg-type]
    sys.stdout.buffer.flush()


def gated(gates: str) -> None:
    """Mode `gated DIR` (see the module docstring)."""
    reader = LineReader(sys.stdin.buffer)
    reader.read()  # hello
    job = reader.read()
    assert isinstance(job, Job)
    send(Hello())
    gate = os.path.join(gates, job.routine_name)
    if job.routine_name.startswith("held"):
        open(gate + ".entered", "w").close()
        while not os.path.exists(gate + ".go"):
            time.sleep(0.05)
    if job.routine_name.endswith("mail"):
        send(Proposal(action="send-reply", input="Hi Bob\n", summary="Reply to Bob"))
    try:
        with open(os.path.join(job.scratch_dir, "output.md"), "w") as f:
            f.write("# Output\n\nall good\n")
    except OSError as exc:
        # As the real worker (worker/output.py): the run did its work, so it is `ok`, with
        # its output's delivery problem beside it.
        error = f"output not delivered: could not write it: {exc.strerror}"
        send(Result(status=RunStatus.OK, summary="all good", error=error, route="command"))
    else:
        send(
            Result(
                status=RunStatus.OK, summary="all good", output_file="output.md", route="command"
            )
        )


def ok(job: Job) -> None:
    """Mode `ok`, after the hello."""
    send(Event(EventKind.LOG, "working"))
    send(Usage(input=10, output=5, dollars=0.001, model="claude-sonnet-4-6"))
    with open(os.path.join(job.scratch_dir, "output.md"), "w") as f:
        f.write("# Output\n\nall good\n")
    send(Result(status=RunStatus.OK, summary="all good", output_file="output.md", route="command"))


def propose(told: str) -> None:
    """Mode `propose DIR` (see the module docstring)."""
    reader = LineReader(sys.stdin.buffer)
    reader.read()  # hello
    job = reader.read()
    assert isinstance(job, Job)
    send(Hello())
    with open(os.path.join(told, job.run_id + ".json"), "w") as f:
        json.dump(msgspec.to_builtins(job.decisions), f)
    send(Proposal(action="send-reply", input="Hi Bob\n", summary="Reply to Bob"))
    ok(job)


def dump_job(told: str) -> None:
    """Mode `job DIR` (see the module docstring)."""
    reader = LineReader(sys.stdin.buffer)
    reader.read()  # hello
    job = reader.read()
    assert isinstance(job, Job)
    send(Hello())
    with open(os.path.join(told, job.run_id + ".json"), "wb") as f:
        f.write(encode(job))
    ok(job)


def hang(mode: str, job: Job) -> None:
    """hang, copyback (says it copies a call's writes back, then hangs) or copyback-ok (says
    so, then ends with its own report)."""
    if mode != "hang":
        send(Event(EventKind.COPY_BACK, "copying back what the call wrote"))
    time.sleep(0.2 if mode == "copyback-ok" else 600)
    ok(job)


def main() -> None:
    mode, *rest = sys.argv[1:]
    reader = LineReader(sys.stdin.buffer)
    reader.read()  # hello
    job = reader.read()
    assert isinstance(job, Job)
    if mode == "no-hello":
        send(Event(EventKind.LOG, "too early"))
        time.sleep(60)
        return
    send(Hello())
    if mode == "ok":
        ok(job)
    elif mode == "sprawl":
        mark = rest[0]
        subprocess.Popen(["sleep", f"{mark}1"])
        subprocess.Popen(["sleep", f"{mark}2"], start_new_session=True)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        send(Event(EventKind.LOG, "sprawled"))
        time.sleep(600)
    elif mode == "local":
        for _ in range(5):
            send(Usage(local_input=10_000, local_output=100, model="llama3.2"))
        send(Result(status=RunStatus.OK, summary="local only", route="ollama"))
    elif mode in ("hang", "copyback", "copyback-ok"):
        hang(mode, job)
    elif mode in ("spend", "tokens"):
        while True:
            if mode == "spend":
                send(Usage(input=100, output=10, dollars=0.01, model="claude-sonnet-4-6"))
            else:
                send(Usage(input=900, output=100, dollars=0.0, model="claude-sonnet-4-6"))
            time.sleep(0.01)
    elif mode == "garbage":
        sys.stdout.buffer.write(b"this is not json\n")
        sys.stdout.buffer.flush()
        time.sleep(600)
    elif mode == "two-results":
        send(Result(status=RunStatus.OK, summary="one"))
        send(Result(status=RunStatus.OK, summary="two"))
        time.sleep(600)
    elif mode == "exit3":
        sys.exit(3)
    elif mode == "chatty":
        print("first line", file=sys.stderr)
        print("x" * 10_000, file=sys.stderr)
        print("last line", file=sys.stderr, flush=True)
        send(Result(status=RunStatus.OK, summary="said things"))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    if sys.argv[1] == "gated":
        gated(sys.argv[2])
    elif sys.argv[1] == "propose":
        propose(sys.argv[2])
    elif sys.argv[1] == "job":
        dump_job(sys.argv[2])
    else:
        main()
