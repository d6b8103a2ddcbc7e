"""What `vinos-routine setup` would do, decided from facts gathered beforehand: a pure function
from `Facts` to a list of `Item`s, each already written as the line the user reads.

The command (supervisor/cli/commands/setup.py) gathers the facts, prints the plan, and writes
what the plan says to write, nothing else: setup changes nothing without saying what, and a
second run finds everything `OK` (tests/cli/test_cli_setup.py::
test_setup_writes_the_units_and_completions_then_a_second_run_changes_nothing).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from supervisor.userunits import DAEMON_UNITS, DASHBOARD_UNITS, SETUP_MARK, written_unit

__all__ = ["COSTS", "Facts", "Item", "State", "plan"]


class State(enum.StrEnum):
    OK = "ok"  # already as it should be: nothing to do
    WRITE = "write"  # setup writes this file (with --check: it would)
    KEPT = "kept"  # a file of the user's own is in the way: left alone, said why
    MISSING = "missing"  # something setup cannot provide: what it costs, how to get it
    NOTE = "note"  # advice: nothing is wrong, nothing is written


# A missing host tool or file → what it costs. The Debian and Arch packages that provide it.
COSTS: dict[str, tuple[str, str, str]] = {
    "bwrap": (
        "every shell tool and command routine fails closed: nothing runs sandboxed, so "
        "nothing runs",
        "bubblewrap",
        "bubblewrap",
    ),
    "libseccomp": (
        "the sandbox cannot load its seccomp filter and fails closed, as without bwrap",
        "libseccomp2",
        "libseccomp",
    ),
    "notify-send": (
        "no desktop notifications: not the three-strike notice when a routine is turned off, "
        "not actions waiting for you, not `notify = true` outputs",
        "libnotify-bin",
        "libnotify",
    ),
    "ssh-keygen": (
        "no signed routines: `sign` and `trust` fail, auto_approve never takes effect, every "
        "proposed action waits for you",
        "openssh-client",
        "openssh",
    ),
}
# Variables a shell may set that the daemon, started by systemd, does not inherit.
SHELL_ONLY = ("ANTHROPIC_BASE_URL", "OLLAMA_HOST", "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")


@dataclass(frozen=True)
class Facts:
    """What `setup` found, gathered by the command before anything is decided."""

    program: tuple[str, ...]  # the argv that runs this install, before the subcommand
    unit_dir: Path  # where setup writes units (~/.config/systemd/user)
    units: Mapping[str, str]  # the packaged text of each unit
    existing: Mapping[Path, str | None]  # the current text of each file setup may write
    package_unit: Path | None = None  # a unit a package installed (/usr/lib/systemd/user/…)
    package_program: str | None = None  # the program that unit starts
    environment: Mapping[str, str] = field(default_factory=dict)  # VINOS_* to carry over
    dashboard: bool = False  # the [dashboard] extra is importable
    shell: str = ""  # the basename of $SHELL
    completion: tuple[Path, str] | None = None  # where the shell's completion goes, its text
    missing: Mapping[str, str] = field(default_factory=dict)  # tool → why it counts as missing
    key_problem: str | None = None  # None: the key file holds a key only you can read
    key_in_shell: bool = False  # ANTHROPIC_API_KEY is set in this shell
    env_file: Path = Path("~/.config/vinos-routine/daemon.env")
    shell_only: tuple[str, ...] = ()  # SHELL_ONLY variables set here but not in env_file
    starters: tuple[str, ...] = ()
    key_file: Path = Path("~/.vinos/secrets/anthropic-key")


@dataclass(frozen=True)
class Item:
    what: str  # "unit vinos-routined.service", "bwrap", "completions (bash)"
    state: State
    detail: str  # the line the user reads
    path: Path | None = None
    text: str | None = None  # what to write there (State.WRITE only)

    def as_json(self) -> dict[str, object]:
        return {
            "what": self.what,
            "state": str(self.state),
            "detail": self.detail,
            "path": None if self.path is None else str(self.path),
        }


def _file(what: str, path: Path, want: str, current: str | None, why: str) -> Item:
    if current == want:
        return Item(what, State.OK, f"{path} is up to date", path)
    if current is not None and not current.startswith(SETUP_MARK):
        return Item(
            what,
            State.KEPT,
            f"{path} exists and is not one setup wrote: left as it is (remove it and run "
            "setup again to have it written)",
            path,
        )
    verb = "rewrites" if current is not None else "writes"
    return Item(what, State.WRITE, f"{verb} {path}: {why}", path, want)


def _units(f: Facts) -> list[Item]:
    program = " ".join(f.program)
    if f.package_unit is not None and f.package_program == program:
        return [
            Item(
                f"unit {name}",
                State.OK,
                f"installed by the package in {f.package_unit.parent}",
                f.package_unit.parent / name,
            )
            for name in DAEMON_UNITS
        ]
    names = DAEMON_UNITS + (DASHBOARD_UNITS if f.dashboard else ())
    out = []
    for name in names:
        path = f.unit_dir / name
        want = written_unit(f.units[name], f.program, f.environment)
        why = f"starts {program}"
        if f.package_unit is not None:
            why += f" (overrides the package's unit in {f.package_unit.parent})"
        out.append(_file(f"unit {name}", path, want, f.existing.get(path), why))
    if not f.dashboard:
        out.append(
            Item(
                "dashboard units",
                State.NOTE,
                "not written: the dashboard needs the [dashboard] extra (see docs/install.md); "
                "run setup again after installing it",
            )
        )
    return out


def _completion(f: Facts) -> list[Item]:
    what = f"completions ({f.shell or 'no shell'})"
    if f.completion is None:
        return [
            Item(
                what,
                State.NOTE,
                f"no completions for {f.shell or 'an unknown $SHELL'}: there are bash, zsh "
                "and fish ones",
            )
        ]
    path, text = f.completion
    item = _file(what, path, text, f.existing.get(path), "where the shell looks for yours")
    out = [item]
    if f.shell == "zsh":
        out.append(
            Item(
                what,
                State.NOTE,
                f"zsh reads it when its directory is on fpath: add "
                f"`fpath=({path.parent} $fpath)` before compinit in ~/.zshrc",
            )
        )
    return out


def _checks(f: Facts) -> list[Item]:
    out = []
    for tool, (cost, debian, arch) in COSTS.items():
        problem = f.missing.get(tool)
        if problem is None:
            out.append(Item(tool, State.OK, "found"))
            continue
        out.append(
            Item(
                tool,
                State.MISSING,
                f"{problem}: {cost}. Install it: sudo apt-get install {debian} "
                f"(Arch: sudo pacman -S {arch})",
            )
        )
    if f.key_problem is None:
        out.append(Item("anthropic key", State.OK, f"{f.key_file} holds a key", f.key_file))
    else:
        fix = (
            f"ANTHROPIC_API_KEY is set in this shell, but the daemon does not see it: "
            f"(umask 077; mkdir -p {f.key_file.parent}; printenv ANTHROPIC_API_KEY > "
            f"{f.key_file})"
            if f.key_in_shell
            else f"write your key there (chmod 600 {f.key_file})"
        )
        out.append(
            Item(
                "anthropic key",
                State.MISSING,
                f"{f.key_file} {f.key_problem}: agent routines cannot use route anthropic, nor "
                f"escalate on auto (Ollama and command routines work). {fix}",
                f.key_file,
            )
        )
    for name in f.shell_only:
        out.append(
            Item(
                name,
                State.NOTE,
                f"{name} is set in this shell, but the daemon does not see it: add a line "
                f"{name}=… to {f.env_file}, then systemctl --user restart vinos-routined",
                f.env_file,
            )
        )
    return out


def _starters(f: Facts) -> list[Item]:
    if not f.starters:
        return []
    return [
        Item(
            "starters",
            State.NOTE,
            f"starter routines: {', '.join(f.starters)}; start from one with "
            f"vinos-routine create my-brief --from {f.starters[0]}",
        )
    ]


def plan(f: Facts) -> list[Item]:
    """Everything setup reports, in the order it prints it."""
    return _units(f) + _completion(f) + _checks(f) + _starters(f)
