"""The worker process: stdin gives a Hello and one Job (and, for a fleet's leased run, lease
renewals: worker/lease.py); stdout carries Hello, Events and Usage, then exactly one Result;
stderr is free text for the run log.

Exit status: 0 for every run outcome (ok, failed, budget: the Result says which); 2 when the
input was not a Hello and a Job (nothing ran, no Result); 70 when the worker itself broke
(a Result `failed` naming the crash is sent first when possible).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import IO, NoReturn

from ipc.framing import LineReader, ProtocolError, encode
from ipc.messages import PROTOCOL, Hello, Job, Result
from worker import process
from worker.results import run_failed

__all__ = ["EXIT_BAD_INPUT", "EXIT_CRASH", "leave", "main", "run_job"]

EXIT_BAD_INPUT = 2
EXIT_CRASH = 70  # EX_SOFTWARE


# The message stream (fd 1's private copy), for `leave` to flush: it is block-buffered.
_message_out: list[IO[bytes]] = []


def leave(code: int) -> NoReturn:
    """End the process now: flush the message stream and the run log (stderr), then
    `os._exit`, so the interpreter does not tear down the thousands of modules a run loads
    (the SDK's), which takes longer than many runs. Nothing of the worker's is left to an
    atexit handler: log handlers are flushed here (logging's own atexit hook), temporary
    directories are removed by their `with`, and the scratch dir by run_job's `finally`;
    tests/worker/test_worker_process.py checks that the Result and the last log line
    arrive."""
    import logging

    try:
        logging.shutdown()
        for stream in (*_message_out, sys.stdout, sys.stderr):
            stream.flush()
        for stream in _message_out:
            stream.close()
    except (OSError, ValueError):  # a reader gone away: nothing more can be said to it
        code = code or EXIT_CRASH
    finally:
        os._exit(code)


def main() -> int:
    process.no_dumping()  # before anything reads the key: no sibling reads our /proc/PID
    os.umask(0o077)  # as the supervisor's: its outputs and memory are the user's alone
    out = process.protect_stdout()
    _message_out.append(out)
    process.die_with_parent()
    out.write(encode(Hello()))
    out.flush()
    # The supervisor's pipe on a private descriptor (not inherited, PEP 446), fd 0 /dev/null:
    # no child reads the lease renewals that follow the job.
    pipe = open(os.dup(0), "rb")  # noqa: SIM115 - a leased run's renewals are read from it
    process.quiet_stdin()
    reader = LineReader(pipe)
    try:
        job = read_job(reader)
    except ProtocolError as exc:
        print(f"vinos-routine worker: bad input on stdin: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    process.set_title(job.routine_name)
    from worker.channel import Channel

    channel = Channel(out, job.routine_name)
    if job.lease_until is None:
        pipe.close()
    else:
        from worker.lease import LeaseWatch

        LeaseWatch(job.lease_until, reader, lambda: _lease_lost(channel)).start()
    try:
        result = run_job(job, channel)
    except Exception as exc:
        import traceback

        traceback.print_exc(file=sys.stderr)
        if not channel.result_sent:
            _send_crash(out, channel, exc)
        return EXIT_CRASH
    channel.result(result)
    return 0


def read_job(reader: LineReader) -> Job:
    hello = reader.read()
    if not isinstance(hello, Hello):
        raise ProtocolError(f"expected hello first, found {_kind(hello)}")
    if hello.protocol != PROTOCOL:
        raise ProtocolError(f"protocol {hello.protocol} is not {PROTOCOL}")
    job = reader.read()
    if not isinstance(job, Job):
        raise ProtocolError(f"expected a job after hello, found {_kind(job)}")
    return job


def _kind(msg: object) -> str:
    return "end of input" if msg is None else getattr(msg, "TYPE", type(msg).__name__)


def run_job(job: Job, channel: object) -> Result:
    """Parse the routine again (the worker trusts nothing but the text) and run it."""
    from routines.spec import Kind, Origin
    from routines.spec.loader import RoutineInvalid, load_text
    from routines.spec.providers import from_job
    from worker.channel import Channel
    from worker.context import Deadline, RunContext

    assert isinstance(channel, Channel)
    try:
        routine = load_text(
            job.routine_toml,
            Path(job.routine_path),
            Origin(job.routine_origin),
            check_schedule=False,  # the supervisor validated it; a run never looks at it
            providers=from_job(job.providers),  # config.toml's, as the supervisor read it
        )
    except (RoutineInvalid, ValueError) as exc:
        return run_failed(f"the routine is invalid: {exc}")
    if routine.name != job.routine_name:
        return run_failed(f"the job names {job.routine_name!r} but its routine is {routine.name!r}")
    shells = routine.agent is not None and bool(routine.agent.shell_commands)
    if routine.kind is Kind.COMMAND or shells or routine.gate is not None:
        _take_probe(job)
    try:
        started = datetime.fromisoformat(job.started_at)
    except ValueError:
        return run_failed(f"started_at {job.started_at!r} is not an ISO 8601 time")
    if started.tzinfo is None:
        return run_failed(f"started_at {job.started_at!r} has no UTC offset")
    run = RunContext(
        job=job,
        routine=routine,
        channel=channel,
        started=started,
        deadline=Deadline(routine.run_timeout_sec, elapsed=time.time() - started.timestamp()),
    )
    try:
        if routine.gate is not None:  # before any model call or command (worker/gate.py)
            from worker.gate import run_gate

            if (ended := run_gate(run)) is not None:
                return ended
        if routine.kind is Kind.COMMAND:
            from worker.commandroutine import run_command

            return run_command(run)
        from worker.agent import run_agent

        return run_agent(run)
    finally:
        if run.mcp is not None:  # every MCP server's process tree ends with the run
            run.mcp.close()
        # What the shell tools left in the run's scratch dir: removed by descriptor, no link
        # followed, whatever modes they set. Never read: outputs come from stdout and the
        # model's text only. Nothing a sandbox wrote outlives the run but the workspace, so a
        # failure is said in the run log (the supervisor tries again after the worker).
        from routines.store import remove_tree

        try:
            remove_tree(run.sandbox_scratch)
        except OSError as exc:
            print(
                f"[{routine.name}] could not remove the shell tools' scratch dir "
                f"{run.sandbox_scratch}: {exc}",
                file=sys.stderr,
            )


def _lease_lost(channel: object) -> None:
    """The dead-man switch fired (worker/lease.py): kill what this run started, report it
    `interrupted`, and exit at once, whatever the main thread is doing (the channel is held
    while the tree is killed, so the main thread cannot report the killed command first)."""
    from ipc.messages import RunStatus
    from worker.channel import Channel
    from worker.lease import kill_tree

    assert isinstance(channel, Channel)

    def stop() -> Result:
        killed = kill_tree()
        why = (
            "lease lost: the fleet's lease on this run was not renewed in time, so the worker "
            f"stopped it ({killed} process(es) killed) before another machine may take the "
            "routine"
        )
        print(f"vinos-routine worker: {why}", file=sys.stderr, flush=True)
        return Result(status=RunStatus.INTERRUPTED, summary="lease lost", error=why)

    channel.last_word(stop)
    os._exit(0)


def _take_probe(job: Job) -> None:
    """The daemon's sandbox probe (supervisor/engine/probecache.py) as this process's own, when
    it is for the bwrap this run's sandbox uses: no probe bwrap run before the first shell call."""
    found = job.sandbox_probe
    if found is None or found.bwrap != job.sandbox.get("bwrap"):
        return
    from sandbox.probe import Probe, seed

    seed(found.bwrap, Probe(found.ok, found.reason, found.fix))


def _send_crash(out: IO[bytes], channel: object, exc: BaseException) -> None:
    message = f"the worker crashed: {type(exc).__name__}: {exc}"
    try:
        from worker.channel import Channel

        assert isinstance(channel, Channel)
        channel.result(run_failed(message))
    except Exception:
        import traceback

        traceback.print_exc(file=sys.stderr)
