"""A command routine (`kind = "command"`): `[command].run` in the sandbox, no model.

stdout is the output; a non-zero exit is `failed` with the exit code and the tail of stderr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ipc.messages import EventKind, Result, RunStatus
from worker.context import RunContext
from worker.output import write_and_post
from worker.results import run_failed

if TYPE_CHECKING:
    from sandbox.runner import ShellResult

__all__ = ["OUTPUT_CAP", "run_command", "stderr_tail"]

OUTPUT_CAP = 1 << 20  # stdout kept as the output; past it the command is ended and fails
TAIL_LINES = 10
TAIL_CHARS = 1500


def stderr_tail(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()][-TAIL_LINES:]
    tail = "\n".join(lines)
    return tail if len(tail) <= TAIL_CHARS else "…" + tail[-TAIL_CHARS:]


def run_command(run: RunContext) -> Result:
    import sandbox

    spec = run.routine.command
    assert spec is not None
    if spec.mcp is not None:
        from worker.mcpcommand import run_mcp_command

        return run_mcp_command(run)

    def failed(message: str, status: RunStatus = RunStatus.FAILED) -> Result:
        return run_failed(message, status=status, base=Result(status=status, route="command"))

    try:
        policy = run.shell_policy()
    except ValueError as exc:  # sandbox.UnsafeValue
        return failed(f"the sandbox refused to start: {exc}")
    # The command gets its whole timeout_sec: the supervisor's backstop for a command routine waits
    # that long plus a grace to report (supervisor/engine/limits.py run_limit), so a command that
    # hits it
    # is reported here as `timeout` after exactly timeout_sec
    # (test_reliability_timeout.py::test_a_command_past_its_timeout_sec_is_recorded_timeout).
    timeout = float(spec.timeout_sec)
    run.channel.event(EventKind.TOOL_CALL, f"shell:{spec.run}", tool="command")
    res = sandbox.run_shell(
        spec.run,
        policy,
        timeout_sec=timeout,
        stdout_cap=OUTPUT_CAP,
        on_argv=run.debug_argv(),
        # What an event hands the run (an upstream's output, changed paths, a fire call's
        # input) is its stdin; nothing else is (test_daemon_triggers.py).
        stdin=run.job.event_text.encode() if run.job.event_text else None,
        on_copy_back=run.announce_copy_back,
    )
    run.channel.event(
        EventKind.TOOL_RESULT,
        f"command: {_how_it_ended(res)} ({len(res.stdout):,} bytes of output)",
        tool="command",
        exit_code=res.exit_code,
        timed_out=res.timed_out,
        duration_sec=round(res.duration_sec, 3),
    )
    tail = stderr_tail(res.stderr)
    if res.error is not None:
        return failed(f"the command failed: {res.error}")
    if res.timed_out:
        message = f"the command timed out after {timeout:g} s (timeout_sec)" + _tail(tail)
        return failed(message, RunStatus.TIMEOUT)
    if res.exit_code is None:
        return failed(f"the command's output passed {OUTPUT_CAP:,} bytes, so it was ended")
    if res.exit_code != 0:
        return failed(f"the command exited with code {res.exit_code}" + _tail(tail))
    delivery = write_and_post(run, res.stdout)
    first = next((ln.strip() for ln in res.stdout.splitlines() if ln.strip()), "")
    return Result(
        # A command that exited 0 is `ok` even when its output found no room: a delivery
        # problem beside it (`error`), never a strike.
        status=RunStatus.FAILED if delivery.webhook_error else RunStatus.OK,
        summary=first[:200] or "the command succeeded with no output",
        output_file=delivery.output_file,
        route="command",
        error=delivery.error,
    )


def _how_it_ended(res: ShellResult) -> str:
    """ "exit 0", or why there is no exit status (never "exit None")."""
    if res.exit_code is not None:
        return f"exit {res.exit_code}"
    if res.timed_out:
        return "killed at its timeout"
    if res.error is not None:
        return "did not run"
    return "ended at the output cap"


def _tail(tail: str) -> str:
    return f", stderr:\n{tail}" if tail else ""
