"""The ledger's queries, each written once for both backends (routines/ledger/sqlite.py's SQLite
`Ledger` and routines/ledger/postgres.py's PostgreSQL `PgLedger`) over the same plain tables.

A query differs between the two only by its `Dialect`: the placeholder ("?" or "%s") and the
row lock PostgreSQL takes where machines race (SQLite's BEGIN IMMEDIATE holds the whole file,
so it needs none). Everything else is SQL both databases run as it is: ON CONFLICT upserts,
recursive CTEs, LIMIT/OFFSET in a subquery, CAST(... AS NUMERIC) before a ROUND (exact in
PostgreSQL, the same REAL in SQLite). tests/fleet/test_ledger_contract.py runs every query on
both.

Pure: text only; each backend binds and executes these with its own cursor and transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from routines.ledger import rundays
from routines.ledger.shared import ZERO_COLUMNS
from routines.runs import ACTIVE, NOT_A_RUN, PAUSED, sql_in

__all__ = [
    "MS",
    "NANO",
    "PG",
    "ROW_FIELDS",
    "SQLITE",
    "SUMS",
    "Dialect",
]


@dataclass(frozen=True, slots=True)
class Dialect:
    """What a backend's query text differs by."""

    mark: str  # the placeholder
    lock: str  # appended to a SELECT of rows about to be updated
    skip: str  # appended to a SELECT of rows to fold, so two folders take different ones

    def marks(self, n: int) -> str:
        return ", ".join([self.mark] * n)

    # -- the run fence ------------------------------------------------------------------

    def insert_claim(self, columns: tuple[str, ...]) -> str:
        """A claim of (routine, slot) with `columns` bound; no row when it exists already."""
        return (
            f"INSERT INTO claims ({', '.join(columns)}) VALUES ({self.marks(len(columns))}) "
            "ON CONFLICT DO NOTHING"
        )

    def cursor(self) -> str:
        return f"SELECT cursor FROM routine_state WHERE routine = {self.mark}{self.lock}"

    def failure_streak(self) -> str:
        """A routine's failure streak, locked: `finish_run` counts a strike on it."""
        return f"SELECT failure_streak FROM routine_state WHERE routine = {self.mark}{self.lock}"

    def prune_old_claims(self) -> str:
        return f"DELETE FROM claims WHERE claimed_at < {self.mark}"

    def prune_claims_beyond(self) -> str:
        """A routine's claims older than its `n`th newest (routine, routine, n - 1)."""
        m = self.mark
        return (
            f"DELETE FROM claims WHERE routine = {m} AND slot < (SELECT slot FROM claims "
            f"WHERE routine = {m} ORDER BY slot DESC LIMIT 1 OFFSET {m})"
        )

    def is_claimed(self) -> str:
        return f"SELECT 1 FROM claims WHERE routine = {self.mark} AND slot = {self.mark}"

    def advance_cursor(self) -> str:
        """Upsert of (routine, cursor) that never moves the cursor backwards (a clock set back
        reruns nothing)."""
        return (
            f"INSERT INTO routine_state (routine, cursor) VALUES ({self.marks(2)}) "
            "ON CONFLICT (routine) DO UPDATE SET cursor = excluded.cursor "
            "WHERE routine_state.cursor IS NULL OR routine_state.cursor < excluded.cursor"
        )

    def ensure_state(self) -> str:
        """A routine's state row, created empty if missing (the row a fleet's claim locks)."""
        return f"INSERT INTO routine_state (routine) VALUES ({self.mark}) ON CONFLICT DO NOTHING"

    # -- run rows -----------------------------------------------------------------------

    def insert_run(self, columns: tuple[str, ...], *, once: bool = False) -> str:
        """INSERT of a run row binding `columns`, the `shared.ZERO_COLUMNS` not among them as
        literal zeros; `once`: no row when its run id is there already."""
        zeros = tuple(c for c in ZERO_COLUMNS if c not in columns)
        cols = ", ".join((*columns, *zeros))
        values = ", ".join([self.mark] * len(columns) + ["0"] * len(zeros))
        tail = " ON CONFLICT (run_id) DO NOTHING" if once else ""
        return f"INSERT INTO runs ({cols}) VALUES ({values}){tail}"

    def note_last(self) -> str:
        """Upsert of a routine's last run (`shared.note_last_args`) unless a newer one is
        there already."""
        return (
            "INSERT INTO routine_state (routine, last_run_id, last_status, last_outcome, "
            f"last_started, last_finished) VALUES ({self.marks(6)}) "
            "ON CONFLICT (routine) DO UPDATE SET last_run_id = excluded.last_run_id, "
            "last_status = excluded.last_status, last_outcome = excluded.last_outcome, "
            "last_started = excluded.last_started, last_finished = excluded.last_finished "
            "WHERE routine_state.last_started IS NULL "
            "OR routine_state.last_started <= excluded.last_started"
        )

    def last_started(self) -> str:
        return f"SELECT last_started FROM routine_state WHERE routine = {self.mark}"

    def start_run(self) -> str:
        m = self.mark
        return (
            f"UPDATE runs SET status = {m}, started_at = {m}, worker_pid = {m} WHERE run_id = {m}"
        )

    def run_to_finish(self) -> str:
        return (
            "SELECT routine, started_at, status, detail, finished_at FROM runs "
            f"WHERE run_id = {self.mark}{self.lock}"
        )

    def finish_run(self) -> str:
        sets = ", ".join(f"{c} = {self.mark}" for c in FINISH_COLUMNS)
        return f"UPDATE runs SET {sets} WHERE run_id = {self.mark}"

    def active_runs(self, where: str = "") -> str:
        return (
            "SELECT run_id, routine, slot, status, owner_pid, owner_started, worker_pid "
            f"FROM runs WHERE status IN {sql_in(ACTIVE)}{where}"
        )

    def paused_runs(self) -> str:
        return (
            "SELECT run_id, routine, slot, status, owner_pid, owner_started, worker_pid "
            f"FROM runs WHERE status IN {sql_in(PAUSED)}"
        )

    def end_pause(self) -> str:
        """A paused row's one way on (resumed or expired), taken once: the WHERE is the
        race's referee, as `finish_run`'s active check is for a run's end."""
        m = self.mark
        return (
            f"UPDATE runs SET status = {m}, detail = COALESCE(detail, '') || {m} "
            f"WHERE run_id = {m} AND status IN {sql_in(PAUSED)}"
        )

    def run(self, extra: str = "") -> str:
        return f"SELECT {extra}{ROW_FIELDS} FROM runs WHERE run_id = {self.mark}"

    def history(self, routine: bool, extra: str = "") -> str:
        """Newest first, of one routine (bound first) or all; the limit bound last. Both read
        it from an index backwards: (routine, started_at) or (started_at)."""
        where = f"WHERE routine = {self.mark} " if routine else ""
        return (
            f"SELECT {extra}{ROW_FIELDS} FROM runs {where}"
            f"ORDER BY started_at DESC, id DESC LIMIT {self.mark}"
        )

    def replies_to(self, n: int) -> str:
        return (
            f"SELECT {ROW_FIELDS} FROM runs WHERE parent_run_id IN ({self.marks(n)}) "
            "ORDER BY started_at, id"
        )

    def runs_between(self, extra: str = "") -> str:
        return (
            f"SELECT {extra}{ROW_FIELDS} FROM runs WHERE started_at >= {self.mark} "
            f"AND started_at < {self.mark} ORDER BY started_at DESC, id DESC"
        )

    # -- compaction ---------------------------------------------------------------------

    def nth_newest_start(self) -> str:
        """When a routine's (routine, n - 1)th newest run started: its count line's run."""
        return (
            f"SELECT started_at FROM runs WHERE routine = {self.mark} AND started_at IS NOT NULL "
            f"ORDER BY started_at DESC LIMIT 1 OFFSET {self.mark}"
        )

    def to_fold(self) -> str:
        """A routine's finished runs that started before a line (routine, line, limit)."""
        return (
            "SELECT id, routine, run_id, started_at, COALESCE(status, exit_status, '') "
            "AS status, outcome, input_tokens, output_tokens, local_input_tokens, "
            f"local_output_tokens, tool_calls, {NANO} AS nano, {MS} AS ms "
            f"FROM runs WHERE routine = {self.mark} AND started_at < {self.mark} "
            f"AND COALESCE(status, '') NOT IN {sql_in(ACTIVE | PAUSED)} "
            f"ORDER BY started_at LIMIT {self.mark}{self.skip}"
        )

    def add_day(self) -> str:
        """Add one batch's sums to its (routine, day) row, creating it (`add_day_args`)."""
        cols = ", ".join(rundays.DAY_COLUMNS)
        adds = ", ".join(f"{c} = run_days.{c} + excluded.{c}" for c in rundays.COUNTERS)
        newer = "excluded.last_started > run_days.last_started"
        older = "excluded.first_started < run_days.first_started"
        return (
            f"INSERT INTO run_days ({cols}) VALUES ({self.marks(len(rundays.DAY_COLUMNS))}) "
            f"ON CONFLICT (routine, day) DO UPDATE SET {adds}, "
            f"first_run_id = CASE WHEN {older} THEN excluded.first_run_id "
            "ELSE run_days.first_run_id END, "
            f"first_started = CASE WHEN {older} THEN excluded.first_started "
            "ELSE run_days.first_started END, "
            f"last_run_id = CASE WHEN {newer} THEN excluded.last_run_id "
            "ELSE run_days.last_run_id END, "
            f"last_started = CASE WHEN {newer} THEN excluded.last_started "
            "ELSE run_days.last_started END"
        )

    def delete_runs(self, n: int) -> str:
        return f"DELETE FROM runs WHERE id IN ({self.marks(n)})"

    def oldest_run_start(self) -> str:
        """started_at of the oldest whole run (an index lookup; read by name or by index)."""
        return "SELECT MIN(started_at) AS m FROM runs"

    def days(self, routine: bool) -> str:
        where = f"WHERE routine = {self.mark} " if routine else ""
        return f"SELECT * FROM run_days {where}ORDER BY start_at DESC, routine LIMIT {self.mark}"

    # -- money ----------------------------------------------------------------------------

    def spent(self) -> str:
        return (
            f"SELECT COALESCE(SUM(dollars), 0) AS s FROM runs WHERE routine = {self.mark} "
            f"AND started_at >= {self.mark} AND started_at < {self.mark}"
        )

    def spent_by_routine(self) -> str:
        """Each routine's dollars in [start, end): `spent` for every routine in one range
        scan of runs_started (`spent_today_many`)."""
        return (
            "SELECT routine, COALESCE(SUM(dollars), 0) AS s FROM runs "
            f"WHERE started_at >= {self.mark} AND started_at < {self.mark} GROUP BY routine"
        )

    def run_totals(self) -> str:
        return (
            "SELECT routine, COUNT(*) AS runs, "
            + "".join(f"COALESCE(SUM({c}), 0) AS {c}, " for c in SUMS)
            + f"COALESCE(SUM({NANO}), 0) AS nano FROM runs "
            f"WHERE started_at >= {self.mark} AND started_at < {self.mark} "
            f"AND COALESCE(status, exit_status, '') NOT IN {sql_in(NOT_A_RUN)} GROUP BY routine"
        )

    def day_totals(self) -> str:
        return (
            "SELECT routine, SUM(runs - skipped - missed) AS runs, "
            + "".join(f"SUM({c}) AS {c}, " for c in SUMS)
            + f"SUM(nanodollars) AS nano FROM run_days WHERE start_at >= {self.mark} "
            f"AND start_at < {self.mark} GROUP BY routine HAVING SUM(runs - skipped - missed) > 0"
        )

    def dollars_on(self) -> str:
        """Nanodollars of the runs and the day rows in [start, end) (bound twice)."""
        m = self.mark
        return (
            f"SELECT (SELECT COALESCE(SUM({NANO}), 0) FROM runs "
            f"WHERE started_at >= {m} AND started_at < {m}) + "
            "(SELECT COALESCE(SUM(nanodollars), 0) FROM run_days "
            f"WHERE start_at >= {m} AND start_at < {m}) AS nano"
        )

    # -- per-routine state ------------------------------------------------------------------

    def state(self) -> str:
        return f"SELECT * FROM routine_state WHERE routine = {self.mark}"

    def states(self) -> str:
        return "SELECT * FROM routine_state"

    def rebind_override(self) -> str:
        """The override moves to the file's new identity only if it was bound to `was` ('':
        bound to no file, a row from before the binding)."""
        m = self.mark
        return (
            f"UPDATE routine_state SET file_identity = {m} WHERE routine = {m} "
            f"AND COALESCE(file_identity, '') = {m} AND enabled_override IS NOT NULL"
        )

    def last_runs(self) -> str:
        """Each routine's newest finished run, as the transaction that finished it noted it."""
        return (
            "SELECT routine, last_run_id, last_status, last_outcome, last_started, "
            "last_finished FROM routine_state WHERE last_status IS NOT NULL"
        )


