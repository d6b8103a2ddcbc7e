"""`vinos-routine setup`: the first run after a pip, pipx or source install.

Writes the user units pointing at this install and the completions for the user's shell,
checks what the sandbox, notifications and signing need, and lists the starters. The
decisions are supervisor/cli/setupplan.py's; this module gathers the facts, prints the plan and
writes what it says (never anything else). `--check` only reports.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from supervisor.cli.commands.common import add_parser

__all__ = ["register"]

EXAMPLE = """\
  vinos-routine setup            # write the units and completions, report what is missing
  vinos-routine setup --check    # only report (exit 1 when something would change or is missing)
  vinos-routine setup --json
"""
DOCTOR_EXAMPLE = """\
  vinos-routine doctor           # what setup would change, and what is missing (exit 1 if any)
  vinos-routine doctor --json
"""


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "setup",
        "set up this install: user units, shell completions, the secrets folder, and a check "
        "of what it needs",
        EXAMPLE,
    )
    p.add_argument("--check", action="store_true", help="only report; change nothing")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(func=run)
    d = add_parser(
        sub,
        "doctor",
        "check this install as `setup --check` does: units, user manager, PATH, secrets, "
        "sandbox tools, keys, and the local servers enabled routines use",
        DOCTOR_EXAMPLE,
    )
    d.add_argument("--json", action="store_true", help="print the report as one JSON object")
    d.set_defaults(func=run, check=True)


def this_program() -> tuple[str, ...]:
    """The argv that runs this very install: the console script that is running (pip's venv
    bin, pipx's ~/.local/bin, /usr/bin), else `python -m supervisor` with this interpreter."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "vinos-routine" and argv0.is_file():
        return (str(argv0.absolute()),)
    script = Path(sys.executable).parent / "vinos-routine"
    if script.is_file():
        return (str(script),)
    return (sys.executable, "-m", "supervisor")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, UnicodeDecodeError):
        return None


def _package_unit(home: Path, env: dict[str, str]) -> tuple[Path | None, str | None]:
    """A daemon unit installed outside the user's config dir (by a package), and its program."""
    from supervisor.cli.userunits import SERVICE, unit_dirs

    for d in unit_dirs(home, env)[1:]:
        text = _read(d / SERVICE)
        if text is None:
            continue
        for line in text.splitlines():
            if line.startswith("ExecStart=") and line.endswith(" daemon"):
                return d / SERVICE, line.removeprefix("ExecStart=").removesuffix(" daemon")
        return d / SERVICE, None
    return None, None


def _completion(shell: str, home: Path, env: dict[str, str]) -> tuple[Path, str] | None:
    from supervisor.cli.completions import FILES, render

    data = Path(env.get("XDG_DATA_HOME") or home / ".local/share")
    config = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    where = {
        "bash": data / "bash-completion/completions/vinos-routine",
        "zsh": data / "zsh/site-functions/_vinos-routine",
        "fish": config / "fish/completions/vinos-routine.fish",
    }
    if shell not in where:
        return None
    return where[shell], render()[FILES[shell]]


# Where a package puts a shell's completion for vinos-routine, under each of XDG_DATA_DIRS
# (bash-completion and fish search those; zsh's fpath has the first two on Arch and Debian).
SYSTEM_COMPLETIONS = {
    "bash": ("bash-completion/completions/vinos-routine",),
    "zsh": ("zsh/site-functions/_vinos-routine", "zsh/vendor-completions/_vinos-routine"),
    "fish": ("fish/vendor_completions.d/vinos-routine.fish", "fish/completions/vinos-routine.fish"),
}


