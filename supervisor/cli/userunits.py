"""The systemd user units: where a user manager finds them, the text `setup` writes for an
install, and the hint that tells a user how to start the daemon (which cannot work without a
unit).

The units themselves are `supervisor/units/*`, shipped in the wheel and installed byte for
byte by the Arch package; a unit `setup` writes is that text with `ExecStart=` pointing at the
program that ran `setup`
(tests/cli/test_cli_setup.py::test_a_written_unit_is_the_packaged_one_for_this_program).
Pure functions of their arguments, but for `packaged()` and `find_unit()`, which read files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "DAEMON_UNITS",
    "DASHBOARD_UNITS",
    "SETUP_MARK",
    "exec_quote",
    "find_unit",
    "packaged",
    "start_hint",
    "unit_dirs",
    "written_unit",
]

SERVICE = "vinos-routined.service"
DAEMON_UNITS = (SERVICE, "vinos-routined.socket")
DASHBOARD_UNITS = ("vinos-routine-dashboard.service", "vinos-routine-dashboard.socket")
# The first line of every unit `setup` writes: a file without it is the user's own, never
# overwritten.
SETUP_MARK = "# Written by `vinos-routine setup`"
PACKAGED_PROGRAM = "/usr/bin/vinos-routine"


def unit_dirs(home: Path, env: Mapping[str, str]) -> tuple[Path, ...]:
    """Where a user manager looks for user units, the user's own first (systemd.unit(5)); the
    first is where `setup` writes."""
    config = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    data = Path(env.get("XDG_DATA_HOME") or home / ".local/share")
    return (
        config / "systemd/user",
        Path("/etc/systemd/user"),
        data / "systemd/user",
        Path("/usr/local/lib/systemd/user"),
        Path("/usr/lib/systemd/user"),
        Path("/lib/systemd/user"),
    )


def find_unit(home: Path, env: Mapping[str, str], name: str = SERVICE) -> Path | None:
    """The unit file a user manager would load for `name`, or None."""
    for d in unit_dirs(home, env):
        if (d / name).is_file():
            return d / name
    return None


def start_hint(home: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """How to start the daemon here: `systemctl --user enable --now` needs a unit, which only
    the Arch package and `setup` install
    (tests/cli/test_cli_setup.py::test_status_points_at_setup_without_a_unit)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or os.path.expanduser("~")) if home is None else home
    if find_unit(home, env) is None:
        return (
            "no user unit is installed yet: run `vinos-routine setup`, then "
            "systemctl --user enable --now vinos-routined (or run `vinos-routine daemon`)"
        )
    return "start it: systemctl --user enable --now vinos-routined"


def packaged(name: str) -> str:
    """The unit as the package ships it (ExecStart=/usr/bin/vinos-routine …)."""
    from importlib.resources import files

    return files("supervisor.units").joinpath(name).read_text(encoding="utf-8")


_PLAIN = re.compile(r"[A-Za-z0-9_./+:@=,%-]+")


def exec_quote(word: str) -> str:
    """One word of an Exec line: as it is when plain, else double-quoted with systemd's
    escapes; `%` (a specifier) doubled either way."""
    word = word.replace("%", "%%")
    if _PLAIN.fullmatch(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _env_line(env: Mapping[str, str]) -> str:
    words = [exec_quote(f"{k}={v}") for k, v in sorted(env.items())]
    return "Environment=" + " ".join(words) + "\n"


def written_unit(text: str, program: Sequence[str], environment: Mapping[str, str]) -> str:
    """The packaged unit `text` for `program` (its argv, before the subcommand): ExecStart
    points at it, `environment` is set for it, and the first line says who wrote it."""
    argv = " ".join(exec_quote(w) for w in program)
    lines = text.splitlines(keepends=True)
    out = [f"{SETUP_MARK} for {' '.join(program)}: run it again after moving the install.\n"]
    for line in lines:
        if line.startswith(f"ExecStart={PACKAGED_PROGRAM} "):
            out.append(line.replace(PACKAGED_PROGRAM, argv, 1))
            if environment:
                out.append(_env_line(environment))
        else:
            out.append(line)
    return "".join(out)
