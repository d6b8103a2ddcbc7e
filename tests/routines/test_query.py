"""The read model (routines.query): a row per routine file from a real registry (files on
disk) and a real SQLite ledger, as every reader (`list`, `status`, the bar, the dashboard, the
daemon's answers) gets it; and the rows across the wire unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from routines.ledger import Ledger
from routines.query import RoutineRow, decode_rows, encode_rows, routine_rows
from routines.runs import RunEnd, RunStatus, Trigger
from routines.spec.paths import Paths, paths
from routines.spec.registry import scan
from tests.helpers import AGENT, COMMAND, write

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
ON = "[routine]\nenabled = true\n\n" + AGENT  # an agent routine is off until enabled


@pytest.fixture
def p(vinos_env: Path) -> Paths:
    return paths()


def _finished(ledger: Ledger, name: str, status: RunStatus, dollars: float) -> str:
    run_id = f"{NOW:%Y%m%dT%H%M%S}-{name}-{status}"
    at = NOW - timedelta(minutes=10)
    ledger.record_run(name, run_id=run_id, trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=at)
    ledger.finish_run(run_id, RunEnd(status, dollars=dollars), now=at + timedelta(seconds=30))
    return run_id


def test_a_row_says_schedule_next_run_last_result_and_todays_cost(p: Paths) -> None:
    write(p.routines_dir, "news", ON)
    write(p.routines_dir, "backup", COMMAND)
    with Ledger(p.ledger) as ledger:
        run_id = _finished(ledger, "news", RunStatus.OK, 0.25)
        busy = f"{NOW:%Y%m%dT%H%M%S}-backup-now"
        ledger.record_run(
            "backup", run_id=busy, trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=NOW
        )
        rows = routine_rows(scan(p), ledger, NOW)
    by = {r.name: r for r in rows}
    assert [r.name for r in rows] == ["backup", "news"]  # by name
    news = by["news"]
    assert (news.kind, news.enabled, news.valid, news.expression) == (
        "agent",
        True,
        True,
        "0 6 * * *",
    )
    assert news.next_run == datetime(2026, 12, 4, 6, 0, tzinfo=UTC)
    assert (news.last_status, news.last_run_id, news.today_dollars) == ("ok", run_id, 0.25)
    assert news.permissions == "ask" and by["backup"].permissions is None
    assert by["backup"].running and not news.running
    assert by["backup"].kind == "command"


def test_an_invalid_file_is_a_row_with_its_errors_and_no_schedule(p: Paths) -> None:
    write(p.routines_dir, "bad", "[schedule]\ncron = 'not a cron'\n")
    (row,) = routine_rows(scan(p), None, NOW, stale={"bad"})
    assert (row.kind, row.valid, row.enabled, row.schedule, row.next_run) == (
        "?", False, False, "", None,
    )  # fmt: skip
    assert row.errors and row.stale  # the daemon runs its last good version


def test_a_disabled_routine_has_no_next_run_and_the_daemons_fire_wins(p: Paths) -> None:
    write(p.routines_dir, "news", ON)
    write(p.routines_dir, "off", AGENT)
    held = NOW + timedelta(minutes=3)
    asked: list[str] = []

    def known(name: str, routine: object, now: datetime) -> datetime | None:
        asked.append(name)
        return held

    rows = {r.name: r for r in routine_rows(scan(p), None, NOW, known_fire=known)}
    assert rows["news"].next_run == held  # the scheduler's, not computed again
    assert rows["off"].next_run is None and not rows["off"].enabled
    assert asked == ["news"]  # never asked for a routine that is off


def test_names_picks_the_rows_and_the_callers_facts_land_on_them(p: Paths) -> None:
    write(p.routines_dir, "news", AGENT)
    write(p.routines_dir, "other", AGENT)
    (row,) = routine_rows(
        scan(p), None, NOW, names=["news", "gone"],
        premium_keys={"news": "no key"}, not_here={"news": "held by desk"},
    )  # fmt: skip
    assert (row.name, row.premium_key, row.not_here) == ("news", "no key", "held by desk")


def test_rows_cross_the_wire_unchanged(p: Paths) -> None:
    write(p.routines_dir, "news", AGENT)
    write(p.routines_dir, "bad", "[schedule]\ncron = 'x'\n")
    with Ledger(p.ledger) as ledger:
        _finished(ledger, "news", RunStatus.FAILED, 0.5)
        rows = routine_rows(scan(p), ledger, NOW)
    import orjson

    wire = orjson.dumps({"result": {"routines": encode_rows(rows)}})
    assert decode_rows(orjson.loads(wire)["result"]["routines"]) == rows
    assert decode_rows(orjson.dumps(encode_rows(rows))) == rows
    assert all(isinstance(r, RoutineRow) for r in rows)


def test_rows_cross_in_column_batches_and_a_wrong_batch_is_refused(p: Paths) -> None:
    """The wire carries columns, one list a field (a field's name once, not once a row): two
    batches decode, in order, to the rows; a column of its field's default alone is not sent;
    a field this client does not know is left out, one with a default that was not sent takes
    it, and a short column is not rows."""
    write(p.routines_dir, "news", AGENT)
    write(p.routines_dir, "backup", COMMAND)
    write(p.routines_dir, "bad", "[schedule]\ncron = 'x'\n")
    rows = routine_rows(scan(p), None, NOW)
    first, second = encode_rows(rows[:1]), encode_rows(rows[1:])
    assert first["name"] == [rows[0].name] and len(second["name"]) == 2
    assert decode_rows([first, second]) == rows
    assert "premium_key" not in second and "warnings" not in second  # defaults all
    assert "strikes" in encode_rows([rows[0], rows[1]._replace(strikes=2)])
    newer = {**second, "from_a_newer_daemon": [1, 2]}
    assert decode_rows([first, newer]) == rows
    with pytest.raises(ValueError, match="kind"):
        decode_rows({**second, "kind": ["command"]})
    without = dict(second)
    del without["valid"]  # no default: not rows
    with pytest.raises(ValueError, match="valid"):
        decode_rows(without)
    assert encode_rows([]) == {f: [] for f in RoutineRow._fields}
    assert decode_rows(encode_rows([])) == []


def test_the_light_named_tuple_builds_what_typings_does() -> None:
    """routines/query/rowclass.py stands in for typing.NamedTuple where `list` must not load
    typing: the same fields, defaults, docstring, methods and tuple behaviour."""
    import typing

    from routines.query import rowclass

    def make(base: object) -> type:
        class Row(base):  # type: ignore[misc,valid-type]
            """A row."""

            name: str
            size: int = 3
            tags: tuple[str, ...] = ()

            def twice(self) -> int:
                return 2 * self.size

        return Row

    light, real = make(rowclass.NamedTuple), make(typing.NamedTuple)
    for attr in ("_fields", "_field_defaults", "__doc__", "__module__", "__qualname__"):
        assert getattr(light, attr) == getattr(real, attr), attr
    assert light.__annotations__ == {"name": "str", "size": "int", "tags": "tuple[str, ...]"}
    row = light("a")
    assert (tuple(row), row.twice(), row._replace(size=5).size) == (("a", 3, ()), 6, 5)
    assert row._asdict() == real("a")._asdict() and isinstance(row, tuple)
    assert RoutineRow.__mro__[1:] == (tuple, object)
    base: Any = rowclass.NamedTuple
    with pytest.raises(TypeError, match="follows"):

        class Bad(base):  # type: ignore[misc]
            a: int = 1
            b: int

    with pytest.raises(AttributeError, match="_replace"):

        class Worse(base):  # type: ignore[misc]
            a: int

            def _replace(self) -> None: ...


def test_a_row_cache_gives_the_same_rows_and_forgets_an_edited_file(p: Paths) -> None:
    """A daemon's RowCache keeps what each file says of its row while the registry keeps the
    file's entry: the rows are those made without it, the ledger's news shows at once, and an
    edited, removed or invalid file is never shown as it was."""
    import os

    from routines.query import RowCache

    write(p.routines_dir, "news", ON)
    write(p.routines_dir, "backup", COMMAND)
    write(p.routines_dir, "bad", "[schedule]\ncron = 'x'\n")
    cache = RowCache()
    with Ledger(p.ledger) as ledger:
        registry = scan(p)
        first = routine_rows(registry, ledger, NOW, cache=cache)
        assert first == routine_rows(registry, ledger, NOW)
        assert len(cache.parts) == 3
        _finished(ledger, "news", RunStatus.FAILED, 0.5)  # the ledger moved, the files did not
        backup = registry.entries["backup"].routine
        assert backup is not None
        ledger.disable(
            "backup", file_enabled=backup.enabled, file_identity=backup.identity, reason="why"
        )
        again = routine_rows(scan(p, registry), ledger, NOW, cache=cache)
        assert again == routine_rows(registry, ledger, NOW)
        news = {r.name: r for r in again}["news"]
        assert (news.last_status, news.last_failed, news.today_dollars) == ("failed", True, 0.5)
        off = {r.name: r for r in again}["backup"]
        assert (off.enabled, off.disabled_reason) == (False, "why")
        # Edited in place within the same second, with the same size: a new stamp, a new row.
        path = p.routines_dir / "news.toml"
        st = os.stat(path)
        path.write_text(path.read_text().replace("0 6 * * *", "0 7 * * *"))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
        (p.routines_dir / "backup.toml").unlink()
        write(p.routines_dir, "bad", COMMAND)
        edited = scan(p, registry)
        rows = {r.name: r for r in routine_rows(edited, ledger, NOW, cache=cache)}
        assert rows == {r.name: r for r in routine_rows(edited, ledger, NOW)}
        assert rows["news"].expression == "0 7 * * *" and "backup" not in rows
        assert rows["bad"].valid and rows["bad"].kind == "command"
        assert len(cache.parts) == 2  # the parts of files gone or replaced are dropped


def test_kept_rows_are_the_rows_until_an_input_or_the_clock_moves(p: Paths) -> None:
    """RowCache.keep: the rows whole, given back for the same registry and inputs until the
    first next run they show or the end of today (today's spending), never before they were
    made, never once a signature lies beside a file; never kept when a row asks for
    auto-approval or can need a premium key (files beyond the routine's say what it shows)."""
    from routines.query import RowCache
    from routines.query.routines import settled_until

    on = COMMAND.replace("[routine]\n", "[routine]\nenabled = true\n")
    write(p.routines_dir, "backup", on)
    write(p.routines_dir, "soon", on.replace("0 6 * * *", "30 15 * * *"))
    write(p.routines_dir, "bad", "[schedule]\ncron = 'x'\n")
    cache = RowCache()
    with Ledger(p.ledger) as ledger:
        registry = scan(p)
        rows = routine_rows(registry, ledger, NOW, cache=cache)
        soon = datetime(2026, 12, 3, 15, 30, tzinfo=UTC)
        assert settled_until(registry, rows, NOW) == soon
        cache.keep(registry, "mark 1", NOW, rows)
        assert cache.kept(registry, "mark 1", soon - timedelta(seconds=1)) is rows
        assert cache.kept(registry, "mark 1", soon) is None  # its next run came
        assert cache.kept(registry, "mark 1", NOW - timedelta(seconds=1)) is None  # set back
        assert cache.kept(registry, "mark 2", NOW) is None  # the ledger moved
        assert cache.kept(scan(p, registry), "mark 1", NOW) is None  # another scan's registry
        # Without "soon", the end of today (UTC here) comes before backup's next run.
        (p.routines_dir / "soon.toml").unlink()
        registry = scan(p, registry)
        rows = routine_rows(registry, ledger, NOW, cache=cache)
        midnight = datetime(2026, 12, 4, tzinfo=UTC)
        assert settled_until(registry, rows, NOW) == midnight
        cache.keep(registry, "mark 1", NOW, rows)
        assert cache.kept(registry, "mark 1", midnight - timedelta(seconds=1)) is rows
        assert cache.kept(registry, "mark 1", midnight) is None
        sig = p.routines_dir / "backup.toml.sig"
        sig.write_text("not checked here")
        assert cache.kept(registry, "mark 1", NOW) is None  # a signature changes the row
        cache.keep(registry, "mark 1", NOW, rows)
        assert cache.kept(registry, "mark 1", NOW) is None  # and is not kept while there
        sig.unlink()
        # (auto_approve = true wants a signature: false is the file that asks, unsigned.)
        asks = ON.replace("enabled = true", "enabled = true\nauto_approve = false")
        for text in (ON, asks.replace("[agent]", '[agent]\nroute = "ollama"')):
            write(p.routines_dir, "asks", text)
            asking = scan(p, registry)
            made = routine_rows(asking, ledger, NOW)
            assert {r.name: r for r in made}["asks"].valid
            cache.keep(asking, "mark 1", NOW, made)
            assert cache.kept(asking, "mark 1", NOW) is None
