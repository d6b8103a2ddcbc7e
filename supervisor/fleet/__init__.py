"""A machine of a fleet sharing PostgreSQL (config.toml [fleet]): its `FleetSite` and `Member`
(`site.py`), the leases and heartbeat (`member.py`), offline mode (`offline.py`), the pure fleet
decisions (`plan.py`), and which ledger a read takes (`view.py`). Loaded only with [fleet].
"""
