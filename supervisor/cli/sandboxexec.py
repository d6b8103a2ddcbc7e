"""`vinos-routine sandbox NAME [--argv] -- CMD`'s one step on this side: replace this process
with `python -P -m worker.sandboxcli`, which does the work (the supervisor package never
imports the worker or the sandbox: the import contracts in pyproject.toml).

The thin client (supervisor/cli/thinclient.py) execs from here before argparse or any command
module is imported, for the exact form `sandbox NAME [--argv] -- CMD...`; any other form
(`--help`, a missing `--`) goes through the full parser (supervisor/cli/commands/sandbox.py),
which execs through here too. Only os and sys are imported: this is the whole of the CLI's
share of `sandbox`'s start (bench/bench_sandboxcli.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from supervisor.engine.pkgroot import package_root

__all__ = ["exact_form", "exec_sandboxcli"]


def exact_form(words: Sequence[str]) -> tuple[str, bool, list[str]] | None:
    """(NAME, --argv given, CMD words) for `NAME [--argv] -- CMD...` (the words after
    `sandbox`), or None: the full parser reads it."""
    if not words or words[0].startswith("-"):
        return None
    name, rest = words[0], list(words[1:])
    show_argv = rest[:1] == ["--argv"]
    if show_argv:
        rest = rest[1:]
    if rest[:1] != ["--"] or len(rest) < 2:
        return None
    return name, show_argv, rest[1:]


def exec_sandboxcli(name: str, show_argv: bool, words: Sequence[str]) -> None:
    """Replace this process with worker.sandboxcli for NAME and CMD; never returns (OSError
    if the interpreter cannot be executed)."""
    # -P: keep the current directory off sys.path, or a `worker` package there would run.
    argv = [sys.executable, "-P", "-m", "worker.sandboxcli", name]
    if show_argv:
        argv.append("--argv")
    argv += ["--", *words]
    # What main() sets for every command (supervisor/cli/main.py), which this path skips: the
    # scratch dir and what the command writes are the user's alone, as in a worker's run.
    os.umask(0o077)
    root = package_root()
    env = dict(os.environ)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    env["PYTHONPATH"] = os.pathsep.join([root, *rest])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
