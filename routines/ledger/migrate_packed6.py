"""Schema 6's packed layout (schemas 6 to 8): kept only to read such a ledger once.

The live schema is plain again (routines/ledger/sqlite.py, step 9). What stays here is the one
definition of the packed layout: `views` decodes it (routines/ledger/migrate_unpack.py reads
every row through them to unpack a ledger), and `MIGRATION` encodes it, which
tests/routines/ledger/test_ledger_unpack.py and bench/bench_ledger_year.py use to make real packed
files.
Nothing writes this layout in a running ledger.

What schema 6 was, for whoever reads an old file:

A run row was ~600 bytes with its indexes: the same routine name, status and
summary repeated as text in every row, times as 27-character ISO strings, the run id twice (row and
index). Here:

- run_log: one row per run. When the run id has the shape `new_run_id` gives
  (20261202T060012-day-brief-3f9a1c), it is not stored as text: the rowid is its UTC second
  << 24 | a count within that second (in the order the runs were written), `rand` its 24
  random bits, and the routine's name completes it (`PACKED_MIN` and above). Any other run id
  (older versions, tests) is kept as text in `run_id`, with a small rowid.
  Times are integer microseconds since the epoch (`started`; `finished` as the
  microseconds after `started`); a time not in the ledger's own format keeps its exact text in
  `raw` (JSON) next to an approximate integer, so ordering and day sums still work on it.
  A slot is its UTC second (or its text, when not of the scheduler's shape). The routine is a
  `routines` id; statuses, triggers, outcomes, summaries, models, tool lists and output
  directories are `texts` ids (each distinct text stored once). Owner and worker pids are kept
  only while a run is queued or running.
- fence: the run fence (routine id, slot) WITHOUT ROWID, with the claim's second and run.
- texts no run row uses any more are dropped after compaction (`GC_TEXTS`).

Views `runs` and `claims` show the rows exactly as schema 5 did (the same columns and text),
with INSTEAD OF triggers that encode what is written through them; so `sqlite3 ledger.db
'SELECT * FROM runs'` still reads, and the encoders below are the one definition, in SQL, for
the migration, the triggers and the ledger's lookups. The ledger filters on the views' raw
columns (`rt` routine id, `st` started, `rs` status id) so SQLite uses run_log's indexes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from routines.runs import ACTIVE, RunStatus

__all__ = [
    "GC_TEXTS",
    "MIGRATION",
    "PACKED_MIN",
    "codes",
    "enc_slot",
    "key_sql",
    "us",
    "us_iso",
    "views",
]

PACK = 1 << 24
PACKED_MIN = 1 << 40  # rowids from here on are second << 24 | n; below, rows keep run_id text
# texts ids 1-8, written by the migration: these statuses have fixed codes, so the SQL that
# filters on them (active runs, runs that are not runs) needs no lookup. Never reordered.
_SEED = ("queued", "running", "ok", "failed", "timeout", "interrupted", "skipped", "missed")


def codes(statuses: Iterable[RunStatus]) -> str:
    """`(1, 2)` for an SQL `IN` list over run_log.status (routines/runs.py's sets)."""
    return "(" + ", ".join(str(_SEED.index(s.value) + 1) for s in sorted(statuses)) + ")"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

_D = "[0-9]"
_US_GLOB = f"{_D * 4}-{_D * 2}-{_D * 2}T{_D * 2}:{_D * 2}:{_D * 2}.{_D * 6}Z"
_SLOT_GLOB = f"{_D * 4}-{_D * 2}-{_D * 2}T{_D * 2}:{_D * 2}:{_D * 2}Z"
_RID_GLOB = f"{_D * 8}T{_D * 6}-?*-{'[0-9a-f]' * 6}"


def us(instant: datetime) -> int:
    """An aware instant as run_log stores it: microseconds since the epoch (UTC)."""
    return (instant.astimezone(UTC) - _EPOCH) // _MICROSECOND


def us_iso(value: int) -> str:
    """The ledger's ISO text for `us(...)` (what `iso` gives for the same instant)."""
    seconds, micro = divmod(value, 1_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{micro:06d}Z"


def dec_us(v: str) -> str:
    return (
        f"(strftime('%Y-%m-%dT%H:%M:%S', ({v}) / 1000000, 'unixepoch') "
        f"|| printf('.%06dZ', ({v}) % 1000000))"
    )


def _enc_us_raw(x: str) -> str:
    return (
        f"(CAST(strftime('%s', substr({x}, 1, 19)) AS INTEGER) * 1000000 "
        f"+ CAST(substr({x}, 21, 6) AS INTEGER))"
    )


def enc_us(x: str) -> str:
    """The microseconds of an ISO text in the ledger's format, else NULL (exact both ways)."""
    raw = _enc_us_raw(x)
    return f"(CASE WHEN {x} GLOB '{_US_GLOB}' AND {dec_us(raw)} = {x} THEN {raw} END)"


def approx_us(x: str) -> str:
    """Any ISO text SQLite reads (older versions wrote +00:00), to about a millisecond."""
    return f"CAST(ROUND((julianday({x}) - 2440587.5) * 86400000000) AS INTEGER)"


def enc_duration(x: str) -> str:
    """Seconds as integer microseconds when that gives the same float back, else the REAL."""
    n = f"CAST(ROUND({x} * 1000000) AS INTEGER)"
    return (
        f"(CASE WHEN typeof({x}) IN ('real', 'integer') AND {n} / 1000000.0 = {x} "
        f"THEN {n} ELSE {x} END)"
    )


def enc_slot(x: str) -> str:
    """A slot id (2026-12-03T06:00:00Z) as its UTC second; any other text as it is."""
    raw = f"CAST(strftime('%s', {x}) AS INTEGER)"
    return (
        f"(CASE WHEN {x} GLOB '{_SLOT_GLOB}' AND "
        f"strftime('%Y-%m-%dT%H:%M:%SZ', {raw}, 'unixepoch') = {x} THEN {raw} ELSE {x} END)"
    )


def dec_slot(v: str) -> str:
    return (
        f"(CASE WHEN typeof({v}) = 'integer' "
        f"THEN strftime('%Y-%m-%dT%H:%M:%SZ', {v}, 'unixepoch') ELSE {v} END)"
    )


def _hex6(h: str) -> str:
    return " + ".join(
        f"(instr('0123456789abcdef', substr({h}, {k}, 1)) - 1) * {16 ** (6 - k)}"
        for k in range(1, 7)
    )


def rid_second(x: str) -> str:
    """The UTC second of a run id of `new_run_id`'s shape (20261202T060012-name-3f9a1c), else
    NULL; the caller checks the id decodes back to the same text (`dec_rid`)."""
    when = " || ".join(
        (
            f"substr({x}, 1, 4)",
            "'-'",
            f"substr({x}, 5, 2)",
            "'-'",
            f"substr({x}, 7, 2)",
            "' '",
            f"substr({x}, 10, 2)",
            "':'",
            f"substr({x}, 12, 2)",
            "':'",
            f"substr({x}, 14, 2)",
        )
    )
    return f"(CASE WHEN {x} GLOB '{_RID_GLOB}' THEN CAST(strftime('%s', {when}) AS INTEGER) END)"


def rid_random(x: str) -> str:
    """The 24 random bits at the end of such a run id."""
    return f"(CASE WHEN {x} GLOB '{_RID_GLOB}' THEN {_hex6(f'substr({x}, -6)')} END)"


def dec_rid(rowid: str, rand: str, name: str) -> str:
    return (
        f"(strftime('%Y%m%dT%H%M%S', ({rowid}) >> 24, 'unixepoch') || '-' || {name} || '-' "
        f"|| printf('%06x', {rand}))"
    )


def key_sql(x: str) -> str:
    """The run_log rowid of the run whose id is `x` (an index lookup either way), or NULL."""
    first = f"({rid_second(x)} * {PACK})"
    return (
        f"(SELECT id FROM (SELECT id FROM runs WHERE id >= {first} AND id < {first} + {PACK} "
        f"AND run_id = {x} UNION ALL SELECT id FROM run_log WHERE run_id = {x}) LIMIT 1)"
    )


def _text(v: str) -> str:
    return f"(SELECT text FROM texts WHERE id = {v})"


def _tid(x: str) -> str:
    return f"(SELECT id FROM texts WHERE text = {x})"


def _dir(x: str) -> str:
    return f"rtrim({x}, replace({x}, '/', ''))"


TABLES = (
    "CREATE TABLE routines (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    "CREATE TABLE texts (id INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE)",
    "INSERT INTO texts (id, text) VALUES "
    + ", ".join(f"({n}, '{t}')" for n, t in enumerate(_SEED, 1)),
    """CREATE TABLE run_log (
        id INTEGER PRIMARY KEY,
        routine INTEGER NOT NULL,
        started,
        finished,
        slot,
        status INTEGER,
        trigger INTEGER,
        outcome INTEGER,
        detail INTEGER,
        duration,
        route INTEGER,
        model INTEGER,
        escalated INTEGER,
        escalated_reason INTEGER,
        input_tokens INTEGER,
        output_tokens INTEGER,
        local_input_tokens INTEGER,
        local_output_tokens INTEGER,
        tool_calls INTEGER,
        tools_used INTEGER,
        dollars REAL,
        out_dir INTEGER,
        out_name TEXT,
        run_id TEXT,
        rand INTEGER,
        raw TEXT,
        exit_status INTEGER,
        owner_pid INTEGER,
        owner_started REAL,
        worker_pid INTEGER
    )""",
    """CREATE TABLE fence (
        routine INTEGER NOT NULL,
        slot NOT NULL,
        claimed INTEGER NOT NULL,
        run INTEGER,
        PRIMARY KEY (routine, slot)
    ) WITHOUT ROWID""",
)

INDEXES = (
    "CREATE INDEX run_log_routine_started ON run_log(routine, started)",
    "CREATE UNIQUE INDEX run_log_run_id ON run_log(run_id) WHERE run_id IS NOT NULL",
    f"CREATE INDEX run_log_active ON run_log(status) WHERE status IN {codes(ACTIVE)}",
)

_TEXT_COLUMNS = (
    "trigger",
    "status",
    "outcome",
    "detail",
    "route",
    "model",
    "escalated_reason",
    "tools_used",
    "exit_status",
)
_PLAIN = (
    "escalated",
    "input_tokens",
    "output_tokens",
    "local_input_tokens",
    "local_output_tokens",
    "tool_calls",
    "dollars",
)


def _encoded(
    n: str, *, active_only_owner: bool, s: str | None = None, f: str | None = None
) -> dict[str, str]:
    """run_log's columns (not id, routine, run_id) from a v5-shaped row `n` (NEW, or a row);
    `s` and `f`: the started and finished microseconds when already computed."""
    s = s or enc_us(f"{n}.started_at")
    f = f or enc_us(f"{n}.finished_at")
    keep_s = f"CASE WHEN {s} IS NULL THEN {n}.started_at END"
    keep_f = f"CASE WHEN {f} IS NULL OR {s} IS NULL THEN {n}.finished_at END"
    owner = f"{_tid(f'{n}.status')} IN {codes(ACTIVE)} OR {n}.status IS NULL"
    cols = {
        "started": f"COALESCE({s}, {approx_us(f'{n}.started_at')})",
        "finished": f"{f} - {s}",
        "slot": enc_slot(f"{n}.slot"),
        **{c: _tid(f"{n}.{c}") for c in _TEXT_COLUMNS},
        **{c: f"{n}.{c}" for c in _PLAIN},
        "duration": enc_duration(f"{n}.duration_sec"),
        "out_dir": _tid(_dir(f"{n}.output_file")),
        "out_name": f"substr({n}.output_file, length({_dir(f'{n}.output_file')}) + 1)",
        "raw": f"CASE WHEN ({keep_s}) IS NOT NULL OR ({keep_f}) IS NOT NULL THEN "
        f"json_patch('{{}}', json_object('s', {keep_s}, 'f', {keep_f})) END",
    }
    for c in ("owner_pid", "owner_started", "worker_pid"):
        cols[c] = f"CASE WHEN {owner} THEN {n}.{c} END" if active_only_owner else f"{n}.{c}"
    return cols


def _intern(n: str) -> str:
    values = ", ".join(f"({n}.{c})" for c in _TEXT_COLUMNS)
    return (
        f"INSERT OR IGNORE INTO routines (name) VALUES ({n}.routine); "
        f"INSERT OR IGNORE INTO texts (text) VALUES {values}, ({_dir(f'{n}.output_file')});"
    )


def _view(later: Sequence[str]) -> str:
    name = "(SELECT name FROM routines WHERE id = r.routine)"
    return (
        "CREATE VIEW runs AS SELECT r.id AS id, "
        + "".join(f"r.{c} AS {c}, " for c in later)
        + f"{name} AS routine, "
        f"COALESCE(json_extract(r.raw, '$.s'), {dec_us('r.started')}) AS started_at, "
        f"{_text('r.model')} AS model, r.input_tokens AS input_tokens, "
        "r.output_tokens AS output_tokens, r.dollars AS dollars, "
        "CASE typeof(r.duration) WHEN 'integer' THEN r.duration / 1000000.0 "
        f"ELSE r.duration END AS duration_sec, {_text('r.exit_status')} AS exit_status, "
        f"r.tool_calls AS tool_calls, {_text('r.tools_used')} AS tools_used, "
        f"{_text('r.route')} AS route, r.escalated AS escalated, "
        f"{_text('r.escalated_reason')} AS escalated_reason, "
        "r.local_input_tokens AS local_input_tokens, "
        "r.local_output_tokens AS local_output_tokens, "
        f"CASE WHEN r.run_id IS NOT NULL THEN r.run_id WHEN r.id >= {PACKED_MIN} "
        f"THEN {dec_rid('r.id', 'r.rand', name)} END AS run_id, "
        f"{dec_slot('r.slot')} AS slot, {_text('r.trigger')} AS trigger, "
        f"{_text('r.status')} AS status, {_text('r.outcome')} AS outcome, "
        f"{_text('r.detail')} AS detail, "
        "CASE WHEN r.finished IS NOT NULL THEN "
        f"{dec_us('r.started + r.finished')} ELSE json_extract(r.raw, '$.f') END "
        "AS finished_at, "
        f"{_text('r.out_dir')} || r.out_name AS output_file, "
        "r.owner_pid AS owner_pid, r.owner_started AS owner_started, "
        "r.worker_pid AS worker_pid, "
        "r.routine AS rt, r.started AS st, r.status AS rs "
        "FROM run_log r"
    )


def _insert_trigger(later: Sequence[str]) -> str:
    cols = _encoded("NEW", active_only_owner=False) | {c: f"NEW.{c}" for c in later}
    ok = (
        f"k.s * {PACK} >= {PACKED_MIN} AND NEW.id IS NULL "
        f"AND {dec_rid(f'k.s * {PACK}', 'k.r', 'NEW.routine')} = NEW.run_id"
    )
    # In a run id's second, the rowids go up in the order the runs were written (history's
    # tie-break for runs that started at the same microsecond).
    nxt = (
        f"(SELECT COALESCE(MAX(id) + 1, k.s * {PACK}) FROM run_log "
        f"WHERE id >= k.s * {PACK} AND id < (k.s + 1) * {PACK})"
    )
    small = f"(SELECT COALESCE(MAX(id), 0) + 1 FROM run_log WHERE id < {PACKED_MIN})"
    return (
        "CREATE TRIGGER runs_insert INSTEAD OF INSERT ON runs BEGIN "
        "SELECT RAISE(ABORT, 'UNIQUE constraint failed: runs.run_id') "
        f"WHERE {key_sql('NEW.run_id')} IS NOT NULL; "
        f"{_intern('NEW')} "
        f"INSERT INTO run_log (id, routine, run_id, rand, {', '.join(cols)}) SELECT "
        f"CASE WHEN {ok} THEN {nxt} ELSE COALESCE(NEW.id, {small}) END, "
        "(SELECT id FROM routines WHERE name = NEW.routine), "
        f"CASE WHEN {ok} THEN NULL ELSE NEW.run_id END, CASE WHEN {ok} THEN k.r END, "
        f"{', '.join(cols.values())} "
        f"FROM (SELECT {rid_second('NEW.run_id')} AS s, {rid_random('NEW.run_id')} AS r) k; END"
    )


def _update_trigger(later: Sequence[str]) -> str:
    cols = _encoded("NEW", active_only_owner=True) | {c: f"NEW.{c}" for c in later}
    sets = ", ".join(f"{c} = {v}" for c, v in cols.items())
    return (
        "CREATE TRIGGER runs_update INSTEAD OF UPDATE ON runs BEGIN "
        f"{_intern('NEW')} UPDATE run_log SET {sets} WHERE id = OLD.id; END"
    )


def _runs_view(later: Sequence[str]) -> tuple[str, ...]:
    return (_view(later), _insert_trigger(later), _update_trigger(later))


CLAIMS_VIEW = (
    "CREATE VIEW claims AS SELECT "
    "(SELECT name FROM routines WHERE id = f.routine) AS routine, "
    f"{dec_slot('f.slot')} AS slot, "
    "strftime('%Y-%m-%dT%H:%M:%S.000000Z', f.claimed, 'unixepoch') AS claimed_at, "
    "(SELECT run_id FROM runs WHERE id = f.run) AS run_id FROM fence f",
    "CREATE TRIGGER claims_insert INSTEAD OF INSERT ON claims BEGIN "
    "INSERT OR IGNORE INTO routines (name) VALUES (NEW.routine); "
    "INSERT INTO fence (routine, slot, claimed, run) VALUES "
    f"((SELECT id FROM routines WHERE name = NEW.routine), {enc_slot('NEW.slot')}, "
    f"COALESCE(CAST(strftime('%s', NEW.claimed_at) AS INTEGER), 0), {key_sql('NEW.run_id')}); END",
)


def _copy_runs() -> tuple[str, ...]:
    """Every v5 row into run_log: rowid second << 24 | (old rowid's low 24 bits) where the run
    id allows, so a second's rows keep their order. Rows whose new rowids would meet (16M rows
    apart in one second: never, but not impossible) keep their text and old rowid."""
    cols = _encoded("o", active_only_owner=True, s="o.s_us", f="o.f_us")
    ok = (
        f"o.p >= {PACKED_MIN} AND o.p NOT IN (SELECT p FROM temp.v6_shared) "
        f"AND {dec_rid('o.p', 'o.r', 'o.routine')} = o.run_id"
    )
    p = f"{rid_second('run_id')} * {PACK} + (id & {PACK - 1})"
    return (
        "CREATE TEMP TABLE v6_shared (p INTEGER PRIMARY KEY)",
        f"INSERT INTO temp.v6_shared SELECT p FROM (SELECT {p} AS p FROM v5) "
        "WHERE p IS NOT NULL GROUP BY p HAVING COUNT(*) > 1",
        # MATERIALIZED: each encoder runs once a row, not once per use below.
        f"WITH o AS MATERIALIZED (SELECT v5.*, {p} AS p, {rid_random('run_id')} AS r, "
        f"{enc_us('started_at')} AS s_us, {enc_us('finished_at')} AS f_us FROM v5) "
        f"INSERT INTO run_log (id, routine, run_id, rand, {', '.join(cols)}) SELECT "
        f"CASE WHEN {ok} THEN o.p ELSE o.id END, "
        "(SELECT id FROM routines WHERE name = o.routine), "
        f"CASE WHEN {ok} THEN NULL ELSE o.run_id END, CASE WHEN {ok} THEN o.r END, "
        f"{', '.join(cols.values())} FROM o",
        "DROP TABLE temp.v6_shared",
    )


# The v6 migration, in the one transaction of Ledger._migrate: a crash leaves schema 5 whole.
MIGRATION = (
    "ALTER TABLE runs RENAME TO v5",
    "ALTER TABLE claims RENAME TO v5_claims",
    *TABLES,
    "INSERT OR IGNORE INTO routines (name) SELECT routine FROM v5 "
    "UNION SELECT routine FROM v5_claims",
    "INSERT OR IGNORE INTO texts (text) "
    + " UNION ".join(f"SELECT {c} FROM v5" for c in _TEXT_COLUMNS)
    + f" UNION SELECT {_dir('output_file')} FROM v5",
    *_copy_runs(),
    "DROP TABLE v5",
    *INDEXES,
    *_runs_view(()),
    "INSERT INTO fence (routine, slot, claimed, run) SELECT "
    "(SELECT id FROM routines WHERE name = c.routine), "
    f"{enc_slot('c.slot')}, COALESCE(CAST(strftime('%s', c.claimed_at) AS INTEGER), 0), "
    f"{key_sql('c.run_id')} FROM v5_claims c",
    "DROP TABLE v5_claims",
    *CLAIMS_VIEW,
)


def views(later: Sequence[str]) -> tuple[str, ...]:
    """The views and their triggers, made again after every upgrade from schema 6 on, so a
    column a later migration adds to run_log (`later`, plain values) shows in `runs` too."""
    return (
        "DROP VIEW IF EXISTS runs",  # its triggers go with it
        "DROP VIEW IF EXISTS claims",
        *_runs_view(later),
        *CLAIMS_VIEW,
    )


# Texts that no run row names any more (compaction deleted their runs).
GC_TEXTS = (
    f"DELETE FROM texts WHERE id > {len(_SEED)} AND id NOT IN ("
    + " UNION ALL ".join(
        f"SELECT {c} FROM run_log WHERE {c} IS NOT NULL" for c in (*_TEXT_COLUMNS, "out_dir")
    )
    + ")"
)
