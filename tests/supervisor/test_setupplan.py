"""`setup`'s decisions as data: `plan()` on the facts of an Arch package install, a pip install,
and a machine whose package ships the shell's completion. Pure: nothing is read or written; the
command that gathers the facts and writes the plan is tests/cli/test_cli_setup.py's."""

from __future__ import annotations

from pathlib import Path

from supervisor.cli.completions import render
from supervisor.cli.distro import Family
from supervisor.cli.setupplan import (
    COMPLETION_MARK,
    SECRETS_README,
    Facts,
    Item,
    State,
    next_step,
    path_line,
    plan,
)
from supervisor.cli.userunits import DAEMON_UNITS, DASHBOARD_UNITS, SERVICE, packaged, written_unit

HOME = Path("/home/ana")
UNIT_DIR = HOME / ".config/systemd/user"
PACKAGE_UNIT = Path("/usr/lib/systemd/user") / SERVICE
USER_BASH = HOME / ".local/share/bash-completion/completions/vinos-routine"
SYSTEM_BASH = Path("/usr/share/bash-completion/completions/vinos-routine")
BASH_TEXT = render()["vinos-routine.bash"]
UNITS = {name: packaged(name) for name in DAEMON_UNITS + DASHBOARD_UNITS}


def facts(program: tuple[str, ...], **kw: object) -> Facts:
    base: dict[str, object] = {
        "program": program,
        "unit_dir": UNIT_DIR,
        "units": UNITS,
        "existing": {},
        "shell": "bash",
        "completion": (USER_BASH, BASH_TEXT),
    }
    base.update(kw)
    return Facts(**base)  # type: ignore[arg-type]


def by_what(items: list[Item]) -> dict[str, Item]:
    return {i.what: i for i in items if i.what.startswith(("unit ", "completions"))}


def test_the_arch_package_install_writes_no_unit_and_no_completion() -> None:
    # The package's unit starts /usr/bin/vinos-routine, the program setup runs as; the package
    # also shipped the bash completion.
    f = facts(
        ("/usr/bin/vinos-routine",),
        package_unit=PACKAGE_UNIT,
        package_program="/usr/bin/vinos-routine",
        system_completion=SYSTEM_BASH,
    )
    items = plan(f)
    assert [i for i in items if i.state is State.WRITE] == []
    got = by_what(items)
    for name in DAEMON_UNITS:
        assert got[f"unit {name}"].state is State.OK
        assert got[f"unit {name}"].detail == "installed by the package in /usr/lib/systemd/user"
        assert got[f"unit {name}"].path == PACKAGE_UNIT.parent / name
    assert got["completions (bash)"] == Item(
        "completions (bash)", State.OK, f"installed by the package: {SYSTEM_BASH}", SYSTEM_BASH
    )


def test_a_pip_install_beside_the_package_overrides_its_unit_in_the_home() -> None:
    # Another program than the package's: the user's unit, said to override the package's.
    mine = ("/home/ana/venv/bin/vinos-routine",)
    f = facts(mine, package_unit=PACKAGE_UNIT, package_program="/usr/bin/vinos-routine")
    got = by_what(plan(f))
    service = got[f"unit {SERVICE}"]
    assert service.state is State.WRITE
    assert service.path == UNIT_DIR / SERVICE
    assert "(overrides the package's unit in /usr/lib/systemd/user)" in service.detail


def test_a_pip_install_writes_its_units_and_completion_then_finds_them_ok() -> None:
    program = ("/home/ana/venv/bin/vinos-routine",)
    env = {"VINOS_HOME": "/home/ana/.vinos"}
    first = plan(facts(program, environment=env))
    writes = {i.path: i.text for i in first if i.state is State.WRITE}
    assert set(writes) == {UNIT_DIR / name for name in DAEMON_UNITS} | {USER_BASH}
    assert writes[UNIT_DIR / SERVICE] == written_unit(UNITS[SERVICE], program, env)
    assert writes[USER_BASH] == BASH_TEXT
    notes = [i for i in first if i.what == "dashboard units"]
    assert notes and notes[0].state is State.NOTE  # no [dashboard] extra: said, not written
    # The same facts with those files in place: nothing to do.
    second = plan(facts(program, environment=env, existing=writes))
    assert [i for i in second if i.state is State.WRITE] == []


