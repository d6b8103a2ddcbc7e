"""What `vinos-routine setup` would do, decided from facts gathered beforehand: a pure function
from `Facts` to a list of `Item`s, each already written as the line the user reads.

The command (supervisor/cli/commands/setup.py) gathers the facts, prints the plan, and writes
what the plan says to write, nothing else: setup changes nothing without saying what, and a
second run finds everything `OK` (tests/cli/test_cli_setup.py::
test_setup_writes_the_units_and_completions_then_a_second_run_changes_nothing).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from supervisor.cli.distro import Family, install_command
from supervisor.cli.userunits import DAEMON_UNITS, DASHBOARD_UNITS, SETUP_MARK, written_unit

__all__ = [
    "COMPLETION_MARK",
    "COSTS",
    "SECRETS_README",
    "Facts",
    "Item",
    "ProviderAnswer",
    "State",
    "next_step",
    "path_line",
    "plan",
]


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
class ProviderAnswer:
    """What a local server said when asked whether it shows an enabled routine's model its
    tools (worker/mcpconnect.py provider_rows, the question a run asks before its first call)."""

    provider: str
    routine: str
    error: str | None  # None: it shows them (or does not say)


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
    # A completion for vinos-routine a package installed for this shell (/usr/share/…): the
    # shell reads the user's own first, so one in the home would shadow it, and go stale when
    # the package is upgraded.
    system_completion: Path | None = None
    missing: Mapping[str, str] = field(default_factory=dict)  # tool → why it counts as missing
    key_problem: str | None = None  # None: the key file holds a key only you can read
    key_in_shell: bool = False  # ANTHROPIC_API_KEY is set in this shell
    env_file: Path = Path("~/.config/vinos-routine/daemon.env")
    shell_only: tuple[str, ...] = ()  # SHELL_ONLY variables set here but not in env_file
    starters: tuple[str, ...] = ()
    key_file: Path = Path("~/.vinos/secrets/anthropic-key")
    # Why no systemd user manager answers here (a container, WSL, a plain ssh session), in the
    # words of `systemctl --user`; None: one answers and starts the units.
    no_manager: str | None = None
    daemon_pid: int | None = None  # a daemon already runs for this VINOS_HOME (any way started)
    # The secrets dir's permission bits (None: it does not exist) and its README's text.
    secrets_mode: int | None = 0o700
    secrets_readme: str | None = None
    # Where the console script is when PATH does not find it there (None: PATH finds it, or
    # this is no console script but `python -m supervisor`).
    off_path: Path | None = None
    distro: Family | None = None  # from /etc/os-release: whose install command a hint names
    config_problems: tuple[str, ...] = ()  # config.toml's errors: "[key]: message"
    ntfy_token_file: Path = Path("~/.vinos/secrets/ntfy-token")
    # [notify.ntfy] is set and its token file (secrets/ntfy-token) is wrong (None: fine, or none)
    ntfy_token_problem: str | None = None
    # Each enabled `auto` routine that can escalate and has no premium key: what to do
    # (supervisor/hostcheck.py premium_key_missing, as validate, status and list say it).
    premium_missing: Mapping[str, str] = field(default_factory=dict)
    providers: tuple[ProviderAnswer, ...] = ()  # asked for enabled routines with tools
    # Of those providers, each that does not answer at all: what to do (naming the routines).
    # Its silence on tools says nothing, so it is not reported as showing them.
    unreachable: Mapping[str, str] = field(default_factory=dict)
    # supervisor/cli/commands/capabilities.py in_force: whether the kernel keeps the run
    # limits, and how
    run_limits: tuple[bool, str] = (False, "")
    # sandbox/overlay.py quota_in_force: whether the kernel keeps max_workspace_mb, and how
    disk_quota: tuple[bool, str] = (False, "")
    # supervisor/engine/notify.py actions_in_force: whether a "needs you" notification has its
    # "Open the dashboard" action here, and why
    notify_actions: tuple[bool, str] = (False, "")


@dataclass(frozen=True)
class Item:
    what: str  # "unit vinos-routined.service", "bwrap", "completions (bash)"
    state: State
    detail: str  # the line the user reads
    path: Path | None = None
    text: str | None = None  # what to write there (State.WRITE only)
    mode: int = 0o644  # the written file's mode (a secret's dir holds only 0600 files)

    def as_json(self) -> dict[str, object]:
        return {
            "what": self.what,
            "state": str(self.state),
            "detail": self.detail,
            "path": None if self.path is None else str(self.path),
        }


# The header line of every completion file scripts/gen-completions.py generates (and `setup`
# writes): a file that has it is ours to rewrite after an upgrade.
COMPLETION_MARK = "Generated by scripts/gen-completions.py"


def _ours_unit(text: str) -> bool:
    return text.startswith(SETUP_MARK)


def _ours_completion(text: str) -> bool:
    return COMPLETION_MARK in "".join(text.splitlines(keepends=True)[:3])


def _file(
    what: str,
    path: Path,
    want: str,
    current: str | None,
    why: str,
    ours: Callable[[str], bool] = _ours_unit,
) -> Item:
    if current == want:
        return Item(what, State.OK, f"{path} is up to date", path)
    if current is not None and not ours(current):
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
    if f.system_completion is not None:
        return [_packaged_completion(what, path, f.existing.get(path), f.system_completion)]
    item = _file(
        what, path, text, f.existing.get(path), "where the shell looks for yours", _ours_completion
    )
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


def _packaged_completion(what: str, path: Path, current: str | None, system: Path) -> Item:
    """A package's completion is there: none in the home, which the shell would read instead
    and which an upgrade of the package would leave stale."""
    if current is None:
        return Item(what, State.OK, f"installed by the package: {system}", system)
    return Item(
        what,
        State.NOTE,
        f"{path} shadows the package's {system} and goes stale when the package is upgraded: "
        f"remove it (rm {path}) unless you keep it on purpose",
        path,
    )


def _checks(f: Facts) -> list[Item]:
    out = []
    kernel, how = f.run_limits
    if how:  # a note where it is sampled: a host's fact, nothing setup could change
        out.append(Item("run limits", State.OK if kernel else State.NOTE, how))
    kernel, how = f.disk_quota
    if how:  # likewise: a note where it is polled
        out.append(Item("disk quota", State.OK if kernel else State.NOTE, how))
    takes, how = f.notify_actions
    if how and "notify-send" not in f.missing:  # a missing notify-send has its own line
        out.append(Item("notification actions", State.OK if takes else State.NOTE, how))
    for tool, (cost, debian, arch) in COSTS.items():
        problem = f.missing.get(tool)
        if problem is None:
            out.append(Item(tool, State.OK, "found"))
            continue
        command = install_command(f.distro, {Family.DEBIAN: (debian,), Family.ARCH: (arch,)})
        how = (
            f"sudo apt-get install {debian} (Arch: sudo pacman -S {arch})"
            if command is None
            else command
        )
        out.append(Item(tool, State.MISSING, f"{problem}: {cost}. Install it: {how}"))
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
    for problem in f.config_problems:  # the daemon refuses to start on them
        out.append(
            Item("config.toml", State.MISSING, f"{problem} (the daemon will not start on it)")
        )
    if f.ntfy_token_problem is not None:
        out.append(
            Item(
                "ntfy token",
                State.MISSING,
                f"{f.ntfy_token_file} {f.ntfy_token_problem}: the phone push is not sent",
                f.ntfy_token_file,
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


# What setup writes into a new ~/.vinos/secrets: how to put a key there, and nothing secret.
SECRETS_README = """\
# ~/.vinos/secrets: one secret per file, each readable by you alone (this directory is 0700).
# vinos-routine reads them here, at each run; none reaches a sandbox, a log line or the ledger.
#
# The Anthropic API key (used when ANTHROPIC_API_KEY is not set in the daemon's environment):
#   (umask 077; cat > ~/.vinos/secrets/anthropic-key)    # paste the key, Enter, then Ctrl-D
#
# A provider declared in ~/.vinos/config.toml names its own file:
#   [providers.openrouter]
#   key_file = "~/.vinos/secrets/openrouter-key"
#
# This README holds no secret; setup writes it only when the directory is new.
"""


def _secrets(f: Facts) -> list[Item]:
    readme = f.key_file.parent / "README"
    where = f.key_file.parent
    if f.secrets_mode is None:
        return [
            Item(
                "secrets",
                State.WRITE,
                f"creates {where} (mode 0700) with a README saying how to put a key there",
                readme,
                SECRETS_README,
                0o600,
            )
        ]
    if f.secrets_mode & 0o077:
        return [
            Item(
                "secrets",
                State.MISSING,
                f"{where} is open to other users (mode {f.secrets_mode:04o}): chmod 700 {where}",
                where,
            )
        ]
    return [Item("secrets", State.OK, f"{where} is yours alone (0700)", where)]


def path_line(shell: str, bin_dir: Path) -> str:
    """The line that puts `bin_dir` on PATH for `shell`, and the file it goes in."""
    if shell == "fish":
        return f"fish_add_path {bin_dir}"
    rc = "~/.zshrc" if shell == "zsh" else "~/.bashrc"
    return f"echo 'export PATH=\"{bin_dir}:$PATH\"' >> {rc}"


def _path(f: Facts) -> list[Item]:
    if f.off_path is None:
        return []
    return [
        Item(
            "PATH",
            State.MISSING,
            f"{f.off_path} is not on your PATH, so `vinos-routine` is not found in a new shell "
            f"until you add it: {path_line(f.shell, f.off_path)} (then open a new shell)",
        )
    ]


def _manager(f: Facts) -> list[Item]:
    if f.no_manager is None:
        return []
    if f.daemon_pid is not None:
        return [
            Item(
                "user manager",
                State.OK,
                f"no systemd user manager ({f.no_manager}), but the daemon runs "
                f"(pid {f.daemon_pid}), started by hand",
            )
        ]
    return [
        Item(
            "user manager",
            State.MISSING,
            f"no systemd user manager answers ({f.no_manager}), as in a container, WSL or a "
            "plain ssh session, so nothing starts the daemon: run `vinos-routine daemon` in a "
            "terminal of its own (or `vinos-routine daemon &` under your shell's job control; "
            "it stops when you log out), or, where systemd runs, keep a manager for you "
            "(sudo loginctl enable-linger $USER, then log in again) and "
            "systemctl --user enable --now vinos-routined",
        )
    ]


def _routines(f: Facts) -> list[Item]:
    """What keeps enabled routines from working as written: an escalation with no key, a
    local server that would not show the model its tools (one item per server and answer)."""
    out = [
        Item(f"routine {name}", State.MISSING, f"[agent].route: {why}")
        for name, why in sorted(f.premium_missing.items())
    ]
    by_answer: dict[tuple[str, str | None], list[str]] = {}
    for a in f.providers:
        by_answer.setdefault((a.provider, a.error), []).append(a.routine)
    for (provider, error), names in sorted(
        by_answer.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")
    ):
        used = ", ".join(sorted(set(names)))
        if error is None and provider in f.unreachable:
            out.append(Item(f"provider {provider}", State.MISSING, f.unreachable[provider]))
        elif error is None:
            out.append(Item(f"provider {provider}", State.OK, f"shows the tools (used by {used})"))
        else:
            out.append(Item(f"provider {provider}", State.MISSING, f"{error} (used by {used})"))
    return out


def next_step(f: Facts) -> str:
    """The line setup ends with after writing the units: how the daemon gets started here."""
    if f.no_manager is None:
        return "then: systemctl --user enable --now vinos-routined"
    if f.daemon_pid is not None:
        return f"then: restart the daemon (pid {f.daemon_pid}) to use this install"
    return "then: vinos-routine daemon    # no user manager here: it runs while this shell does"


def plan(f: Facts) -> list[Item]:
    """Everything setup reports, in the order it prints it."""
    return (
        _units(f)
        + _manager(f)
        + _completion(f)
        + _path(f)
        + _secrets(f)
        + _checks(f)
        + _routines(f)
        + _starters(f)
    )
