"""The read model: what every reader shows of the routines, as typed, frozen rows.

`list`, `status`, `status --waybar`, the daemon's answers and the dashboard all build their
routine rows here (`routine_rows`), from a registry and a ledger (the routines.ledger API: on
a fleet machine the fleet's PostgreSQL, so every reader shows the runs other machines made).
The rows are msgspec Structs, so the daemon sends them as they are and a client decodes them
back (`decode_rows`); the text is the client's (supervisor/cli/render/), never the daemon's.

Light on import: msgspec and the standard library only; the registry's parts are imported by
the functions that read them (a thin `list` decodes rows without loading the loader).
"""

from routines.query.routines import RoutineRow, decode_rows, encode_rows, routine_rows

__all__ = ["RoutineRow", "decode_rows", "encode_rows", "routine_rows"]