SQLITE = Dialect(mark="?", lock="", skip="")
PG = Dialect(mark="%s", lock=" FOR UPDATE", skip=" FOR UPDATE SKIP LOCKED")

# Each run's dollars as integer nanodollars (and its duration in ms), the same expression
# wherever money is summed, so sums are exact whatever order rows are added in.
NANO = "CAST(ROUND(CAST(COALESCE(dollars, 0) AS NUMERIC) * 1000000000) AS BIGINT)"
MS = "CAST(ROUND(CAST(COALESCE(duration_sec, 0) AS NUMERIC) * 1000) AS BIGINT)"
SUMS = ("input_tokens", "output_tokens", "local_input_tokens", "local_output_tokens")

# A run as `RunRow` holds it (a v2.0.x exit_status stands in for a status it lacks).
ROW_FIELDS = ", ".join(
    (
        "id",
        "routine",
        "run_id",
        "slot",
        "trigger",
        "COALESCE(status, exit_status) AS status",
        "outcome",
        "detail",
        "started_at",
        "finished_at",
        "duration_sec",
        "route",
        "model",
        "escalated",
        "escalated_reason",
        "input_tokens",
        "output_tokens",
        "local_input_tokens",
        "local_output_tokens",
        "tool_calls",
        "tools_used",
        "dollars",
        "output_file",
        "parent_run_id",
        "tried_model",
    )
)
FINISH_COLUMNS = (
    "status",
    "outcome",
    "detail",
    "finished_at",
    "duration_sec",
    "route",
    "model",
    "escalated",
    "escalated_reason",
    "input_tokens",
    "output_tokens",
    "local_input_tokens",
    "local_output_tokens",
    "tool_calls",
    "tools_used",
    "dollars",
    "output_file",
    "tried_model",
)

# The distinct routines of runs and of claims, one index step each (a skip scan over the
# (routine, ...) index, not a walk over every row).
RUN_ROUTINES = (
    "WITH RECURSIVE n(r) AS (SELECT MIN(routine) FROM runs UNION ALL "
    "SELECT (SELECT MIN(routine) FROM runs WHERE routine > n.r) FROM n WHERE n.r IS NOT NULL) "
    "SELECT r FROM n WHERE r IS NOT NULL"
)
CLAIM_ROUTINES = RUN_ROUTINES.replace("FROM runs", "FROM claims")
