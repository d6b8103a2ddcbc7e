"""`vinos-routine validate [PATH...]`: check routine files without running anything."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["connect_rows", "register"]

EXAMPLE = """example:
  vinos-routine validate ~/.vinos/routines/day-brief.toml
  vinos-routine validate            # every routine file, user and system
  vinos-routine validate --json a.toml b.toml
  vinos-routine validate ~/.vinos/routines/config.toml   # the daemon's settings
  vinos-routine validate --connect inbox.toml   # start its MCP servers, list their tools
  vinos-routine validate --connect --with-credentials inbox.toml   # as a run would start them
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "validate",
        help="check routine files (or config.toml): every error, or OK and what each may do",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="*", type=Path, help="routine files (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object per file")
    p.add_argument(
        "--connect",
        action="store_true",
        help="start each MCP server in its sandbox, with no credential and no network, and "
        "list the tools it offers",
    )
    p.add_argument(
        "--with-credentials",
        action="store_true",
        help="with --connect: start the servers with the credentials and network the card "
        "shows (the card is printed first, and on a terminal you are asked)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from supervisor.cli.present import print_json_lines

    if args.with_credentials and not args.connect:
        from supervisor.cli.present import die

        return die("--with-credentials goes with --connect", 2)
    files: list[Path] = list(args.paths)
    if not files:
        p = paths()
        files = [e.path for e in scan(p).entries.values()]
        if not files and not args.json:
            print(f"no routine files in {p.routines_dir} or {p.system_dir}")
    results = _results(files)
    if args.connect:
        if args.with_credentials and not _consent(results, args.json):
            print("nothing started")
            return 1
        _connect(results, args.with_credentials)
    if args.json:
        print_json_lines([{k: v for k, v in r.items() if k != "card_text"} for r in results])
    else:
        _print_text(results)
    return 0 if all(r["ok"] for r in results) else 1


def _results(files: list[Path]) -> list[dict[str, Any]]:
    """Each file's result: its errors and warnings, or OK with its signature and card."""
    from routines.spec.checks import RoutineInvalid

    results: list[dict[str, Any]] = []
    for path in files:
        try:
            warnings, errors, signature, card = _check(path)
        except RoutineInvalid as exc:
            results.append(
                {
                    "file": str(path),
                    "ok": False,
                    "errors": [str(p) for p in exc.errors],
                    "warnings": [str(p) for p in exc.problems if p.warning],
                }
            )
        else:
            results.append(
                {
                    "file": str(path),
                    "ok": not errors,
                    "errors": errors,
                    "warnings": list(warnings),
                    **signature,
                    **card,
                }
            )
    _cycles(results, files)
    return results


def _print_text(results: list[dict[str, Any]]) -> None:
    from routines.safetext import one_line

    # File names and what a file says are untrusted text: one line each, escapes shown.
    for res in results:
        for warning in res["warnings"]:
            print(one_line(warning))
        if res["ok"]:
            print(one_line(f"{res['file']}: OK"))
            for line in res.get("card_text", ()):
                print(line)
        if res.get("signed"):
            print(one_line(f"{res['file']}: {res['signed']}"))
        for error in res["errors"]:
            print(one_line(error))
        for row in res.get("mcp", ()):
            print(one_line(_server_line(row)))


def _cycles(results: list[dict[str, Any]], files: list[Path]) -> None:
    """Fail each checked file on a cycle of `after` triggers, naming it: over the whole set
    of routine files, with the files checked standing for those of their names."""
    from routines.spec.checks import RoutineInvalid
    from routines.spec.loader import load_file
    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from routines.spec.trigger import cycle_problem, find_cycle

    graph: dict[str, tuple[str, ...]] = {}
    for entry in scan(paths()).entries.values():
        try:
            r = load_file(entry.path)  # the file as it is now, not the registry's last good one
        except RoutineInvalid:
            continue
        graph[r.name] = r.trigger.after if r.trigger else ()
    for res, path in zip(results, files, strict=True):
        if not res["ok"] or path.name == "config.toml":
            continue
        r = load_file(path)
        graph[r.name] = r.trigger.after if r.trigger else ()
    while (cycle := find_cycle(graph)) is not None:
        for res in results:
            name = Path(res["file"]).name.removesuffix(".toml")
            if name in cycle:
                res["ok"] = False
                res["errors"].append(f"{res['file']}: [trigger].after: {cycle_problem(cycle)}")
        graph.pop(cycle[0])


def _consent(results: list[dict[str, Any]], quiet: bool) -> bool:
    """Before servers start with the person's credentials and network: the card of each file,
    printed on stderr (stdout stays the report), and on a terminal the question. Without a
    terminal the flag is the consent, given after the card was printed."""
    import sys

    from routines.safetext import one_line
    from supervisor.cli.present import ask_yes

    for res in results:
        if res["ok"] and res.get("card_text"):
            print(one_line(f"{res['file']} may:"), file=sys.stderr)
            for line in res["card_text"]:
                print(line, file=sys.stderr)
    if quiet or not sys.stdin.isatty():
        return True
    return ask_yes("Start its MCP servers with these credentials and this network?", default=False)


def connect_rows(flags: list[str], files: list[str]) -> list[dict[str, Any]]:
    """The rows `python -m worker.mcpconnect FLAGS -- FILES` prints, one per MCP server or
    local provider (this side imports no worker code); `vinos-routine doctor` asks it too,
    with `--providers`."""
    import json
    import os
    import subprocess
    import sys

    from supervisor.engine.spawn import package_root  # one place knows where our packages are

    argv = [sys.executable, "-P", "-m", "worker.mcpconnect", *flags, "--", *files]
    env = {**os.environ, "PYTHONPATH": package_root()}
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    return [json.loads(line) for line in done.stdout.splitlines()]


def _connect(results: list[dict[str, Any]], with_credentials: bool) -> None:
    """Each valid file's MCP servers, started by `python -m worker.mcpconnect` (this side
    imports no worker code), with no credential and no network unless `with_credentials`;
    a server that fails or lacks a whitelisted tool fails the file."""
    files = [r["file"] for r in results if r["ok"]]
    if not files:
        return
    flag = ["--with-credentials"] if with_credentials else []
    by_file: dict[str, list[dict[str, Any]]] = {}
    for row in connect_rows(flag, files):
        by_file.setdefault(row["file"], []).append(row)
    for res in results:
        rows = by_file.get(res["file"], [])
        if rows:
            res["mcp"] = rows
            res["ok"] = res["ok"] and all(r["ok"] for r in rows)


def _server_line(row: dict[str, Any]) -> str:
    if "provider" in row:  # the local leg's server (worker.mcpconnect.provider_rows)
        head = f"{row['file']}: provider {row['provider']}"
        return f"{head}: {row['error']}" if row.get("error") else f"{head}: shows the tools"
    head = f"{row['file']}: MCP server {row['server']}"
    if not row.get("credentials"):
        head += " (started with no credential and no network)"
    if row.get("error"):
        return f"{head}: could not connect: {row['error']}"
    line = f"{head}: offers {', '.join(row['tools']) or 'no tools'}"
    if row["unmatched"]:
        line += f"; whitelist entries matching none: {', '.join(row['unmatched'])}"
    return line


def _check(
    path: Path,
) -> tuple[tuple[str, ...], list[str], dict[str, Any], dict[str, Any]]:
    """A routine file's warnings, never-list errors, signature and capability card (JSON
    `card`, text `card_text`), or nothing for a valid config.toml; raises RoutineInvalid."""
    from routines.spec.checks import Problem, RoutineInvalid
    from routines.spec.config import load_config
    from routines.spec.loader import load_file

    if path.name != "config.toml":
        from routines.spec.shape import missing_shape
        from supervisor.engine.notify import unshown

        routine = load_file(path)
        warnings, signature = _signature(path, routine)
        if why := unshown(routine):
            warnings = (*warnings, f"{path}: {why}")
        # A routine written by hand: the title and summary a draft must have, asked for here.
        shape = missing_shape(routine.title, routine.description)
        warnings = (*warnings, *(f"{path}: {w}" for w in shape))
        if why := _premium_key(routine):
            warnings = (*warnings, f"{path}: [agent].route: {why}")
        errors = [f"{path}: {e}" for e in _never_problems(routine)]
        if routine.schedule.form == "once":
            from routines.spec.loader import once_past

            # Where the person checks what they wrote, a past `once` is an error (the loader
            # only warns: a file must not turn invalid as time passes).
            if past := once_past(routine.schedule):
                errors.append(f"{path}: [schedule].once: {past}")
                warnings = tuple(w for w in (*warnings,) if "[schedule].once" not in w)
                routine_warnings = tuple(
                    w for w in routine.warnings if "[schedule].once" not in str(w)
                )
                return (*routine_warnings, *warnings), errors, signature, _card(routine)
        return (*routine.warnings, *warnings), errors, signature, _card(routine)
    if not path.is_file():  # load_config reads a missing file as all defaults
        raise RoutineInvalid([Problem(path.name, "", "cannot read: no such file")])
    bwrap = load_config(path).sandbox.bwrap
    from sandbox.binaries import BinaryRefused, check_binary

    try:
        check_binary(bwrap)
    except BinaryRefused as exc:  # valid TOML, but every shell tool would fail closed
        return (), [f"{path}: {exc}"], {}, {}
    return (), [], {}, {}


def _premium_key(routine: Any) -> str | None:
    """`auto` that can escalate with no premium key: said here, where the file is checked."""
    from routines.spec.checks import RoutineInvalid
    from routines.spec.config import load_config
    from routines.spec.paths import paths
    from supervisor.hostcheck import premium_key_missing

    p = paths()
    try:
        providers = load_config(p.config_file).providers
    except RoutineInvalid:  # config.toml's own errors are validate config.toml's to show
        providers = {}
    return premium_key_missing(p, routine, providers)


def _card(routine: Any) -> dict[str, Any]:
    from supervisor.cli.commands.capabilities import card, card_lines, on_this_host

    lines = card(routine, on_this_host(routine))
    # Always printed: what a routine may do is the one thing a person checks a file for, and
    # "OK" alone said nothing of it (tests/cli/test_cli_validate.py).
    return {
        "card": [{"label": x.label, "text": x.text} for x in lines],
        "card_text": card_lines(lines),
    }


def _signature(path: Path, routine: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The signature's warning (an invalid one, or auto_approve unsigned) and its JSON: the
    bytes checked are the ones just parsed."""
    from routines.signing import auto_approve_requested, signature_note, verify_routine
    from routines.spec.paths import paths

    check = verify_routine(path, paths().allowed_signers, data=routine.text.encode())
    auto = auto_approve_requested(routine)
    note = signature_note(check, auto, routine.name)
    out: dict[str, Any] = {"signature": check.state.value, "signer": check.principal}
    if note is None:
        return (), out
    text, warning = note
    if warning:
        return (f"{path}: {text}",), out
    return (), {**out, "signed": text}


def _never_problems(routine: Any) -> list[str]:
    """`home` entries and `read:` globs that reach config.toml's [sandbox].never additions
    (the loader checked the built-in list; config can grow it after a file was written)."""
    import os

    from routines.spec.checks import RoutineInvalid
    from routines.spec.config import load_config
    from routines.spec.never import home_problem, never_paths, read_problem
    from routines.spec.paths import paths

    p = paths()
    try:
        sandbox = load_config(p.config_file).sandbox
    except RoutineInvalid:
        return []  # the daemon refuses that config anyway, with its own errors
    extra = (*sandbox.never, *sandbox.masks)
    if not extra:
        return []
    home = os.path.realpath(Path.home())
    never = never_paths(home, os.path.realpath(p.home), extra)
    table = "agent" if routine.agent is not None else "command"
    out = []
    for i, entry in enumerate(routine.home):
        problem = home_problem(entry, home, never, extra)
        if problem:
            out.append(f"[{table}].home[{i}]: {problem} (config.toml [sandbox].never)")
    own = (os.path.realpath(p.workspace(routine.name)),)
    for i, tool in enumerate(routine.agent.tools if routine.agent else ()):
        if str(tool).startswith("read:"):
            problem = read_problem(tool.value, home, never, own, extra)
            if problem:
                out.append(f"[agent].tools[{i}]: {problem} (config.toml [sandbox].never)")
    return out
