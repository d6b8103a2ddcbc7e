"""[trigger] and [gate] in a routine file: what the loader accepts, each refusal naming file, key
and fix; a cycle of `after` refused at load by the registry and by `validate`, named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from routines.runs import Outcome, Trigger, event_slot, is_event_slot
from routines.spec.checks import RoutineInvalid
from routines.spec.loader import load_text
from routines.spec.paths import paths
from routines.spec.registry import scan
from routines.spec.trigger import GateSpec, TriggerSpec, find_cycle, watch_outside

REPO = Path(__file__).resolve().parents[3]

AGENT = """[routine]
enabled = true
{extra}
[agent]
route = "ollama"
system = "Summarize."
tools = ["read:~/Downloads/*.pdf"]
"""


def load(text: str, name: str = "sum") -> object:
    return load_text(text, Path(f"/r/{name}.toml"))


def errors(text: str, name: str = "sum") -> list[str]:
    with pytest.raises(RoutineInvalid) as exc:
        load(text, name)
    return [str(p) for p in exc.value.errors]


def test_a_routine_with_only_triggers_has_no_schedule() -> None:
    r = load(AGENT.format(extra='[trigger]\nafter = ["up"]\non = ["done", "needs-attention"]\n'))
    assert r.trigger == TriggerSpec(  # type: ignore[attr-defined]
        after=("up",), on=(Outcome.DONE, Outcome.NEEDS_ATTENTION)
    )
    assert not r.scheduled  # type: ignore[attr-defined]


def test_on_defaults_to_done_and_the_gate_is_read() -> None:
    text = AGENT.format(
        extra='[schedule]\ncron = "0 6 * * *"\n[trigger]\nafter = ["up"]\nfire = true\n'
        '[gate]\nrun = "test -s ~/inbox"\n'
    )
    r = load(text)
    assert r.trigger.on == (Outcome.DONE,)  # type: ignore[attr-defined]
    assert r.trigger.fire  # type: ignore[attr-defined]
    assert r.gate == GateSpec("test -s ~/inbox")  # type: ignore[attr-defined]
    assert r.scheduled  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "",
            "/r/sum.toml: [schedule]: required: set one of cron, oncalendar or every "
            "(or a [trigger])",
        ),
        (
            "[trigger]\n",
            "/r/sum.toml: [trigger]: expected at least one of after, watch or fire, "
            'found none (e.g. after = ["research-bot"])',
        ),
        (
            '[trigger]\nafter = ["sum"]\n',
            '/r/sum.toml: [trigger].after: "sum" is this routine: a routine cannot follow itself',
        ),
        (
            '[trigger]\nafter = ["Up Stream"]\n',
            "/r/sum.toml: [trigger].after: expected routine "
            "names: lowercase letters, digits and '-' (not 'Up Stream'), found an array of 1",
        ),
        (
            '[trigger]\nafter = ["up"]\non = ["finished"]\n',
            "/r/sum.toml: [trigger].on: expected "
            'an array of outcomes ("done", "nothing-to-do", "needs-attention"), found an array',
        ),
        (
            '[trigger]\nfire = true\non = ["done"]\n',
            "/r/sum.toml: [trigger].on: only with after "
            "= [...]: it says which of its outcomes count",
        ),
        (
            '[trigger]\nwatch = ["Downloads/*.pdf"]\n',
            "/r/sum.toml: [trigger].watch: expected "
            "absolute paths or paths under \"~/\" (not 'Downloads/*.pdf'), found an array",
        ),
        (
            '[trigger]\nwatch = ["~/Documents/*.txt"]\n',
            "/r/sum.toml: [trigger].watch[0]: "
            '"~/Documents/*.txt" is outside what this routine may read: add '
            '"read:~/Documents/*.txt" to [agent].tools, or its folder to home = [...]',
        ),
        ('[trigger]\nfire = true\nwhen = "now"\n', "/r/sum.toml: [trigger].when: unknown key"),
        (
            "[trigger]\nfire = true\n[gate]\ntimeout_sec = 5\n",
            '/r/sum.toml: [gate].run: required: the check to run, e.g. run = "test -s ~/inbox.txt"',
        ),
    ],
)
def test_bad_triggers_are_refused_naming_file_key_and_fix(extra: str, message: str) -> None:
    got = errors(AGENT.format(extra=extra))
    assert any(e.startswith(message) for e in got), got


def test_a_watched_path_inside_a_read_glob_or_home_is_accepted() -> None:
    assert watch_outside("~/Downloads/*.pdf", ["~/Downloads/*.pdf"], []) is None
    assert watch_outside("~/notes/a/*.md", [], ["~/notes"]) is None
    assert watch_outside("~/notes/x.md", ["~/notes/**"], []) is None
    assert watch_outside("~/notesx/x.md", [], ["~/notes"]) is not None  # not a prefix of names
    assert watch_outside("~/notes/*.md", ["~/notes/*.txt"], []) is not None


def test_find_cycle_names_the_cycle_and_ignores_unknown_routines() -> None:
    assert find_cycle({"a": ["b"], "b": ["c"], "c": []}) is None
    assert find_cycle({"a": ["missing"]}) is None
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": ["y"], "y": ["x"], "a": []}) == ["x", "y", "x"]


def test_event_slots_never_read_as_instants() -> None:
    slot = event_slot(Trigger.AFTER, "20261207T143000-up-a1b2c3")
    assert slot == "after:20261207T143000-up-a1b2c3"
    assert is_event_slot(slot) and is_event_slot("fire:00ff") and is_event_slot("watch:ab")
    assert not is_event_slot("2026-12-07T14:30:00Z")


def cycle_files() -> tuple[Path, Path, Path]:
    p = paths()
    p.routines_dir.mkdir(parents=True, exist_ok=True)
    made = []
    for name, after in (("a", "b"), ("b", "c"), ("c", "a")):
        path = p.routines_dir / f"{name}.toml"
        path.write_text(AGENT.format(extra=f'[trigger]\nafter = ["{after}"]\n'))
        made.append(path)
    return made[0], made[1], made[2]


def test_the_registry_refuses_a_cycle_at_load_naming_it() -> None:
    cycle_files()
    reg = scan(paths())
    for name in "abc":
        entry = reg.get(name)
        assert entry is not None and entry.routine is None
        assert [str(e) for e in entry.errors] == [
            f"{entry.path}: [trigger].after: a cycle of after triggers: a → b → c → a; each "
            "would start the next forever: remove one of these routines from another's "
            "[trigger].after"
        ]


def test_an_edit_that_closes_a_cycle_keeps_the_others_in_force() -> None:
    *_, c = cycle_files()
    c.write_text(AGENT.format(extra='[trigger]\nafter = ["up"]\n'))
    first = scan(paths())
    assert all(first.get(n).routine is not None for n in "abc")  # type: ignore[union-attr]
    c.write_text(AGENT.format(extra='[trigger]\nafter = ["a"]\n'))
    os.utime(c, ns=(1, 1))  # a new stamp, whatever the clock's resolution
    again = scan(paths(), first)
    assert again.get("a") is first.get("a") and again.get("b") is first.get("b")
    entry = again.get("c")
    assert entry is not None and entry.stale  # its last good version stays, with the cycle
    assert entry.routine is not None and entry.routine.trigger is not None
    assert entry.routine.trigger.after == ("up",)
    assert "a → b → c → a" in str(entry.errors[0])


def test_validate_with_no_file_checks_the_whole_set_for_a_cycle() -> None:
    cycle_files()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "validate"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout.count("a cycle of after triggers: a → b → c → a") == 3, done.stdout
