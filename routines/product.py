"""What the product says of itself in every process: its version, and why it refuses root."""

from __future__ import annotations

__all__ = ["ROOT_REFUSAL", "version"]

# sandbox/probe.py holds the same text for the sandbox (it imports nothing of ours:
# pyproject.toml's import contracts); tests/sandbox/test_sandbox_probe.py pins the two equal.
ROOT_REFUSAL = (
    "vinos-routine refuses to run as root: as uid 0, bubblewrap keeps the host's file access "
    "even inside its namespaces, so a routine's shell tools could read /etc/shadow. Run it as "
    "your own user: systemctl --user enable --now vinos-routined"
)


def version() -> str:
    """The installed distribution's version. Looked up only when asked: importlib.metadata
    costs a command ~20 ms."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("vinos-routine")
    except PackageNotFoundError:
        return "0.1.0"
