"""The local web dashboard: `vinos-routine dashboard` (python -m dashboard).

Its own process, importing ipc and routines only. It reads the ledger read-only and makes
every change (enable, disable, run now, reload) through the daemon's control socket.
Its web libraries (Starlette, uvicorn, Jinja2, markdown-it-py) are imported here and nowhere
else.
"""

__all__: list[str] = []
