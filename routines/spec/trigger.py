"""`[trigger]` and `[gate]`: what starts a routine besides the clock, and the pre-check that
may end a run before any model call.

    [trigger]
    after = ["research-bot"]        # when that routine's run ends ...
    on = ["done", "needs-attention"]  # ... with one of these outcomes (default: done)
    watch = ["~/Downloads/*.pdf"]   # when a matching file is written (inside what it may read)
    fire = true                     # `vinos-routine fire NAME` may start it

    [gate]
    run = "test -n \"$(ls ~/Inbox)\""  # exit 0: go; exit 1: nothing to do; else: failed

Pure: TOML values in, typed specs and problems out. `find_cycle` is the one place a chain
of `after` is judged (the registry refuses a cycle at load, `validate` over the whole set).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from routines.runs import Outcome
from routines.spec.checks import Bad, Check, Reader, boolean, nonempty_string, positive_int
from routines.spec.routine import (
    DEFAULT_GATE_TIMEOUT,
    NAME_RE,
    AgentSpec,
    CommandSpec,
    GateSpec,
    TriggerSpec,
)

__all__ = [
    "GATE_KEYS",
    "INPUT_CAP",
    "TRIGGER_KEYS",
    "GateSpec",
    "TriggerSpec",
    "check_watch",
    "cycle_problem",
    "find_cycle",
    "read_gate",
    "read_trigger",
    "watch_folder",
    "watch_outside",
    "watch_root",
]

# Bytes of an event's input a run is given: a fire call's (refused past it, never cut), an
# upstream output's tail (supervisor/engine/triggers.py).
INPUT_CAP = 16 * 1024


def _names(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise Bad('a non-empty array of routine names such as ["research-bot"]')
    for v in value:
        if not NAME_RE.fullmatch(v):
            raise Bad(f"routine names: lowercase letters, digits and '-' (not {v!r})")
    return tuple(dict.fromkeys(value))


def _outcomes(value: object) -> tuple[Outcome, ...]:
    choices = ", ".join(f'"{o.value}"' for o in Outcome)
    if not isinstance(value, list) or not value:
        raise Bad(f"a non-empty array of outcomes ({choices})")
    try:
        return tuple(dict.fromkeys(Outcome(v) for v in value))
    except ValueError:
        raise Bad(f"an array of outcomes ({choices})") from None


def _globs(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise Bad('a non-empty array of paths or globs such as ["~/Downloads/*.pdf"]')
    for v in value:
        if not v.startswith(("~/", "/")):
            raise Bad(f'absolute paths or paths under "~/" (not {v!r})')
        if any(part in (".", "..") for part in v.split("/")):
            # "~/notes/../.ssh/*" is below ~/notes as text and watches ~/.ssh: a watch is
            # judged on its text (`watch_outside`), so the text must be the path
            # (tests/supervisor/test_redteam_watch.py).
            raise Bad(f'a path without "." or ".." parts (not {v!r})')
    return tuple(dict.fromkeys(value))


TRIGGER_KEYS: dict[str, Check] = {
    "after": _names,
    "on": _outcomes,
    "watch": _globs,
    "fire": boolean,
}
GATE_KEYS: dict[str, Check] = {"run": nonempty_string, "timeout_sec": positive_int}


def read_trigger(r: Reader, doc: Mapping[str, Any], name: str | None) -> TriggerSpec | None:
    """The [trigger] table, or None when the file has none; problems go to `r`."""
    if "trigger" not in doc:
        return None
    t = r.table(doc, "trigger")
    raw = doc.get("trigger")
    if isinstance(raw, dict) and not any(k in raw for k in ("after", "watch", "fire")):
        r.error(
            "[trigger]",
            "expected at least one of after, watch or fire, found none "
            '(e.g. after = ["research-bot"])',
        )
        return None
    if "on" in t and "after" not in t:
        r.error("[trigger].on", "only with after = [...]: it says which of its outcomes count")
    if name is not None and name in t.get("after", ()):
        r.error("[trigger].after", f'"{name}" is this routine: a routine cannot follow itself')
    if "fire" in t and not t["fire"] and not (t.get("after") or t.get("watch")):
        r.error("[trigger].fire", "false with no after or watch leaves nothing to trigger it")
    return TriggerSpec(
        after=t.get("after", ()),
        on=t.get("on", (Outcome.DONE,)),
        watch=t.get("watch", ()),
        fire=t.get("fire", False),
    )


def read_gate(r: Reader, doc: Mapping[str, Any]) -> GateSpec | None:
    if "gate" not in doc:
        return None
    t = r.table(doc, "gate")
    raw = doc.get("gate")
    if isinstance(raw, dict) and "run" not in raw:
        r.error("[gate].run", 'required: the check to run, e.g. run = "test -s ~/inbox.txt"')
        return None
    if "run" not in t:
        return None
    return GateSpec(t["run"], t.get("timeout_sec", DEFAULT_GATE_TIMEOUT))


_GLOB_CHARS = frozenset("*?[")


def _literal_dir(pattern: str) -> str:
    """The part of a path or glob before its first glob character, cut at a '/'."""
    parts = pattern.split("/")
    out: list[str] = []
    for part in parts:
        if _GLOB_CHARS & set(part):
            break
        out.append(part)
    else:
        return pattern
    return "/".join(out)


def watch_folder(pattern: str) -> str:
    """The folder a `watch` glob's inotify watch is on: its part before the first glob
    character, or a plain path's folder (a watch is on a folder, not below it)."""
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        if _GLOB_CHARS & set(part):
            return "/".join(parts[:i]) or "/"
    return pattern.rsplit("/", 1)[0] or "/"