def test_a_completion_an_earlier_setup_wrote_is_rewritten_after_an_upgrade() -> None:
    old = BASH_TEXT + "# an older version's completion\n"
    assert COMPLETION_MARK in "".join(old.splitlines(keepends=True)[:3])
    item = by_what(plan(facts(("/v/bin/vinos-routine",), existing={USER_BASH: old})))
    assert item["completions (bash)"].state is State.WRITE
    assert item["completions (bash)"].detail.startswith(f"rewrites {USER_BASH}")
    # One of the user's own is kept.
    mine = "complete -W 'run list' vinos-routine\n"
    item = by_what(plan(facts(("/v/bin/vinos-routine",), existing={USER_BASH: mine})))
    assert item["completions (bash)"].state is State.KEPT


def test_a_packaged_completion_is_not_shadowed_by_one_in_the_home() -> None:
    program = ("/home/ana/venv/bin/vinos-routine",)
    items = plan(facts(program, system_completion=SYSTEM_BASH))
    assert USER_BASH not in {i.path for i in items if i.state is State.WRITE}
    assert by_what(items)["completions (bash)"].state is State.OK
    # One written by an earlier setup is there already: named, with how to remove it; setup
    # itself deletes nothing.
    stale = plan(facts(program, system_completion=SYSTEM_BASH, existing={USER_BASH: BASH_TEXT}))
    note = by_what(stale)["completions (bash)"]
    assert note.state is State.NOTE
    assert note.detail == (
        f"{USER_BASH} shadows the package's {SYSTEM_BASH} and goes stale when the package is "
        f"upgraded: remove it (rm {USER_BASH}) unless you keep it on purpose"
    )
    assert [i for i in stale if i.state is State.WRITE and i.path == USER_BASH] == []


SECRETS = HOME / ".vinos/secrets"
KEY = SECRETS / "anthropic-key"


def items_of(what: str, **kw: object) -> list[Item]:
    return [i for i in plan(facts(("/home/ana/.local/bin/vinos-routine",), key_file=KEY, **kw))
            if i.what == what]  # fmt: skip


def test_a_new_secrets_dir_is_written_private_with_a_commented_readme_and_no_secret() -> None:
    [item] = items_of("secrets", secrets_mode=None)
    assert item.state is State.WRITE
    assert (item.path, item.mode) == (SECRETS / "README", 0o600)
    assert item.text == SECRETS_README
    assert all(not line or line.startswith("#") for line in SECRETS_README.splitlines())
    assert "(umask 077; cat > ~/.vinos/secrets/anthropic-key)" in SECRETS_README
    assert item.detail.startswith(f"creates {SECRETS} (mode 0700)")
    # Once there, 0700: ok, and the README is not written again (nor put back once removed).
    assert [i.state for i in items_of("secrets", secrets_mode=0o700)] == [State.OK]
    [open_dir] = items_of("secrets", secrets_mode=0o755)
    assert open_dir.state is State.MISSING
    assert open_dir.detail == (f"{SECRETS} is open to other users (mode 0755): chmod 700 {SECRETS}")


def test_a_bin_dir_off_path_is_named_with_the_line_for_the_users_shell() -> None:
    assert items_of("PATH") == []
    bin_dir = HOME / ".local/bin"
    [item] = items_of("PATH", off_path=bin_dir)
    assert item.state is State.MISSING
    assert item.detail == (
        "/home/ana/.local/bin is not on your PATH, so `vinos-routine` is not found in a new "
        "shell until you add it: echo 'export PATH=\"/home/ana/.local/bin:$PATH\"' >> "
        "~/.bashrc (then open a new shell)"
    )
    assert path_line("zsh", bin_dir) == (
        "echo 'export PATH=\"/home/ana/.local/bin:$PATH\"' >> ~/.zshrc"
    )
    assert path_line("fish", bin_dir) == "fish_add_path /home/ana/.local/bin"


def test_no_user_manager_names_the_daemon_in_the_foreground_and_lingering() -> None:
    # A user manager answers: nothing to say, and setup ends at systemctl.
    assert items_of("user manager") == []
    assert next_step(facts(("/p",))) == "then: systemctl --user enable --now vinos-routined"
    # A container, WSL or ssh session: systemctl --user fails, and says why.
    why = "systemctl --user: Failed to connect to bus: No medium found"
    [item] = items_of("user manager", no_manager=why)
    assert item.state is State.MISSING
    assert item.detail.startswith(f"no systemd user manager answers ({why})")
    for advice in (
        "run `vinos-routine daemon` in a terminal of its own",
        "`vinos-routine daemon &` under your shell's job control",
        "sudo loginctl enable-linger $USER",
        "systemctl --user enable --now vinos-routined",
    ):
        assert advice in item.detail
    assert next_step(facts(("/p",), no_manager=why)).startswith("then: vinos-routine daemon")
    # A daemon started by hand runs: that is fine, and said.
    [ok] = items_of("user manager", no_manager=why, daemon_pid=4242)
    assert ok.state is State.OK and "the daemon runs (pid 4242)" in ok.detail
    assert "pid 4242" in next_step(facts(("/p",), no_manager=why, daemon_pid=4242))