def _system_completion(shell: str, env: dict[str, str], mine: Path | None) -> Path | None:
    """A completion for vinos-routine a package installed for `shell`, if any."""
    dirs = (env.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(":")
    for d in filter(None, dirs):
        for rel in SYSTEM_COMPLETIONS.get(shell, ()):
            path = Path(d) / rel
            if path != mine and path.is_file():
                return path
    return None


def _missing_tools(bwrap: str) -> dict[str, str]:
    from sandbox.binaries import BinaryRefused, check_binary
    from sandbox.seccomp import SeccompUnavailable, bpf

    out: dict[str, str] = {}
    try:
        check_binary(bwrap)
    except BinaryRefused as exc:
        out["bwrap"] = str(exc)
    try:
        bpf()
    except SeccompUnavailable as exc:
        out["libseccomp"] = str(exc)
    for tool in ("notify-send", "ssh-keygen"):
        if shutil.which(tool) is None:
            out[tool] = f"{tool} is not on PATH"
    return out


def _key_problem(path: Path) -> str | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if st.st_size == 0:
        return "is empty"
    if st.st_mode & 0o077:
        return f"is open to other users (chmod 600 {path})"
    return None


def _no_manager(env: dict[str, str]) -> str | None:
    """Why no systemd user manager answers for this session (None: one does). Asked of
    `systemctl --user` itself: in a container, WSL or an ssh session without a logind session
    it fails, and its first line says why."""
    if shutil.which("systemctl") is None:
        return "systemctl is not installed"
    if not env.get("XDG_RUNTIME_DIR"):
        return "XDG_RUNTIME_DIR is not set, so there is no session bus"
    try:
        done = subprocess.run(
            ["systemctl", "--user", "show-environment"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"systemctl --user failed: {exc}"
    if done.returncode == 0:
        return None
    first = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
    return f"systemctl --user: {first}"


def _off_path(program: tuple[str, ...], env: dict[str, str]) -> Path | None:
    """The console script's dir, when PATH does not find this very program by its name."""
    if len(program) != 1:
        return None
    script = Path(program[0])
    found = shutil.which(script.name, path=env.get("PATH", os.defpath))
    if found is not None and Path(found).resolve() == script.resolve():
        return None
    return script.parent


def _mode(path: Path) -> int | None:
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        return None


def gather(env: dict[str, str]) -> Any:
    """The facts setup decides on, read from this machine."""
    import importlib.util
    from importlib.resources import files

    from routines.spec.config import ConfigInvalid, load_config
    from routines.spec.paths import paths
    from sandbox.overlay import quota_in_force
    from supervisor.cli.client import daemon_locks, lock_holder
    from supervisor.cli.commands.capabilities import in_force
    from supervisor.cli.distro import family, os_release
    from supervisor.cli.setupplan import SHELL_ONLY, Facts
    from supervisor.cli.userunits import DAEMON_UNITS, DASHBOARD_UNITS, packaged, unit_dirs
    from supervisor.engine import notify

    home = Path(env.get("HOME") or os.path.expanduser("~"))
    p = paths()
    unit_dir = unit_dirs(home, env)[0]
    units = {name: packaged(name) for name in DAEMON_UNITS + DASHBOARD_UNITS}
    shell = Path(env.get("SHELL", "")).name
    completion = _completion(shell, home, env)
    config_dir = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    env_file = config_dir / "vinos-routine/daemon.env"
    env_text = _read(env_file) or ""
    config_problems: tuple[str, ...] = ()
    ntfy_token: str | None = None
    try:
        config = load_config(p.config_file)
        bwrap, providers = config.sandbox.bwrap, config.providers
        if config.ntfy is not None:  # the token is optional: only one open to others is wrong
            ntfy_token = _key_problem(p.ntfy_token_file)
            ntfy_token = None if ntfy_token == "does not exist" else ntfy_token
    except ConfigInvalid as exc:
        from sandbox.binaries import DEFAULT_BWRAP

        bwrap, providers = DEFAULT_BWRAP, {}
        config_problems = tuple(f"{pr.key}: {pr.message}" for pr in exc.problems)
    premium_missing, answers, unreachable = _routine_facts(p, providers)
    existing: dict[Path, str | None] = {unit_dir / n: _read(unit_dir / n) for n in units}
    if completion is not None:
        existing[completion[0]] = _read(completion[0])
    package_unit, package_program = _package_unit(home, env)
    starters = sorted(
        entry.name.removesuffix(".toml")
        for entry in files("routines.starters").iterdir()
        if entry.name.endswith(".toml")
    )
    program = this_program()
    environment = {k: env[k] for k in ("VINOS_HOME", "VINOS_SYSTEM_DIR") if env.get(k)}
    if program[1:] == ("-m", "supervisor"):  # a source tree, not installed: import it from there
        from supervisor.engine.spawn import package_root  # one place knows where our packages are

        environment["PYTHONPATH"] = package_root()
    return Facts(
        program=program,
        unit_dir=unit_dir,
        units=units,
        existing=existing,
        package_unit=package_unit,
        package_program=package_program,
        environment=environment,
        dashboard=importlib.util.find_spec("starlette") is not None,
        shell=shell,
        completion=completion,
        system_completion=_system_completion(
            shell, env, None if completion is None else completion[0]
        ),
        missing=_missing_tools(bwrap),
        key_problem=_key_problem(p.api_key_file),
        config_problems=config_problems,
        ntfy_token_file=p.ntfy_token_file,
        ntfy_token_problem=ntfy_token,
        key_in_shell=bool(env.get("ANTHROPIC_API_KEY", "").strip()),
        env_file=env_file,
        shell_only=tuple(n for n in SHELL_ONLY if env.get(n) and not _sets(env_text, n)),
        starters=tuple(starters),
        key_file=p.api_key_file,
        no_manager=_no_manager(env),
        daemon_pid=lock_holder(daemon_locks(p)),
        secrets_mode=_mode(p.secrets_dir),
        secrets_readme=_read(p.secrets_dir / "README"),
        off_path=_off_path(program, env),
        distro=family(os_release()),
        premium_missing=premium_missing,
        providers=answers,
        unreachable=unreachable,
        run_limits=in_force(p),
        disk_quota=quota_in_force(),
        notify_actions=notify.actions_in_force(),
    )


def _routine_facts(
    p: Any, providers: Any
) -> tuple[dict[str, str], tuple[Any, ...], dict[str, str]]:
    """Of the enabled routines: each `auto` one that may escalate with no premium key (what
    to do), and what each local provider from config.toml that one with tools uses answers
    when asked whether it shows the model the tools (`python -m worker.mcpconnect
    --providers`, as `validate --connect` asks it), and which of those does not answer."""
    from supervisor.hostcheck import premium_key_missing

    enabled = _enabled_agents(p, providers)
    missing = {
        e.name: why
        for e in enabled
        if e.routine is not None and (why := premium_key_missing(p, e.routine, providers))
    }
    answers, unreachable = _provider_answers(
        [e for e in enabled if e.routine is not None and _local(e.routine.agent, providers)],
        providers,
    )
    return missing, answers, unreachable


def _local(agent: Any, providers: Any) -> bool:
    """Whether the routine's local leg is a provider of config.toml's."""
    from routines.spec.providers import RouteInvalid, plan_route

    try:
        return plan_route(agent, providers).local.settings is not None
    except RouteInvalid:
        return False  # validate reports it


def _enabled_agents(p: Any, providers: Any) -> list[Any]:
    """The enabled agent routines doctor has a question about: `auto` ones, and those on a
    local provider. No such file: the ledger is not opened (nor made)."""
    from contextlib import closing

    from routines.ledger import LedgerError, RoutineState, is_enabled
    from routines.spec import Route
    from routines.spec.registry import scan
    from supervisor.fleet.view import cli_ledger

    entries = [
        e
        for e in scan(p).entries.values()
        if e.valid
        and e.routine is not None
        and e.routine.agent is not None
        and (e.routine.agent.route is Route.AUTO or _local(e.routine.agent, providers))
    ]
    if not entries:
        return []
    states: dict[str, RoutineState] = {}
    try:
        with closing(cli_ledger(p)) as ledger:
            states = ledger.states()
    except LedgerError:
        pass  # the files' own `enabled` stands in, as in `status` with its ledger away
    return [e for e in entries if e.routine is not None and is_enabled(states, e.routine)]


def _provider_answers(local: list[Any], providers: Any) -> tuple[tuple[Any, ...], dict[str, str]]:
    """What each local provider the `local` entries use answers, and which does not answer."""
    if not local:
        return (), {}
    from supervisor.cli.commands.validate import connect_rows
    from supervisor.cli.setupplan import ProviderAnswer
    from supervisor.hostcheck import local_provider_down

    names = {str(e.path): e.name for e in local}
    answers = tuple(
        ProviderAnswer(row["provider"], names.get(row["file"], row["file"]), row.get("error"))
        for row in connect_rows(["--providers"], list(names))
    )
    users: dict[str, list[str]] = {}
    for a in answers:
        users.setdefault(a.provider, []).append(a.routine)
    unreachable = {
        name: down
        for name, routines in users.items()
        if name in providers
        and (down := local_provider_down(name, providers[name], ", ".join(sorted(routines))))
    }
    return answers, unreachable


def _sets(env_file_text: str, name: str) -> bool:
    return any(line.strip().startswith(f"{name}=") for line in env_file_text.splitlines())


def _write(path: Path, text: str, mode: int) -> None:
    """Replace `path` by a temp file and a rename: a unit is never seen half written. (Not
    routines.store's no-follow write: ~/.config is often a link into a dotfiles repo.) A new
    dir is 0700 (main's umask), as ~/.vinos/secrets must be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.setup-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(mode)
    os.replace(tmp, path)


def _reload_manager(env: dict[str, str]) -> str:
    """`systemctl --user daemon-reload`, when a user manager answers; what happened."""
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if shutil.which("systemctl") is None or not Path(runtime, "systemd/private").exists():
        return "no user manager answers here: run `systemctl --user daemon-reload` in your session"
    done = subprocess.run(
        ["systemctl", "--user", "daemon-reload"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return f"systemctl --user daemon-reload failed: {done.stderr.strip()}"
    return "ran systemctl --user daemon-reload"


def _carry_out(to_write: list[Any], facts: Any, env: dict[str, str], quiet: bool) -> list[str]:
    """Write what the plan says, each said first (unless `quiet`), then reload the user
    manager when a unit changed and one answers; what was done besides the writes."""
    for item in to_write:
        assert item.path is not None and item.text is not None
        if not quiet:
            print(f"{item.what}: {item.detail}", flush=True)
        _write(item.path, item.text, item.mode)
    if facts.no_manager is None and any(i.what.startswith("unit ") for i in to_write):
        return [_reload_manager(env)]
    return []


def run(args: argparse.Namespace) -> int:
    import json

    from supervisor.cli.setupplan import State, next_step, plan

    env = dict(os.environ)
    facts = gather(env)
    items = plan(facts)
    to_write = [i for i in items if i.state is State.WRITE]
    wrong = [i for i in items if i.state in (State.KEPT, State.MISSING)]
    problems = wrong + to_write
    done = [] if args.check else _carry_out(to_write, facts, env, quiet=args.json)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": not (problems if args.check else wrong),
                    "check": args.check,
                    "items": [i.as_json() for i in items],
                    "done": done,
                }
            )
        )
    else:
        for item in items:
            if item.state is State.WRITE and not args.check:
                continue  # said as it was written
            label = "would write" if item.state is State.WRITE else str(item.state)
            print(f"{label:>11}  {item.what}: {item.detail}")
        for line in done:
            print(f"       done  {line}")
        if not args.check and any(i.what.startswith("unit ") for i in to_write):
            print(f"\n{next_step(facts)}")
    return 1 if args.check and problems else 0
