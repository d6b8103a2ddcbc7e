"""`python -m worker.actioncmd ID [--auto | --dashboard] [--shown SHA256]`: run one approved
proposal, once.

What `vinos-routine approve ID` runs after the person confirmed, what the daemon starts for
the dashboard's Approve (`--dashboard`: the person approved in its session), and what the
supervisor starts for a routine with `auto_approve` (`--auto`). In order:

1. the routine file as it is now must be the one the proposal was made from (its fingerprint):
   else the proposal is marked invalidated and nothing runs;
2. with `--auto`, the routine must set auto_approve and its signature must verify against
   ~/.vinos/allowed_signers (routines.signing); else the proposal stays waiting for a person;
3. the proposal is claimed (waiting → running) by one conditional UPDATE: of two racing
   processes one wins, the other says who did; with `--shown SHA256` (what `approve` showed
   the person), the claimed input must be that one, or nothing runs: on a fleet the
   database's writers could change it between the showing and the run
   (tests/cli/test_cli_approvals.py::test_an_input_changed_after_it_was_shown_is_not_run);
4. the action's exact `run` command runs in the routine's sandbox, with the action's own
   network and home, the shell timeout and caps, and the proposal's input on stdin; a
   write_file request (permissions "ask") is written instead, its path checked against the
   routine's `write` folders again (worker/writetool.py);
5. exit status and output are recorded (running → done) and printed, made safe to show.

Exit status: the command's; 124 when killed at the timeout; 1 when nothing ran or the
sandbox refused; 3 when --auto declined (the proposal still waits).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

from routines import proposals
from routines.ledger.api import LedgerAPI, open_ledger
from routines.proposals import Decider, Proposal
from routines.safetext import visible
from routines.spec import Routine
from routines.spec.checks import RoutineInvalid
from routines.spec.config import load_config, load_config_or_default
from routines.spec.paths import Paths, paths
from routines.spec.registry import scan

__all__ = ["AUTO_DECLINED", "main", "signature_problem"]

TIMEOUT_STATUS = 124  # as timeout(1)
AUTO_DECLINED = 3
USAGE = "usage: python -m worker.actioncmd ID [--auto | --dashboard] [--shown SHA256]"


def signature_problem(routine: Routine, p: Paths) -> str | None:
    """Why `routine` may not act alone, or None when it may: auto_approve set, and the bytes
    it was parsed from (whose fingerprint matched the proposal) signed by a trusted key."""
    from routines.signing import verify_routine

    if not routine.auto_approve:
        return "auto_approve is not set"
    check = verify_routine(routine.source, p.allowed_signers, data=routine.text.encode("utf-8"))
    if check.trusted:
        return None
    return f"{check.describe()}: auto_approve ignored"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    auto = "--auto" in args
    by = Decider.AUTO if auto else Decider.DASHBOARD if "--dashboard" in args else Decider.CLI
    rest = [a for a in args if a not in ("--auto", "--dashboard")]
    shown: str | None = None
    if "--shown" in rest:
        at = rest.index("--shown")
        shown = rest[at + 1] if at + 1 < len(rest) else ""
        del rest[at : at + 2]
    # The dashboard's approval names the input it showed: it runs that one or nothing.
    unshown = by is Decider.DASHBOARD and shown is None
    if len(rest) != 1 or not rest[0].isdigit() or shown == "" or unshown:
        return _fail(USAGE, 2)
    if auto and "--dashboard" in args:
        return _fail(USAGE, 2)
    import sandbox

    refusal = sandbox.refuse_if_root()
    if refusal is not None:
        return _fail(refusal)
    p = paths()
    # The proposals are the run ledger's: the fleet's on a fleet, where any machine answers.
    with closing(open_ledger(p.ledger, load_config_or_default(p.config_file).fleet)) as ledger:
        return _approve(ledger, p, int(rest[0]), by, shown)


def _now() -> datetime:
    return datetime.now(UTC)


def _approve(ledger: LedgerAPI, p: Paths, pid: int, by: Decider, shown: str | None) -> int:
    auto = by is Decider.AUTO
    found = proposals.get(ledger, pid)
    if found is None:
        return _fail(f"no proposal #{pid}")
    entry = scan(p).get(found.routine)
    routine = entry.routine if entry is not None and entry.valid else None
    current = proposals.fingerprint(routine.text) if routine is not None else None
    if current != found.fingerprint:
        proposals.invalidate(ledger, found.routine, current, _now(), only=pid)
    if routine is None or current is None:
        return _fail(f"proposal #{pid}: routine {found.routine!r} is gone or invalid now")
    if auto:
        problem = signature_problem(routine, p)
        if problem is not None:
            proposals.note(ledger, pid, problem)
            print(f"vinos-routine: proposal #{pid} waits for a person: {problem}", file=sys.stderr)
            return AUTO_DECLINED
    won, why = proposals.claim(ledger, pid, by=by, now=_now(), current=current)
    if why is not None or won is None:
        return _fail(f"proposal #{pid} was not run: {why}")
    if shown is not None and proposals.fingerprint(won.input) != shown:
        changed = "[error] refused: its input is not the one you were shown; nothing ran"
        proposals.finish(ledger, pid, exit_status=None, output=changed, now=_now())
        return _fail(f"proposal #{pid} was not run: its input changed since it was shown")
    return _run(ledger, p, routine, won)  # `won.input`, the one checked, is what runs


def _run(ledger: LedgerAPI, p: Paths, routine: Routine, prop: Proposal) -> int:
    code: int | None = None
    output = ""
    try:
        if prop.action == proposals.WRITE_ACTION:
            code, output = _write(p, routine, prop)
        else:
            code, output = _action(p, routine, prop)
    except (RoutineInvalid, ValueError, OSError, RuntimeError) as exc:
        output = f"[error] {exc}"
    finally:
        # Whatever happened, the row leaves `running`: it ran (or could not), once.
        proposals.finish(ledger, prop.id, exit_status=code, output=output, now=_now())
    sys.stdout.write(visible(output.rstrip("\n")) + "\n" if output else "")
    sys.stdout.flush()
    status = "ran" if code is not None else "could not run"
    shown = f"exit status {code}" if code is not None else "nothing ran to the end"
    print(f"vinos-routine: proposal #{prop.id} {status} ({shown})", file=sys.stderr)
    return 1 if code is None else code


def _action(p: Paths, routine: Routine, prop: Proposal) -> tuple[int | None, str]:
    """The action's command in its sandbox: (exit status or None, its output)."""
    import sandbox
    from worker.sandboxcli import tidy
    from worker.shellpolicy import shell_policy_for, shell_timeout_for

    action = routine.agent.action(prop.action) if routine.agent is not None else None
    if action is None or action.run != prop.command:  # the fingerprint matched: cannot be
        raise RuntimeError(f"the routine no longer declares {prop.action!r} as proposed")
    settings = load_config(p.config_file).sandbox
    scratch_root = p.sandbox_scratch_root / routine.name
    scratch_root.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"action-{prop.id}-", dir=scratch_root))
    try:
        policy = shell_policy_for(
            routine, paths=p, scratch_dir=scratch, settings=settings, action=action
        )
        timeout = shell_timeout_for(routine)
        result = sandbox.run_shell(
            action.run, policy, timeout_sec=timeout, stdin=prop.input.encode("utf-8")
        )
    finally:
        tidy(scratch, "action", keep=False)
    output = result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr else "")
    if result.error is not None:
        return None, output + f"\n[error] {result.error}"
    if result.timed_out:
        return TIMEOUT_STATUS, output + f"\n[killed at the {timeout:g} s timeout]"
    return result.exit_code, output


def _write(p: Paths, routine: Routine, prop: Proposal) -> tuple[int | None, str]:
    """A write_file request a run paused at: checked again against the routine's write
    folders as they resolve now (a link planted while it waited is refused, not followed),
    then written; (0, the tool's own result) or (None, why not)."""
    import os

    from worker import writetool
    from worker.shellpolicy import never_for

    never = never_for(p, load_config(p.config_file).sandbox)
    where = writetool.target(prop.command, routine.write, os.path.realpath(Path.home()), never)
    if isinstance(where, str):
        return None, f"[error] refused: {where}"
    if where.path != prop.command:
        return None, f"[error] refused: {prop.command} resolves to {where.path} now"
    return 0, writetool.write(where, prop.input)


def _fail(message: str, code: int = 1) -> int:
    print(f"vinos-routine: {visible(message, newlines=False)}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