def test_a_missing_tool_is_named_with_this_distributions_command() -> None:
    missing = {"notify-send": "notify-send is not on PATH"}

    def detail(**kw: object) -> str:
        [item] = [i for i in plan(facts(("/p",), missing=missing, **kw)) if i.what == "notify-send"]
        return item.detail

    assert detail(distro=Family.DEBIAN).endswith("Install it: sudo apt-get install libnotify-bin")
    assert detail(distro=Family.ARCH).endswith("Install it: sudo pacman -S libnotify")
    # Another or an unknown distribution: both names, as before.
    assert detail(distro=None).endswith(
        "Install it: sudo apt-get install libnotify-bin (Arch: sudo pacman -S libnotify)"
    )
    assert detail(distro=Family.FEDORA).endswith("(Arch: sudo pacman -S libnotify)")


def test_doctor_names_a_bad_config_toml_and_an_ntfy_token_open_to_others() -> None:
    bad = '[notify.ntfy].url: expected a topic URL such as "https://ntfy.sh/my-topic"'
    token = HOME / ".vinos/secrets/ntfy-token"
    items = plan(
        facts(
            ("/p",),
            config_problems=(bad,),
            ntfy_token_file=token,
            ntfy_token_problem=f"is open to other users (chmod 600 {token})",
        )
    )
    [config] = [i for i in items if i.what == "config.toml"]
    assert (config.state, config.detail) == (
        State.MISSING,
        f"{bad} (the daemon will not start on it)",
    )
    [ntfy] = [i for i in items if i.what == "ntfy token"]
    assert ntfy.state is State.MISSING
    assert ntfy.detail == (
        f"{token} is open to other users (chmod 600 {token}): the phone push is not sent"
    )
    # Neither line when all is well.
    assert not [i for i in plan(facts(("/p",))) if i.what in ("config.toml", "ntfy token")]


def test_doctor_says_which_run_limits_are_in_force() -> None:
    """A note where they are sampled (a host's fact, nothing to fix: doctor still passes),
    ok where the kernel keeps them (supervisor/cli/commands/capabilities.py in_force)."""
    sampled = "sampled: max_run_memory_mb is checked per shell call (no memory controller)"
    [note] = [
        i for i in plan(facts(("/p",), run_limits=(False, sampled))) if i.what == "run limits"
    ]
    assert (note.state, note.detail) == (State.NOTE, sampled)
    kept = "kept by the kernel: max_run_memory_mb … (a cgroup per run under /sys/fs/cgroup/x)"
    [ok] = [i for i in plan(facts(("/p",), run_limits=(True, kept))) if i.what == "run limits"]
    assert (ok.state, ok.detail) == (State.OK, kept)


def test_doctor_says_how_the_disk_quota_is_kept() -> None:
    """A note where max_workspace_mb is polled, ok where the kernel keeps it (sandbox/overlay.py
    quota_in_force), as the run limits' line."""
    polled = "polled: max_workspace_mb is measured during each shell call (no tmpfs xattrs)"
    [note] = [i for i in plan(facts(("/p",), disk_quota=(False, polled))) if i.what == "disk quota"]
    assert (note.state, note.detail) == (State.NOTE, polled)
    kept = "kept by the kernel: max_workspace_mb holds every shell call …"
    [ok] = [i for i in plan(facts(("/p",), disk_quota=(True, kept))) if i.what == "disk quota"]
    assert (ok.state, ok.detail) == (State.OK, kept)


def test_doctor_says_whether_a_notification_can_open_the_dashboard() -> None:
    """A note where notify-send takes no action (a plain notification), ok where it does
    (supervisor/engine/notify.py actions_in_force); nothing where notify-send is missing,
    whose own line says what that costs."""

    def line(f: Facts) -> list[tuple[State, str]]:
        return [(i.state, i.detail) for i in plan(f) if i.what == "notification actions"]

    plain = "/usr/bin/notify-send has no --action (libnotify < 0.7.10): a plain notification"
    assert line(facts(("/p",), notify_actions=(False, plain))) == [(State.NOTE, plain)]
    takes = 'a "needs you" notification has "Open the dashboard" …'
    assert line(facts(("/p",), notify_actions=(True, takes))) == [(State.OK, takes)]
    gone = facts(("/p",), notify_actions=(False, plain), missing={"notify-send": "not on PATH"})
    assert line(gone) == []
