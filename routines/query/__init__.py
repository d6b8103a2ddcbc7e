"""The read model: what every reader shows of the routines, their runs and their costs, as
typed, frozen rows.

`list`, `status`, `status --waybar`, the daemon's answers and the dashboard all build their
routine rows here (`routine_rows`), from a registry and a ledger (the routines.ledger API: on
a fleet machine the fleet's PostgreSQL, so every reader shows the runs other machines made).
The rows are typed, immutable NamedTuples: the daemon sends them as JSON (`encode_rows`) and
a client makes them again (`decode_rows`); the text is the client's (supervisor/cli/render/),
never the daemon's. The runs (`history`, `brief`, the dashboard's routine, run and brief pages)
are routines.query.runs's rows; the money (`cost`, the dashboard's cost page) is
routines.query.costs's.

Light on import: the standard library only; the registry's parts are imported by the
functions that read them (a `list` the daemon answered decodes rows without loading the
loader, the ledger or msgspec).
"""

from routines.query.routines import RoutineRow, RowCache, decode_rows, encode_rows, routine_rows

__all__ = ["RoutineRow", "RowCache", "decode_rows", "encode_rows", "routine_rows"]
