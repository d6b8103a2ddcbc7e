"""`python -m worker.sandboxcli NAME [--argv] -- CMD`: what `vinos-routine sandbox` execs.

Runs CMD exactly as routine NAME's shell tool would: the same policy (shell_policy_for), the
same timeout, caps and limits, a fresh scratch dir under routines/scratch/NAME/ as the working
directory. The whitelist is not checked: the user typed the command. Several words of CMD are
joined with spaces, as ssh does. Exit status: the command's; 124 when killed at the timeout;
1 when the sandbox refused or could not run it, or the command was ended at an output cap.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import sandbox
from routines.signing import effective_permissions
from routines.spec.checks import RoutineInvalid
from routines.spec.config import load_config
from routines.spec.paths import paths
from routines.spec.registry import scan
from sandbox.argv import argv_line
from worker.shellpolicy import shell_policy_for, shell_timeout_for

__all__ = ["main"]

TIMEOUT_STATUS = 124  # as timeout(1)


USAGE = "usage: python -m worker.sandboxcli NAME [--argv] -- CMD..."


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `NAME [--argv] -- CMD...` (the form supervisor/cli/commands/sandbox.py execs)."""
    rest = list(sys.argv[1:] if argv is None else argv)
    show_argv = "--argv" in rest[1:2]
    if show_argv:
        del rest[1]
    if len(rest) < 3 or rest[1] != "--" or rest[0].startswith("-"):
        return _fail(USAGE, 2)
    name, command = rest[0], " ".join(rest[2:])
    refusal = sandbox.refuse_if_root()
    if refusal is not None:
        return _fail(refusal)
    # Exec'd by the CLI, this process holds no secret and runs no thread: its own fork builds
    # the call's overlays, not a maker interpreter started for one call (docs/security.md).
    # Forked by the daemon's forkserver (supervisor/control/sandboxsock.py) it is not dumpable
    # and its memory is the forkserver's, which other runs' requests passed through: it stays
    # so, and the maker builds the overlays, as for a worker (tests/supervisor/
    # test_sandbox_daemon.py::test_a_call_through_the_daemon_prints_and_exits_as_without_one).
    if _dumpable():
        sandbox.make_overlays_in_process()

    p = paths()
    entry = scan(p).get(name)
    if entry is None:
        return _fail(f"no routine named {name!r}")
    if entry.routine is None:
        errors = "; ".join(str(e) for e in entry.errors)
        return _fail(f"routine {name!r} is invalid: {errors}")
    routine = entry.routine
    try:
        settings = load_config(p.config_file).sandbox
    except RoutineInvalid as exc:
        return _fail(f"config.toml: {exc}")
    scratch_root = p.sandbox_scratch_root / routine.name
    scratch_root.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="sandbox-", dir=scratch_root))
    try:
        try:
            # Its write folders as a run of it would get them: "everything" only while signed.
            unasked, _ = effective_permissions(routine, p.allowed_signers)
            policy = shell_policy_for(
                routine, paths=p, scratch_dir=scratch, settings=settings, permissions=unasked
            )
        except ValueError as exc:
            return _fail(f"the sandbox refused to start: {exc}")
        if show_argv:
            return _print_argv(policy, command)
        result = sandbox.run_shell(command, policy, timeout_sec=shell_timeout_for(routine))
    finally:
        tidy(scratch)
    sys.stdout.write(result.stdout)
    sys.stdout.flush()
    sys.stderr.write(result.stderr)
    if result.stdout_truncated or result.stderr_truncated:
        print(
            "vinos-routine: output cut at the cap (stdout 32 KB, stderr 8 KB), as the model "
            "would see it",
            file=sys.stderr,
        )
    if result.error is not None:
        return _fail(result.error)
    if result.timed_out:
        timeout = shell_timeout_for(routine)
        print(f"vinos-routine: killed at the {timeout:g} s timeout", file=sys.stderr)
        return TIMEOUT_STATUS
    return 1 if result.exit_code is None else result.exit_code


def _dumpable() -> bool:
    # The files in /proc/PID of a process that is not dumpable are root's (proc(5)): a stat,
    # not ctypes' prctl, which would cost the exec'd path an import.
    return os.stat("/proc/self/status").st_uid == os.getuid()


def _print_argv(policy: sandbox.ShellPolicy, command: str) -> int:
    host = sandbox.Host.probe(policy)
    try:
        argv = sandbox.build_argv(policy, host, 3, command)
    except ValueError as exc:
        return _fail(f"the sandbox refused to start: {exc}")
    print(argv_line(argv))
    print("vinos-routine: fd 3 carries the seccomp filter (BPF)", file=sys.stderr)
    return 0


def tidy(scratch: Path, what: str = "command", *, keep: bool = True) -> None:
    """Remove the scratch dir when the `what` left nothing in it; else say where it is
    (`vinos-routine sandbox` is for debugging: the person who typed the command may want its
    files). With `keep=False` (an approved action) it goes whatever is in it, as a run's
    scratch dir does; a failure is said, never silent."""
    try:
        os.rmdir(scratch)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    if keep:
        print(f"vinos-routine: the {what}'s files are in {scratch}", file=sys.stderr)
        return
    from routines.store import remove_tree

    try:
        remove_tree(scratch)
    except OSError as exc:
        print(f"vinos-routine: could not remove the {what}'s scratch dir {scratch}: {exc}",
              file=sys.stderr)  # fmt: skip


def _fail(message: str, code: int = 1) -> int:
    print(f"vinos-routine: {message}", file=sys.stderr)
    return code


def _main() -> int:
    try:
        code = main()
        sys.stdout.flush()  # here, not at exit, where a closed pipe is a printed traceback
        return code
    except BrokenPipeError:
        # `sandbox NAME --argv -- CMD | head`: the reader left, which is not an error (as in
        # the CLI's own main); later writes and the final flush go to /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(_main())
