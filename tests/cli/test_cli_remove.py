"""`vinos-routine remove NAME`: a user routine's file and workspace go, its history stays; a
system routine is refused with the two ways to get rid of it; on a terminal it asks first."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from routines.runs import RunEnd, RunStatus, Trigger
from tests.cli.cli_helpers import Cli, OnPty

T0 = datetime(2026, 7, 25, 6, 0, tzinfo=UTC)


def _with_history(cli: Cli, name: str) -> None:
    with cli.ledger() as ledger:
        ledger.record_run(
            name, run_id=f"{name}-1", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=T0
        )
        ledger.finish_run(f"{name}-1", now=T0, end=RunEnd(status=RunStatus.OK))
    (cli.state / name).mkdir(parents=True, exist_ok=True)
    (cli.state / name / "2026-07-25-0600.md").write_text("# out\n")


def test_remove_deletes_the_file_and_keeps_the_history(cli: Cli) -> None:
    path = cli.agent("old-digest")
    _with_history(cli, "old-digest")
    # stdin is not a terminal: nobody to ask, so nothing is removed without --yes.
    refused = cli("remove", "old-digest")
    assert refused.returncode == 2 and path.exists()
    assert "not on a terminal: add --yes to remove old-digest" in refused.stderr
    res = cli("remove", "old-digest", "--yes")
    assert res.returncode == 0, res.stderr
    assert not path.exists()
    assert f"removed {path}" in res.stdout and "vinos-routine history old-digest" in res.stdout
    assert (cli.state / "old-digest" / "2026-07-25-0600.md").exists()
    history = cli("history", "old-digest", "--json")
    assert history.returncode == 0, history.stderr
    assert '"old-digest-1"' in history.stdout
    again = cli("remove", "old-digest", "--yes")
    assert again.returncode == 1 and "no routine named" in again.stderr


def test_remove_deletes_the_workspace_whatever_its_modes(cli: Cli, not_root: None) -> None:
    """What the routine's shell tools kept between runs goes with it, chmod 000 or not; a
    link in it is removed, not followed."""
    path = cli.agent("old-digest")
    outside = cli.home.parent / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    workspace = cli.routines / "workspace" / "old-digest"
    (workspace / "cache/deep").mkdir(parents=True)
    (workspace / "cache/deep/data").write_text("x" * 1000)
    (workspace / "notes.txt").write_text("x")
    (workspace / "link").symlink_to(outside)
    (workspace / "cache/deep").chmod(0)
    (workspace / "cache").chmod(0)
    res = cli("remove", "old-digest", "--yes")
    assert res.returncode == 0, res.stderr
    assert not path.exists() and not os.path.lexists(workspace)
    assert f"removed its workspace {workspace} (5 files and folders)" in res.stdout
    assert (outside / "keep").read_text() == "x"
    # Without a workspace, nothing is said about one.
    cli.agent("fresh")
    res = cli("remove", "fresh", "--yes")
    assert res.returncode == 0 and "workspace" not in res.stdout


def test_a_system_routine_is_refused_with_override_and_disable(cli: Cli) -> None:
    path = cli.agent("day-brief", system=True)
    res = cli("remove", "day-brief", "--yes")
    assert res.returncode == 1 and res.stdout == ""
    assert "day-brief is a system routine" in res.stderr and str(path) in res.stderr
    assert "vinos-routine disable day-brief" in res.stderr
    assert "vinos-routine edit day-brief" in res.stderr
    assert path.exists()


def test_removing_an_override_brings_the_system_routine_back(cli: Cli) -> None:
    system = cli.agent("day-brief", system=True)
    mine = cli.agent("day-brief", description="my own brief")
    res = cli("remove", "day-brief", "--yes")
    assert res.returncode == 0, res.stderr
    assert not mine.exists() and system.exists()
    assert f"the system routine {system} takes its place again" in res.stdout
    listed = cli("list", "--json")
    assert '"day-brief"' in listed.stdout


def test_on_a_terminal_it_asks_first(cli: Cli, on_pty: OnPty) -> None:
    path = cli.agent("notes")
    workspace = cli.routines / "workspace" / "notes"
    workspace.mkdir(parents=True)
    run = on_pty("remove", "notes")
    question = f"Remove {path} and its workspace {workspace}? Its history is kept. [y/N]"
    assert question in run.read_until("[y/N]")
    run.send("\n")  # Enter: the default, no
    assert run.wait() == 1 and "nothing removed" in run.text
    assert path.exists() and workspace.exists()
    run = on_pty("remove", "notes")
    run.read_until("[y/N]")
    run.send("y\n")
    assert run.wait() == 0, run.text
    assert not path.exists()


def test_yes_does_not_ask_on_a_terminal(cli: Cli, on_pty: OnPty) -> None:
    path = cli.agent("notes")
    run = on_pty("remove", "notes", "--yes")
    assert run.wait() == 0, run.text
    assert "[y/N]" not in run.text and not path.exists()
