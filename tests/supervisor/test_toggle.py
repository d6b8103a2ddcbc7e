"""Which changes of a routine file carry an enable/disable along (supervisor/engine/toggle.py
`file_edits`), on real files scanned as the daemon scans them, and the ledger moving the
binding as the daemon does on each refresh."""

from __future__ import annotations

from datetime import UTC, datetime

from routines.ledger import Ledger, is_enabled
from routines.spec.paths import paths
from routines.spec.registry import scan
from supervisor.engine.toggle import file_edits, set_enabled, unbound
from tests.supervisor.daemonkit import command_routine, write_routine

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def test_an_edit_in_place_keeps_the_state_the_person_set() -> None:
    write_routine("brief", command_routine("echo one", enabled=False))
    before = scan(paths())
    routine = before.entries["brief"].routine
    assert routine is not None
    with Ledger(paths().ledger) as ledger:
        set_enabled(ledger, routine, True, NOW)
        write_routine("brief", command_routine("echo two", enabled=False))  # saved by rename
        after = scan(paths(), before)
        edited = after.entries["brief"].routine
        assert edited is not None
        assert not is_enabled(ledger.states(), edited)  # not yet carried: another identity
        edits = file_edits(before, after)
        assert edits == [("brief", routine.identity, edited.identity)]
        for name, was, now in edits:
            assert ledger.rebind_override(name, was, now)
        assert is_enabled(ledger.states(), edited)


def test_a_file_gone_in_between_or_over_a_system_file_is_not_an_edit() -> None:
    p = paths()
    write_routine("brief", command_routine("echo one", enabled=False))
    before = scan(p)
    (p.routines_dir / "brief.toml").unlink()
    gone = scan(p, before)
    assert file_edits(before, gone) == []
    write_routine("brief", command_routine("echo two", enabled=False))
    assert file_edits(gone, scan(p, gone)) == []  # appeared: another file
    p.system_dir.mkdir(parents=True, exist_ok=True)
    (p.routines_dir / "brief.toml").unlink()
    (p.system_dir / "brief.toml").write_text(command_routine("echo one", enabled=False))
    system = scan(p)
    write_routine("brief", command_routine("echo mine", enabled=False))
    assert file_edits(system, scan(p, system)) == []  # a user file over a system one


def test_an_override_from_before_the_binding_is_bound_to_the_file_in_force() -> None:
    from routines.ledger import RoutineState

    write_routine("brief", command_routine("echo one", enabled=False))
    registry = scan(paths())
    routine = registry.entries["brief"].routine
    assert routine is not None
    legacy = {"brief": RoutineState("brief", enabled_override=True, file_enabled_seen=False)}
    assert unbound(registry, legacy) == [("brief", routine.identity)]
    bound = {"brief": RoutineState("brief", True, False, file_identity=routine.identity)}
    assert unbound(registry, bound) == []
    assert unbound(registry, {"brief": RoutineState("brief")}) == []  # no override
