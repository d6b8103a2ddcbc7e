"""`vinos-routine mcp`: vinos-routine as an MCP server over stdio, for an assistant (Claude
Code, goose) helping a person with their routines.

Its tools may look and propose, never decide: a draft is always written disabled, only a
routine the person enabled may be run, nothing is ever enabled, an enabled routine's file is
never written, no proposal is approved, and the outputs and history of a routine are shown
only when config.toml names it in `[mcp_server].expose` (default: none).
tests/cli/test_cli_mcp_server.py drives it with the SDK's own client.

Each tool is a plain function here (a dict or list in, JSON-able out, `Refused` for a
refusal); `serve()` registers them with the SDK's MCPServer. This module is imported only by
the `mcp` command: the daemon never loads the SDK.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "Refused",
    "draft_routine",
    "explain_schedule",
    "list_routines",
    "routine_history",
    "run_routine",
    "serve",
    "validate_routine",
]


class Refused(Exception):
    """What the assistant may not do, and why (an error result, never a crash)."""


def _exposed() -> tuple[str, ...]:
    from routines.spec.paths import paths
    from supervisor.fleet.view import config_or_default

    return config_or_default(paths()).mcp_expose


def list_routines() -> list[dict[str, Any]]:
    """Every routine file: name, on or off, valid, schedule, last status (no outputs)."""
    from supervisor.overview import collect

    keys = ("name", "kind", "enabled", "valid", "schedule", "next_run", "last_status", "errors")
    return [{k: row.as_json()[k] for k in keys} for row in collect()]


def routine_history(name: str, limit: int = 20) -> list[dict[str, Any]]:
    """The newest runs of an exposed routine, with their summaries."""
    from contextlib import closing

    from routines.query.runs import run_history
    from routines.spec.paths import paths
    from supervisor.fleet.view import cli_ledger

    if name not in _exposed():
        raise Refused(
            f"the history and outputs of {name!r} are not exposed: the person can add it to "
            "[mcp_server].expose in config.toml"
        )
    with closing(cli_ledger(paths())) as ledger:
        rows = run_history(ledger, name, max(1, min(limit, 200)), days=False).runs
    keep = ("run_id", "status", "outcome", "trigger", "started_at", "finished_at", "detail")
    return [{k: _plain(getattr(r, k, None)) for k in keep} for r in rows]


def _plain(value: object) -> object:
    return value.value if hasattr(value, "value") else value


def explain_schedule(expression: str, timezone: str = "UTC", count: int = 5) -> dict[str, Any]:
    """A cron, OnCalendar or plain-language schedule in words, with its next fires."""
    from routines.schedule import ScheduleError, explain
    from routines.spec import ScheduleSpec

    spec = _spec(expression, timezone, ScheduleSpec)
    try:
        schedule, slots, note = explain(spec, datetime.now(UTC), max(1, min(count, 50)))
    except ScheduleError as exc:
        raise Refused(str(exc)) from None
    out: dict[str, Any] = {
        "description": schedule.description,
        "next": [s.local.isoformat() for s in slots],
        "oncalendar": list(schedule.oncalendar),
    }
    if note:
        out["note"] = note
    return out


def _spec(expression: str, timezone: str, cls: Any) -> Any:
    text = expression.strip()
    if text.startswith("every ") or text.startswith("daily "):
        return cls(every=text, timezone=timezone)
    if len(text.split()) == 5 or text.startswith("@"):
        return cls(cron=text, timezone=timezone)
    return cls(oncalendar=text, timezone=timezone)


def validate_routine(name: str, toml: str) -> dict[str, Any]:
    """Whether `toml` is a valid routine file named NAME.toml, with every error."""
    from routines.spec.checks import RoutineInvalid
    from routines.spec.loader import load_text
    from routines.spec.paths import paths

    path = paths().routines_dir / f"{name}.toml"
    try:
        routine = load_text(toml, path)
    except RoutineInvalid as exc:
        return {
            "ok": False,
            "errors": [str(p) for p in exc.errors],
            "warnings": [str(p) for p in exc.problems if p.warning],
        }
    return {"ok": True, "errors": [], "warnings": list(routine.warnings)}


def draft_routine(name: str, title: str, summary: str, toml: str) -> dict[str, Any]:
    """Write a valid routine as a disabled draft; the person reviews and enables it.

    `title`: a short title, at most 60 characters ("Weekly repo digest"). `summary`: one
    plain sentence saying what the person gets ("A digest of the week's commits in
    ~/src/site."). Both are tidied and written as [routine].title and [routine].description;
    the TOML holds the rest (the instruction in [agent].system). A title another routine
    has already is refused: update that routine (draft it again under its name) instead."""
    from routines.spec import NAME_RE
    from routines.spec.checks import RoutineInvalid
    from routines.spec.loader import load_text
    from routines.spec.paths import paths
    from routines.spec.shape import ShapeProblem, tidy_summary, tidy_title

    if not NAME_RE.fullmatch(name):
        raise Refused(f"{name!r} is not a routine name (lowercase letters, digits and '-')")
    try:
        title, summary = tidy_title(title), tidy_summary(summary)
    except ShapeProblem as exc:
        raise Refused(str(exc)) from None
    p = paths()
    path = p.routines_dir / f"{name}.toml"
    text = _with_shape(toml, title, summary)
    try:
        routine = load_text(text, path)
    except RoutineInvalid as exc:
        raise Refused("the draft is invalid:\n" + "\n".join(str(e) for e in exc.errors)) from None
    if routine.enabled:
        raise Refused("a draft is written disabled: remove `enabled = true`; the person enables it")
    if why := _taken(name) or _title_taken(name, title):
        raise Refused(why)
    _write(path, text)
    return {
        "written": str(path),
        "title": title,
        "summary": summary,
        "enabled": False,
        "next": f"vinos-routine enable {name}",
    }


def _with_shape(toml: str, title: str, summary: str) -> str:
    """`toml` with [routine].title and .description set to the tidied arguments (refused
    when the TOML sets them itself: one source for each)."""
    import json
    import re
    import tomllib

    try:
        doc = tomllib.loads(toml)
    except tomllib.TOMLDecodeError:
        return toml  # load_text reports it, with the line
    table = doc.get("routine")
    if isinstance(table, dict) and ("title" in table or "description" in table):
        raise Refused(
            "give the title and the summary as draft_routine's arguments, not as "
            "[routine].title or [routine].description in the TOML"
        )
    # A TOML basic string: JSON's escapes are TOML's for every character (non-ASCII kept).
    lines = f"title = {json.dumps(title, ensure_ascii=False)}\n"
    lines += f"description = {json.dumps(summary, ensure_ascii=False)}\n"
    header = re.search(r"^[ \t]*\[routine\][ \t]*(#.*)?$", toml, re.MULTILINE)
    if header is None:
        return f"[routine]\n{lines}\n{toml}"
    end = header.end()
    return f"{toml[:end]}\n{lines}{toml[end:].removeprefix(chr(10))}"


def _same(written: str, title: str) -> bool:
    """Whether a routine's own title is `title` once tidied alike, ignoring case."""
    return " ".join(written.split()).rstrip(".").rstrip().casefold() == title.casefold()


def _title_taken(name: str, title: str) -> str | None:
    """Refused: another routine already has this title (ignoring case), so the agent is told
    to update that one rather than add a second routine doing the same."""
    from routines.spec.paths import paths
    from routines.spec.registry import scan

    for entry in scan(paths()).entries.values():
        other = entry.routine
        if entry.name != name and other is not None and _same(other.title, title):
            return (
                f"{entry.name} already has the title {other.title!r}: update {entry.name} "
                "instead (draft it again under that name)"
            )
    return None


def _taken(name: str) -> str | None:
    """Why a draft may not be written as NAME, or None. Nothing an agent drafts starts enabled
    (docs/mcp.md), so the name must carry no state of the person's: no system routine of
    that name (a user file would take its place, and turn it off), no enable or disable of a
    routine of that name left in the ledger (the person's, for another file), and no file of
    theirs that is on (or unreadable: assumed on). What is left is the agent's own earlier
    draft, which it may redraft (tests/cli/test_cli_mcp_server.py)."""
    from contextlib import closing

    from routines.spec import Origin
    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from supervisor.fleet.view import cli_ledger

    p = paths()
    system = p.system_dir / f"{name}.toml"
    if os.path.lexists(system):
        return (
            f"{name} is a system routine ({system}); a draft of that name would take its place: "
            "choose another name"
        )
    entry = scan(p).get(name)
    mine = entry is not None and entry.origin is Origin.USER
    if mine and (entry is None or entry.routine is None or entry.stale or _enabled(name)):
        return f"{name} is enabled: its file is the person's, never edited from here"
    if not p.ledger.exists():
        return None
    with closing(cli_ledger(p)) as ledger:
        state = ledger.state(name)
    if state.overridden or state.disabled_reason:
        on = "on" if state.enabled_override else "off"
        return (
            f"{name} was turned {on} by the person (vinos-routine enable/disable); that state is "
            "theirs, never carried to a draft: choose another name"
        )
    return None


def _enabled(name: str) -> bool:
    from contextlib import closing

    from routines.ledger import is_enabled
    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from supervisor.fleet.view import cli_ledger

    p = paths()
    entry = scan(p).get(name)
    if entry is None or entry.routine is None:
        return False  # no routine of that name in force: nothing to run
    if not p.ledger.exists():
        return entry.routine.enabled
    with closing(cli_ledger(p)) as ledger:
        return is_enabled(ledger.states(), entry.routine)


def _write(path: Path, text: str) -> None:
    """Temp file + rename, 0600: never half a file, never through a link planted there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.draft-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def run_routine(name: str) -> dict[str, Any]:
    """Start a run of a routine the person enabled, through the daemon (its limits, fence
    and ledger apply); its detail and output text only when the routine is exposed."""
    from routines.spec.paths import paths
    from supervisor.cli.client import DaemonError, try_daemon

    if not _enabled(name):
        raise Refused(f"{name} is not enabled: only a routine the person enabled may be run")
    client = try_daemon(paths())
    if client is None:
        raise Refused("the daemon is not running: vinos-routine runs routines only through it")
    with client:
        try:
            fin = client.request("run", {"name": name, "detach": False, "debug": False})
        except DaemonError as exc:
            raise Refused(str(exc)) from None
    out = {k: fin.get(k) for k in ("run_id", "status", "outcome")}
    if name in _exposed():
        out["detail"] = fin.get("detail")
        if fin.get("output"):
            out["output"] = _read_output(str(fin["output"]))
    return out


OUTPUT_CAP = 32 * 1024  # of an output's text handed to the assistant


def _read_output(path: str) -> str:
    """The output file's text, capped; never through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return f"(the output could not be read: {exc.strerror})"
    with os.fdopen(fd, "rb") as f:
        return f.read(OUTPUT_CAP).decode("utf-8", "replace")


def serve() -> None:
    """Serve the tools over stdio until the client goes away."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server: Any = MCPServer(
        "vinos-routine",
        instructions="Look at, explain, validate and draft the person's scheduled routines. "
        "Drafts are written disabled; the person enables them.",
    )

    def tool(fn: Any) -> None:
        def call(**kwargs: Any) -> Any:
            try:
                return fn(**kwargs)
            except Refused as exc:
                raise ToolError(str(exc)) from None

        call.__name__, call.__doc__ = fn.__name__, fn.__doc__
        call.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
        call.__annotations__ = dict(fn.__annotations__)
        server.tool()(call)

    for fn in (
        list_routines,
        routine_history,
        explain_schedule,
        validate_routine,
        draft_routine,
        run_routine,
    ):
        tool(fn)
    server.run("stdio")
