"""The control socket: where `vinos-routine`, the dashboard and the bar talk to the daemon.

The server (`server.py`) and its answers, as data (`handlers.py`, `watch.py`, `snapshot.py`),
typed against `api.py`'s `Controlled`, never against the daemon. It answers the read model's
rows (routines.query); the client renders them (supervisor/cli/render/).
"""
