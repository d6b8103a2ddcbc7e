"""The sandbox: the whitelist, the bwrap argv builder, seccomp, the shell runner, the read tool.

This package imports nothing of ours (pyproject.toml's import contracts, `lint-imports` in make
lint).
What the worker uses:

    reason = check_shell(declared, command)         # None = allowed
    result = run_shell(command, policy, timeout_sec=30)   # ShellResult; never raises
    reason = check_read(declared, pattern)
    files = read_files(pattern, declared, home=home, budget=budget)   # JSON-able dict

`routine_policy(...)` builds the ShellPolicy for one routine; `build_argv(policy, host, fd)`
is the pure builder under it, with `Host.probe()` reading the machine. `probe()` says whether
shell calls can run here at all (cached); `refuse_if_root()` gives ROOT_REFUSAL as uid 0.
"""

from sandbox.argv import build_argv
from sandbox.host import Host, PathKind
from sandbox.overlay import make_overlays_in_process
from sandbox.policy import Limits, ShellPolicy, UnsafeValue, routine_policy
from sandbox.probe import ROOT_REFUSAL, Probe, probe, refuse_if_root
from sandbox.readtool import ReadBudget, read_files
from sandbox.runner import STDERR_CAP, STDOUT_CAP, ShellResult, open_dir_nofollow, run_shell
from sandbox.seccomp import SeccompUnavailable
from sandbox.whitelist import check_read, check_shell

__all__ = [
    "ROOT_REFUSAL",
    "STDERR_CAP",
    "STDOUT_CAP",
    "Host",
    "Limits",
    "PathKind",
    "Probe",
    "ReadBudget",
    "SeccompUnavailable",
    "ShellPolicy",
    "ShellResult",
    "UnsafeValue",
    "build_argv",
    "check_read",
    "check_shell",
    "make_overlays_in_process",
    "open_dir_nofollow",
    "probe",
    "read_files",
    "refuse_if_root",
    "routine_policy",
    "run_shell",
]
