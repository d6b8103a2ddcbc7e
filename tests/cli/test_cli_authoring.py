"""`create` and `edit` end to end: the real CLI, a scripted $EDITOR (a real program that saves
the texts it is given in turn), and a pseudo-terminal where a person would answer a prompt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from routines.spec.loader import load_file
from tests.cli.cli_helpers import Cli, OnPty

INVALID = """\
[schedule]
cron = "0 6 * * *"

[agent]
system = "Summarise."

[budget]
max_dolars_per_day = 1
"""


def scripted_editor(cli: Cli, *texts: str) -> Path:
    """$EDITOR: the Nth time it runs it writes texts[N] into the file it is given (and a blank
    text means "save without changes"); every path it was given goes to editor.calls."""
    for i, text in enumerate(texts, 1):
        (cli.bin / f"edit-{i}.toml").write_text(text, encoding="utf-8")
    calls = cli.bin / "editor.calls"
    cli.fake(
        "editor",
        f"""#!{sys.executable}
import pathlib, shutil, sys
bin_dir = pathlib.Path({str(cli.bin)!r})
calls = bin_dir / "editor.calls"
n = len(calls.read_text().splitlines()) + 1 if calls.exists() else 1
with calls.open("a") as f:
    f.write(sys.argv[1] + "\\n")
src = bin_dir / f"edit-{{n}}.toml"
if src.exists() and src.read_text():
    shutil.copyfile(src, sys.argv[1])
