"""`[gate]`: a check run in the routine's sandbox before any model call or command.

Exit 0: go, its stdout (capped) handed to the prompt as untrusted data. Exit 1: the run
ends `ok` with outcome `nothing-to-do`, the gate's first line as its reason, no model called
(0 tokens). Anything else (another code, a timeout, no start): the run fails, a strike like
any failure. `gate_verdict` decides; `run_gate` runs the command and carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ipc.messages import EventKind, Outcome, Result, RunStatus
from worker.context import RunContext
from worker.results import first_line, run_failed

__all__ = ["GATE_OUTPUT_CAP", "GATE_STDOUT_MAX", "GateVerdict", "Go", "gate_verdict", "run_gate"]

GATE_OUTPUT_CAP = 8 * 1024  # characters of its stdout the prompt is given
GATE_STDOUT_MAX = 1 << 20  # past it the gate is ended and fails (as a command's output cap)
NOTHING = "the gate found nothing to do"


class Go(StrEnum):
    GO = "go"  # exit 0: the run goes on
    NOTHING = "nothing"  # exit 1: nothing to do, no model
    FAILED = "failed"  # anything else: a failure, a strike


@dataclass(frozen=True, slots=True)
class GateVerdict:
    go: Go
    text: str  # GO: the stdout for the prompt; NOTHING: the one-line reason; FAILED: why


def gate_verdict(
    exit_code: int | None,
    *,
    timed_out: bool,
    error: str | None,
    stdout: str,
    stderr: str,
    timeout_sec: float,
) -> GateVerdict:
    """What a gate's end means (pure; tests/worker/test_gate.py)."""
    if error is not None:
        return GateVerdict(Go.FAILED, f"the gate could not run: {error}")
    if timed_out:
        return GateVerdict(Go.FAILED, f"the gate timed out after {timeout_sec:g} s")
    if exit_code is None:
        return GateVerdict(Go.FAILED, f"the gate's output passed {GATE_STDOUT_MAX:,} bytes")
    if exit_code == 0:
        return GateVerdict(Go.GO, stdout[:GATE_OUTPUT_CAP])
    if exit_code == 1:
        return GateVerdict(Go.NOTHING, first_line(stdout) or first_line(stderr) or NOTHING)
    tail = first_line(stderr)
    return GateVerdict(
        Go.FAILED, f"the gate exited with code {exit_code}" + (f": {tail}" if tail else "")
    )


def run_gate(run: RunContext) -> Result | None:
    """Run the routine's gate; None to go on (its stdout kept in `run.gate_output`), else the
    run's Result (nothing-to-do with 0 tokens, or a failure)."""
    import sandbox

    gate = run.routine.gate
    assert gate is not None
    base = Result(status=RunStatus.FAILED, route="gate")
    try:
        policy = run.shell_policy()
    except ValueError as exc:  # sandbox.UnsafeValue
        return run_failed(f"the gate's sandbox refused to start: {exc}", base=base)
    run.channel.event(EventKind.TOOL_CALL, f"gate: {gate.run}", tool="gate")
    timeout = float(min(gate.timeout_sec, max(1.0, run.deadline.remaining())))
    res = sandbox.run_shell(
        gate.run, policy, timeout_sec=timeout, stdout_cap=GATE_STDOUT_MAX, on_argv=run.debug_argv()
    )
    verdict = gate_verdict(
        res.exit_code,
        timed_out=res.timed_out,
        error=res.error,
        stdout=res.stdout,
        stderr=res.stderr,
        timeout_sec=timeout,
    )
    run.channel.event(
        EventKind.TOOL_RESULT,
        f"gate: {verdict.go}" + (f": {verdict.text}" if verdict.go is not Go.GO else ""),
        tool="gate",
        exit_code=res.exit_code,
    )
    if verdict.go is Go.GO:
        run.gate_output = verdict.text
        return None
    if verdict.go is Go.NOTHING:
        # No model, no command: `ok` with 0 tokens, quiet (supervisor/engine/finish.py notifies
        # nobody
        # of a nothing-to-do run).
        return Result(
            status=RunStatus.OK, outcome=Outcome.NOTHING_TO_DO, summary=verdict.text, route="gate"
        )
    return run_failed(verdict.text, base=base)