def _within(path: str, root: str) -> bool:
    root = root.rstrip("/")
    return path == root or path.startswith(root + "/")


def watch_root(pattern: str, read_patterns: Sequence[str], homes: Sequence[str]) -> str | None:
    """The grant the `watch` glob `pattern` lies inside (as written, `~` included), or None.

    Inside means: one of its `read:` globs verbatim (that glob's literal folder is the root),
    or below a `home` entry, or below the literal folder of a `read:` glob that reaches
    everything under it (`.../**`). Judged on the text as written, so the card says exactly
    what was declared; the daemon checks the same root again on the resolved folder
    (supervisor/engine/filewatch.py), so a link on the way never takes a watch outside it."""
    if pattern in read_patterns:
        return watch_folder(pattern)
    for h in homes:
        if _within(pattern, h):
            return h
    for p in read_patterns:
        if p.endswith("/**") or p.endswith("/**/*"):
            root = _literal_dir(p)
            if _within(_literal_dir(pattern), root) and _within(pattern, root):
                return root
    return None


def watch_outside(pattern: str, read_patterns: Sequence[str], homes: Sequence[str]) -> str | None:
    """Why the `watch` glob `pattern` is not inside what the routine may read, or None."""
    if watch_root(pattern, read_patterns, homes) is not None:
        return None
    return (
        f'"{pattern}" is outside what this routine may read: add "read:{pattern}" to '
        "[agent].tools, or its folder to home = [...]"
    )


def check_watch(
    r: Reader, trigger: TriggerSpec | None, agent: AgentSpec | None, command: CommandSpec | None
) -> None:
    """Each `watch` glob outside what the routine may read, as an error into `r`."""
    if trigger is None:
        return
    reads = agent.read_patterns if agent is not None else ()
    homes = agent.home if agent is not None else command.home if command else ()
    for i, pattern in enumerate(trigger.watch):
        if problem := watch_outside(pattern, reads, homes):
            r.error(f"[trigger].watch[{i}]", problem)


def find_cycle(after: Mapping[str, Sequence[str]]) -> list[str] | None:
    """The first cycle of `after` edges (follower → the routines it follows), as names from
    a routine back to itself (["a", "b", "a"]), or None. Deterministic: names in sorted
    order, so the same set always names the same cycle. Iterative: a long chain of
    followers never meets Python's recursion limit. A name not in `after` follows nothing,
    so it is on no cycle."""
    done: set[str] = set()
    for start in sorted(after):
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        todo: list[list[str]] = [sorted(n for n in after[start] if n in after)]
        while path:
            if not todo[-1]:
                node = path.pop()
                on_path.discard(node)
                done.add(node)
                todo.pop()
                continue
            nxt = todo[-1].pop(0)
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt in done:
                continue
            path.append(nxt)
            on_path.add(nxt)
            todo.append(sorted(n for n in after[nxt] if n in after))
    return None


def cycle_problem(cycle: Sequence[str]) -> str:
    return (
        f"a cycle of after triggers: {' → '.join(cycle)}; each would start the next forever: "
        "remove one of these routines from another's [trigger].after"
    )