""",
    )
    return calls


def valid_agent(cli: Cli, description: str) -> str:
    return (
        f'[routine]\ndescription = "{description}"\n\n[schedule]\ncron = "30 7 * * *"\n'
        f'timezone = "{cli.zone}"\n\n[agent]\nsystem = "Summarise."\n\n'
        "[budget]\nmax_dollars_per_day = 0.2\n"
    )


def listed(cli: Cli) -> dict[str, dict[str, object]]:
    res = cli("list", "--json")
    assert res.returncode == 0, res.stderr
    return {r["name"]: r for r in json.loads(res.stdout)}


# -- create -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["agent", "command"])
def test_create_off_a_terminal_writes_a_valid_disabled_draft_and_prints_its_path(
    cli: Cli, kind: str
) -> None:
    res = cli("create", "standup-notes", "--kind", kind)
    assert res.returncode == 0, res.stderr
    path = cli.routines / "standup-notes.toml"
    assert str(path) in res.stdout
    routine = load_file(path)
    assert routine.kind.value == kind and routine.enabled is False
    text = path.read_text()
    assert text.count("\n#") >= 5, "the template is commented"
    assert "@NAME@" not in text and "vinos-routine run standup-notes" in text
    assert listed(cli)["standup-notes"]["enabled"] is False
    assert "vinos-routine enable standup-notes" in res.stdout


def test_create_refuses_bad_names_and_existing_ones(cli: Cli) -> None:
    res = cli("create", "Bad_Name")
    assert res.returncode == 2 and "bad routine name" in res.stderr
    assert cli("create", "shared").returncode == 2
    cli.agent("mine")
    before = (cli.routines / "mine.toml").read_bytes()
    res = cli("create", "mine")
    assert res.returncode == 1
    assert "vinos-routine edit mine" in res.stderr
    assert (cli.routines / "mine.toml").read_bytes() == before
    cli.agent("shipped", system=True)
    res = cli("create", "shipped")
    assert res.returncode == 1 and "system routine" in res.stderr
    assert not (cli.routines / "shipped.toml").exists()


def test_create_from_a_starter_is_an_off_copy_under_the_new_name(cli: Cli) -> None:
    res = cli("create", "my-brief", "--from", "day-brief")
    assert res.returncode == 0, res.stderr
    text = (cli.routines / "my-brief.toml").read_text()
    assert "vinos-routine enable my-brief" in text and "enable day-brief" not in text
    routine = load_file(cli.routines / "my-brief.toml")
    assert routine.enabled is False and routine.output.open_on_login is True


def test_create_from_an_enabled_routine_starts_off(cli: Cli) -> None:
    cli.write("source", valid_agent(cli, "x").replace("[routine]\n", "[routine]\nenabled = true\n"))
    assert cli("create", "copy", "--from", "source").returncode == 0
    assert load_file(cli.routines / "copy.toml").enabled is False
    assert listed(cli)["copy"]["enabled"] is False


def test_create_from_an_unknown_routine_names_the_close_ones(cli: Cli) -> None:
    cli.agent("evening-notes")
    res = cli("create", "x", "--from", "evening-note")
    assert res.returncode == 1
    assert "did you mean evening-notes" in res.stderr
    assert not (cli.routines / "x.toml").exists()


def test_create_forgets_an_enabled_routine_of_the_same_name_from_before(cli: Cli) -> None:
    # A routine enabled, then its file deleted: the ledger still says "on".
    cli.agent("again")
    assert cli("enable", "again").returncode == 0
    (cli.routines / "again.toml").unlink()
    assert cli("create", "again", "--no-edit").returncode == 0
    assert listed(cli)["again"]["enabled"] is False


def test_create_on_a_terminal_reopens_the_editor_until_the_text_is_valid(
    cli: Cli, on_pty: OnPty
) -> None:
    calls = scripted_editor(cli, INVALID, valid_agent(cli, "fixed on the second try"))
    run = on_pty("create", "standup", env={"EDITOR": str(cli.bin / "editor")})
    shown = run.read_until("Edit again? [Y/n]")
    assert "standup.toml is not valid" in shown
    assert "max_dolars_per_day" in shown and "max_dollars_per_day" in shown, "the nearest key"
    assert not (cli.routines / "standup.toml").exists(), "nothing saved while invalid"
    run.send("y\n")
    assert run.wait() == 0, run.text
    routine = load_file(cli.routines / "standup.toml")
    assert routine.description == "fixed on the second try" and routine.enabled is False
    edited = calls.read_text().splitlines()
    assert len(edited) == 2 and edited[0] == edited[1]
    assert Path(edited[0]).parent != cli.routines, "the editor gets a temp copy"
    assert not Path(edited[0]).exists(), "the temp copy is removed"
    assert "created standup" in run.text


def test_create_on_a_terminal_given_up_creates_nothing(cli: Cli, on_pty: OnPty) -> None:
    scripted_editor(cli, INVALID)
    run = on_pty("create", "standup", env={"EDITOR": str(cli.bin / "editor")})
    run.read_until("Edit again? [Y/n]")
    run.send("n\n")
    assert run.wait() == 1
    assert "standup was not created" in run.text
    assert not (cli.routines / "standup.toml").exists()


# -- edit -----------------------------------------------------------------------------------


def test_edit_saves_a_valid_change_off_a_terminal(cli: Cli) -> None:
    cli.agent("notes")
    scripted_editor(cli, valid_agent(cli, "changed"))
    res = cli("edit", "notes", env={"EDITOR": str(cli.bin / "editor")})
    assert res.returncode == 0, res.stderr
    assert load_file(cli.routines / "notes.toml").description == "changed"
    assert "saved notes" in res.stdout and "7:30" in res.stdout


def test_edit_keeps_a_routine_the_person_enabled_on(cli: Cli) -> None:
    """`enable` is bound to the file it was made for; `edit`, with no daemon to see the
    change, carries it to the edited file (supervisor/cli/commands/authoring.py keep_state)."""
    cli.agent("notes")  # off in its file
    assert cli("enable", "notes").returncode == 0
    scripted_editor(cli, valid_agent(cli, "changed"))
    res = cli("edit", "notes", env={"EDITOR": str(cli.bin / "editor")})
    assert res.returncode == 0, res.stderr
    assert listed(cli)["notes"]["enabled"] is True


def test_edit_never_leaves_an_invalid_file_in_place(cli: Cli) -> None:
    path = cli.agent("notes")
    before = path.read_bytes()
    stamp = path.stat().st_mtime_ns
    scripted_editor(cli, INVALID)
    res = cli("edit", "notes", env={"EDITOR": str(cli.bin / "editor")})
    assert res.returncode == 1
    assert "max_dolars_per_day" in res.stderr and "nothing saved" in res.stderr
    assert path.read_bytes() == before and path.stat().st_mtime_ns == stamp
    kept = res.stderr.split("kept at ")[1].split()[0]
    assert Path(kept).read_text() == INVALID, "the rejected text is kept for the user"


def test_edit_on_a_terminal_invalid_then_valid(cli: Cli, on_pty: OnPty) -> None:
    path = cli.agent("notes")
    calls = scripted_editor(cli, INVALID, valid_agent(cli, "second try"))
    run = on_pty("edit", "notes", env={"EDITOR": str(cli.bin / "editor")})
    run.read_until("Edit again? [Y/n]")
    assert "notes" in load_file(path).description, "still the old version meanwhile"
    run.send("\n")  # Enter: the default, yes
    assert run.wait() == 0, run.text
    assert load_file(path).description == "second try"
    assert len(calls.read_text().splitlines()) == 2


def test_edit_on_a_terminal_declined_keeps_the_file(cli: Cli, on_pty: OnPty) -> None:
    path = cli.agent("notes")
    before = path.read_bytes()
    scripted_editor(cli, INVALID)
    run = on_pty("edit", "notes", env={"EDITOR": str(cli.bin / "editor")})
    run.read_until("Edit again? [Y/n]")
    run.send("n\n")
    assert run.wait() == 1
    assert path.read_bytes() == before


def test_edit_without_changes_writes_nothing(cli: Cli) -> None:
    path = cli.agent("notes")
    stamp = path.stat().st_mtime_ns
    scripted_editor(cli, "")
    res = cli("edit", "notes", env={"EDITOR": str(cli.bin / "editor")})
    assert res.returncode == 0 and "no changes" in res.stdout
    assert path.stat().st_mtime_ns == stamp


def test_edit_when_the_editor_fails_saves_nothing(cli: Cli) -> None:
    path = cli.agent("notes")
    before = path.read_bytes()
    cli.fake("bad-editor", f"#!/bin/sh\necho '{INVALID}' > \"$1\"\nexit 3\n")
    res = cli("edit", "notes", env={"EDITOR": str(cli.bin / "bad-editor")})
    assert res.returncode == 1 and "exited with status 3" in res.stderr
    assert path.read_bytes() == before


def test_edit_uses_visual_when_editor_is_unset_and_editor_arguments(cli: Cli) -> None:
    cli.agent("notes")
    scripted_editor(cli, valid_agent(cli, "via VISUAL"))
    # "python3 SCRIPT": the variable is split as a shell would.
    res = cli("edit", "notes", env={"VISUAL": f"{sys.executable} {cli.bin / 'editor'}"})
    assert res.returncode == 0, res.stderr
    assert load_file(cli.routines / "notes.toml").description == "via VISUAL"


def test_edit_a_system_routine_makes_a_user_copy(cli: Cli) -> None:
    system_file = cli.agent("shipped", system=True)
    before = system_file.read_bytes()
    scripted_editor(cli, valid_agent(cli, "my version"))
    res = cli("edit", "shipped", env={"EDITOR": str(cli.bin / "editor")})
    assert res.returncode == 0, res.stderr
    assert "system routine" in res.stdout
    assert system_file.read_bytes() == before
    assert load_file(cli.routines / "shipped.toml").description == "my version"
    assert listed(cli)["shipped"]["origin"] == "user"


def test_edit_an_unknown_routine_names_the_closest(cli: Cli) -> None:
    cli.agent("day-notes")
    res = cli("edit", "day-note", env={"EDITOR": "true"})
    assert res.returncode == 1 and "did you mean day-notes" in res.stderr


def test_edit_refuses_to_overwrite_a_file_changed_meanwhile(cli: Cli) -> None:
    path = cli.agent("notes")
    # This editor changes the real file behind the CLI's back, then saves its copy.
    cli.fake(
        "racing-editor",
        f"#!/bin/sh\necho '# changed elsewhere' >> {path}\ncp {cli.bin / 'v.toml'} \"$1\"\n",
    )
    (cli.bin / "v.toml").write_text(valid_agent(cli, "mine"))
    res = cli("edit", "notes", env={"EDITOR": str(cli.bin / "racing-editor")})
    assert res.returncode == 1 and "changed by someone else" in res.stderr
    assert path.read_text().endswith("# changed elsewhere\n")


@pytest.mark.slow
def test_create_and_edit_make_a_running_daemon_reload(cli: Cli, not_root: None) -> None:
    daemon = subprocess.Popen(
        cli.argv("daemon"),
        env=cli.environ(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        sock = cli.runtime / "vinos-routine" / "control.sock"
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        res = cli("create", "fresh", "--no-edit")
        assert res.returncode == 0, res.stderr
        assert "the daemon reloaded it" in res.stdout
        status = json.loads(cli("status", "--json").stdout)
        assert status["daemon"] is True and status["routines"] == 1
        scripted_editor(cli, valid_agent(cli, "edited"))
        res = cli("edit", "fresh", env={"EDITOR": str(cli.bin / "editor")})
        assert "the daemon reloaded it" in res.stdout
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert os.path.exists(cli.routines / "fresh.toml")


def test_edit_fixes_an_invalid_file(cli: Cli) -> None:
    path = cli.write("notes", INVALID)
    assert listed(cli)["notes"]["valid"] is False
    scripted_editor(cli, valid_agent(cli, "fixed"))
    res = cli("edit", "notes", env={"EDITOR": str(cli.bin / "editor")})
    assert res.returncode == 0, res.stderr
    assert load_file(path).description == "fixed"
    # Quitting without a change leaves an invalid file as it was, with no prompt.
    cli.write("other", INVALID)
    scripted_editor(cli, "")
    (cli.bin / "editor.calls").unlink()
    res = cli("edit", "other", env={"EDITOR": str(cli.bin / "editor")})
    assert res.returncode == 0 and "no changes" in res.stdout
