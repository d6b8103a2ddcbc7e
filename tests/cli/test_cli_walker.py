"""The waybar module's click, run as waybar runs it (`sh -c ON_CLICK`): with walker installed it
opens packaging/walker's panel of today's outputs and the chosen one in the viewer; without
walker, `brief --open` as before. Real CLI (a subprocess, as waybar starts it), a real output
from a real sandboxed run; walker, xdg-open and pkill are stand-ins that record what they get
(nothing real can show a panel or a viewer here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli.cli_helpers import COMMAND, Cli

REPO = Path(__file__).resolve().parents[2]
ROUTINE = COMMAND.format(
    description="news", cron="0 7 * * *", zone="UTC", run="echo fresh news", notify="false",
    on_login="false",
)  # fmt: skip


def on_click() -> str:
    text = (REPO / "packaging/waybar/vinos-routine.jsonc").read_text()
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("//")]
    click: str = json.loads("\n".join(lines))["custom/vinos-routine"]["on-click"]
    return click


def fakes(cli: Cli, tmp_path: Path, walker: bool) -> Path:
    bin_dir = tmp_path / "click-bin"
    bin_dir.mkdir()
    record = 'printf "%s\\n" "$*" >> "$0.calls"\n'
    (bin_dir / "xdg-open").write_text("#!/bin/sh\n" + record)
    (bin_dir / "pkill").write_text("#!/bin/sh\n" + record)
    (bin_dir / "vinos-routine").write_text(f'#!/bin/sh\nexec {sys.executable} -m supervisor "$@"\n')
    (bin_dir / "vinos-brief-menu").symlink_to(REPO / "packaging/walker/vinos-brief-menu")
    if walker:  # shows what it was given, and picks the first entry
        (bin_dir / "walker").write_text('#!/bin/sh\ncat > "$0.stdin"\nhead -n 1 "$0.stdin"\n')
    for f in bin_dir.iterdir():
        if not f.is_symlink():
            f.chmod(0o755)
    return bin_dir


def click(cli: Cli, bin_dir: Path) -> None:
    env = cli.environ({"PATH": f"{bin_dir}:/usr/bin:/bin"})
    done = subprocess.run(["sh", "-c", on_click()], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_with_walker_the_click_lists_todays_outputs_and_opens_the_chosen_one(
    cli: Cli, tmp_path: Path
) -> None:
    (cli.routines / "news.toml").write_text(ROUTINE)
    ran = cli("run", "news")
    assert ran.returncode == 0, ran.stderr
    [output] = (cli.state / "news").glob("*.md")
    bin_dir = fakes(cli, tmp_path, walker=True)
    click(cli, bin_dir)
    [shown] = (bin_dir / "walker.stdin").read_text().splitlines()
    assert " · news · ok · " in shown and "\t" not in shown  # labels only, not the paths
    assert (bin_dir / "xdg-open.calls").read_text() == f"{output}\n"
    assert (bin_dir / "pkill.calls").read_text() == "-RTMIN+9 waybar\n"


def test_without_walker_the_click_opens_the_whole_brief(cli: Cli, tmp_path: Path) -> None:
    (cli.routines / "news.toml").write_text(ROUTINE)
    assert cli("run", "news").returncode == 0
    bin_dir = fakes(cli, tmp_path, walker=False)
    click(cli, bin_dir)
    [opened] = (bin_dir / "xdg-open.calls").read_text().splitlines()
    assert "fresh news" in Path(opened).read_text()  # the brief's document, all outputs
