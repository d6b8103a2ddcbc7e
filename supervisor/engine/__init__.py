"""The engine: what runs a routine, from a due slot to its recorded end. The scheduler and its
pure planner, the pool, a worker's job, spawn and finish, strikes, triggers, pauses, approvals,
housekeeping, the forkserver, a run's cgroup, and the `Site` seam it records through.

It is the bottom of the supervisor: it imports neither the control server, the fleet, the CLI
nor the daemon (an import contract in pyproject.toml); `supervisor/daemon.py` composes it.
"""
