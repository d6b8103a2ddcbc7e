"""`vinos-routine setup`: the user units for this install, the shell's completions, and what is
missing, each with what it costs. It says what it changes, changes nothing with --check, and a
second run changes nothing (idempotent). The user manager itself is in
tests/packaging/test_wheel.py (a pip and a pipx install through setup, a scheduled run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routines.spec.paths import paths
from supervisor.cli.completions import render
from supervisor.cli.setupplan import SECRETS_README
from supervisor.cli.userunits import (
    DAEMON_UNITS,
    SERVICE,
    exec_quote,
    find_unit,
    packaged,
    written_unit,
)
from tests.cli.cli_helpers import Cli
from tests.helpers import AGENT

REPO = Path(__file__).resolve().parent.parent.parent


def home_env(tmp_path: Path, **extra: str) -> dict[str, str | None]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env: dict[str, str | None] = {
        "HOME": str(home),
        "SHELL": "/bin/bash",
        "XDG_CONFIG_HOME": None,
        "XDG_DATA_HOME": None,
        # No package's completion (this machine may have one in /usr/share).
        "XDG_DATA_DIRS": str(tmp_path / "system-share"),
    }
    env.update(extra)
    return env


def report(
    cli: Cli, env: dict[str, str | None], *args: str
) -> tuple[int, dict[str, dict[str, str]]]:
    res = cli("setup", "--json", *args, env=env)
    out = json.loads(res.stdout)
    return res.returncode, {i["what"]: i for i in out["items"]}


def test_a_written_unit_is_the_packaged_one_for_this_program() -> None:
    text = packaged(SERVICE)
    assert text == (REPO / "supervisor/units" / SERVICE).read_text()
    assert "ExecStart=/usr/bin/vinos-routine daemon\n" in text
    mine = written_unit(text, ("/opt/my env/bin/vinos-routine",), {"VINOS_HOME": "/h/.v"})
    lines = mine.splitlines()
    assert lines[0].startswith("# Written by `vinos-routine setup` for /opt/my env/bin/")
    assert 'ExecStart="/opt/my env/bin/vinos-routine" daemon' in lines
    assert "Environment=VINOS_HOME=/h/.v" in lines
    # Every other line is the packaged unit's, in order: the hardening cannot drift.
    rest = [
        line for line in lines[1:] if not line.startswith(("ExecStart=", "Environment=VINOS_HOME"))
    ]
    assert rest == [line for line in text.splitlines() if not line.startswith("ExecStart=")]
    assert exec_quote("/a%b") == "/a%%b"


def test_setup_writes_the_units_and_completions_then_a_second_run_changes_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    env = home_env(tmp_path)
    home = Path(str(env["HOME"]))
    first = cli("setup", env=env)
    assert first.returncode == 0, first.stderr
    units = home / ".config/systemd/user"
    service = (units / SERVICE).read_text()
    program = Path(__import__("sys").executable).parent / "vinos-routine"
    assert f"ExecStart={program} daemon\n" in service
    assert f"Environment=VINOS_HOME={cli.home}" in service
    assert "EnvironmentFile=-%h/.config/vinos-routine/daemon.env\n" in service
    assert (units / "vinos-routined.socket").is_file()
    completion = home / ".local/share/bash-completion/completions/vinos-routine"
    assert completion.read_text() == render()["vinos-routine.bash"]
    # Each change was said before it was made.
    assert f"writes {units / SERVICE}" in first.stdout
    assert f"writes {completion}" in first.stdout

    mtime = (units / SERVICE).stat().st_mtime_ns
    again = cli("setup", env=env)
    assert again.returncode == 0
    assert f"writes {home}" not in again.stdout
    assert (units / SERVICE).stat().st_mtime_ns == mtime
    _, items = report(cli, env, "--check")
    for name in DAEMON_UNITS:
        assert items[f"unit {name}"]["state"] == "ok"
    assert items["completions (bash)"]["state"] == "ok"


def test_a_packaged_completion_is_found_and_none_is_written_over_it(
    cli: Cli, tmp_path: Path
) -> None:
    env = home_env(tmp_path, SHELL="/usr/bin/fish")
    system = tmp_path / "system-share/fish/vendor_completions.d/vinos-routine.fish"
    system.parent.mkdir(parents=True)
    system.write_text(render()["vinos-routine.fish"])
    res = cli("setup", env=env)
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "home/.config/fish").exists()
    assert f"completions (fish): installed by the package: {system}" in res.stdout


def test_setup_check_only_reports(cli: Cli, tmp_path: Path) -> None:
    env = home_env(tmp_path)
    code, items = report(cli, env, "--check")
    assert code == 1
    assert items[f"unit {SERVICE}"]["state"] == "write"
    assert not (tmp_path / "home/.config").exists()
    assert not (tmp_path / "home/.local").exists()


def test_a_unit_of_the_users_own_is_left_alone(cli: Cli, tmp_path: Path) -> None:
    env = home_env(tmp_path)
    own = tmp_path / "home/.config/systemd/user" / SERVICE
    own.parent.mkdir(parents=True)
    own.write_text("[Service]\nExecStart=/my/own daemon\n")
    code, items = report(cli, env)
    assert items[f"unit {SERVICE}"]["state"] == "kept"
    assert "not one setup wrote" in items[f"unit {SERVICE}"]["detail"]
    assert own.read_text() == "[Service]\nExecStart=/my/own daemon\n"
    assert code == 0


def test_what_is_missing_is_named_with_its_cost(cli: Cli, tmp_path: Path) -> None:
    # No notify-send and no ssh-keygen on this PATH; a key only in the shell.
    env = home_env(tmp_path, PATH=str(cli.bin), ANTHROPIC_API_KEY="sk-secret-in-shell",
                   ANTHROPIC_BASE_URL="http://127.0.0.1:9")  # fmt: skip
    res = cli("setup", "--check", env=env)
    out = res.stdout
    assert res.returncode == 1
    assert "notify-send: notify-send is not on PATH: no desktop notifications" in out
    assert "sudo apt-get install libnotify-bin" in out
    assert "ssh-keygen: ssh-keygen is not on PATH: no signed routines" in out
    assert "ANTHROPIC_API_KEY is set in this shell, but the daemon does not see it" in out
    assert "printenv ANTHROPIC_API_KEY >" in out
    assert "sk-secret-in-shell" not in out + res.stderr
    assert "ANTHROPIC_BASE_URL is set in this shell, but the daemon does not see it" in out
    assert "starter routines: day-brief" in out


def test_status_points_at_setup_without_a_unit(cli: Cli, tmp_path: Path) -> None:
    env = home_env(tmp_path)
    home = Path(str(env["HOME"]))
    assert find_unit(home, {}) is None, "a vinos-routined unit is installed system-wide here"
    for args in (["status"], ["reload"]):
        res = cli(*args, env=env)
        assert "no user unit is installed yet: run `vinos-routine setup`" in res.stdout + res.stderr
    assert cli("setup", env=env).returncode == 0
    res = cli("status", env=env)
    assert "start it: systemctl --user enable --now vinos-routined" in res.stdout


# Without XDG_RUNTIME_DIR the runtime dir falls back to /run/user/UID where it exists: under
# `make test` a real user manager made it, and the packaging tests' socket-activated daemon
# holds its lock while they run. On their worker (the "user-manager" xdist group), this test
# never runs beside that daemon (a daemon there is one this session started by hand, which
# setup rightly reports instead).
@pytest.mark.xdist_group("user-manager")
def test_without_a_user_manager_setup_says_how_to_run_the_daemon_and_doctor_checks_it(
    cli: Cli, tmp_path: Path
) -> None:
    # A container's session: no XDG_RUNTIME_DIR, so no bus and no user manager; the venv's bin
    # is not on this PATH. Real setup, real files.
    program = Path(__import__("sys").executable).parent / "vinos-routine"
    env = home_env(tmp_path, XDG_RUNTIME_DIR=None, PATH="/usr/bin:/bin")  # type: ignore[arg-type]
    res = cli("setup", env=env)
    assert res.returncode == 0, res.stderr
    assert "missing  user manager: no systemd user manager answers (XDG_RUNTIME_DIR is not " \
        "set" in res.stdout  # fmt: skip
    assert "run `vinos-routine daemon` in a terminal of its own" in res.stdout
    assert "sudo loginctl enable-linger $USER" in res.stdout
    assert "daemon-reload" not in res.stdout  # no manager to reload
    assert res.stdout.rstrip().splitlines()[-1].startswith("then: vinos-routine daemon")
    assert (
        f"{program.parent} is not on your PATH, so `vinos-routine` is not found in a new shell "
        f"until you add it: echo 'export PATH=\"{program.parent}:$PATH\"' >> ~/.bashrc"
    ) in res.stdout
    secrets = Path(cli.home) / "secrets"
    assert secrets.stat().st_mode & 0o777 == 0o700
    assert (secrets / "README").stat().st_mode & 0o777 == 0o600
    assert (secrets / "README").read_text() == SECRETS_README
    # `doctor` is `setup --check`: it changes nothing and finds the same three things.
    (secrets / "README").unlink()
    code, items = doctor(cli, env)
    assert code == 1
    assert items["user manager"]["state"] == "missing"
    assert items["PATH"]["state"] == "missing"
    assert items["secrets"]["state"] == "ok"
    assert not (secrets / "README").exists()
    secrets.chmod(0o755)
    assert doctor(cli, env)[1]["secrets"]["detail"] == (
        f"{secrets} is open to other users (mode 0755): chmod 700 {secrets}"
    )
    # On PATH, the line is gone.
    env["PATH"] = f"{program.parent}:/usr/bin:/bin"
    assert "PATH" not in doctor(cli, env)[1]


def doctor(cli: Cli, env: dict[str, str | None]) -> tuple[int, dict[str, dict[str, str]]]:
    res = cli("doctor", "--json", env=env)
    out = json.loads(res.stdout)
    return res.returncode, {i["what"]: i for i in out["items"]}


def test_doctor_and_validate_refuse_a_bad_ntfy_url(cli: Cli, tmp_path: Path) -> None:
    config = cli.routines / "config.toml"
    config.write_text('[notify.ntfy]\nurl = "ntfy.sh/my-topic"\n')
    message = (
        '[notify.ntfy].url: expected a topic URL such as "https://ntfy.sh/my-topic" (the '
        'token goes in ~/.vinos/secrets/ntfy-token), found "ntfy.sh/my-topic" (a string)'
    )
    res = cli("validate", str(config))
    assert (res.returncode, res.stdout) == (1, f"config.toml: {message}\n")
    _, items = doctor(cli, home_env(tmp_path))
    assert items["config.toml"]["state"] == "missing"
    assert items["config.toml"]["detail"] == f"{message} (the daemon will not start on it)"
    config.write_text('[notify.ntfy]\nurl = "https://ntfy.sh/my-topic"\n')
    assert "config.toml" not in doctor(cli, home_env(tmp_path))[1]


ENABLED = "[routine]\nenabled = true\n\n"


def test_doctor_names_an_auto_routine_that_may_escalate_without_a_premium_key(
    cli: Cli, tmp_path: Path
) -> None:
    """The decision `validate`, `status` and `list` make (hostcheck.premium_key_missing), for
    the enabled routines only."""
    env = home_env(tmp_path)
    cli.write("day-brief", ENABLED + AGENT)  # route "auto", escalation on
    cli.write("stays-off", AGENT)  # not enabled: nothing to say
    key = paths().api_key_file
    code, items = doctor(cli, env)
    assert code == 1
    assert "routine stays-off" not in items
    assert items["routine day-brief"] == {
        "what": "routine day-brief",
        "state": "missing",
        "detail": '[agent].route: route = "auto" may escalate to claude-sonnet-4-6, but there '
        f"is no premium key (set ANTHROPIC_API_KEY, or write the key to {key} (chmod 600)); "
        "until then a run that wants to escalate keeps the local answer and needs attention",
        "path": None,
    }
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text("sk-ant-test\n")
    key.chmod(0o600)
    assert "routine day-brief" not in doctor(cli, env)[1]


@pytest.mark.parametrize("template_tools", [False, True], ids=["dropped", "shown"])
def test_doctor_asks_the_local_server_an_enabled_routine_with_tools_uses(
    cli: Cli, tmp_path: Path, template_tools: bool
) -> None:
    """The question `validate --connect` asks (llama-server's /props), asked once of each
    server that enabled routines with tools use; not of one only a disabled routine uses."""
    from tests.fakes import FakeOpenAI

    env = home_env(tmp_path)
    with FakeOpenAI(template_tools=template_tools) as fake, FakeOpenAI() as unused:
        config = paths().config_file
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(
            f'[providers.llama]\nkind = "openai"\nbase_url = "{fake.base_url}"\nlocal = true\n'
            f'\n[providers.other]\nkind = "openai"\nbase_url = "{unused.base_url}"\n'
            "local = true\n"
        )
        tools = 'route = "llama"\nmodel = "m"\ntools = ["shell:date"]\n'
        on = ENABLED + AGENT.replace('system = "Write the brief."\n', f'system = "x"\n{tools}')
        cli.write("day-brief", on)
        cli.write("night-brief", on)
        cli.write("off-brief", on.removeprefix(ENABLED).replace('"llama"', '"other"'))
        code, items = doctor(cli, env)
        assert [r.path for r in fake.requests] == ["/props"]  # once for both routines
        assert unused.requests == []
    item = items["provider llama"]
    assert "provider other" not in items
    if template_tools:
        assert item["state"] == "ok"
        assert item["detail"] == "shows the tools (used by day-brief, night-brief)"
    else:
        assert code == 1
        assert item["state"] == "missing"
        assert item["detail"].startswith('"llama" at http://127.0.0.1:')
        assert item["detail"].endswith(
            "this model's chat template cannot show tools: start llama-server with `--jinja` "
            "and a template that supports tools (e.g. --chat-template-file, or a model whose "
            "GGUF has one) (used by day-brief, night-brief)"
        )


def test_doctor_says_a_local_server_that_does_not_answer_is_down_not_that_it_shows_tools(
    cli: Cli, tmp_path: Path
) -> None:
    """A server that answers nothing says nothing of tools: doctor names it as down (the
    line `status` prints, hostcheck.local_provider_down), never as showing them."""
    import socket

    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = paths().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'[providers.llama]\nkind = "openai"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
        "local = true\n"
    )
    tools = 'route = "llama"\nmodel = "m"\ntools = ["shell:date"]\n'
    on = ENABLED + AGENT.replace('system = "Write the brief."\n', f'system = "x"\n{tools}')
    cli.write("day-brief", on)
    code, items = doctor(cli, home_env(tmp_path))
    assert code == 1
    assert items["provider llama"]["state"] == "missing"
    assert items["provider llama"]["detail"] == (
        f'the local provider "llama" is not reachable at http://127.0.0.1:{port}/… '
        "(Connection refused; needed by day-brief): start its server, or fix base_url in "
        "config.toml"
    )
