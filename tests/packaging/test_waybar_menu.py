"""The waybar module's right-click menu (packaging/waybar): every item has an action, every action
names real subcommands, and the enable, disable and logs actions work when run as waybar runs
them (`sh -c ACTION`), with the routine's name typed at their prompt."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from supervisor.cli.main import build_parser

# Slow: starts the installed program's menu actions (make test-fast leaves these out). It needs
# no package build and no user manager, so no xdist group.
pytestmark = [pytest.mark.slow]

WAYBAR = Path(__file__).resolve().parents[2] / "packaging/waybar"


def load_jsonc(path: Path) -> Any:
    """The module config; its comments are whole lines (no `//` inside its strings)."""
    lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("//")]
    return json.loads("\n".join(lines))


def menu_actions() -> dict[str, str]:
    module = load_jsonc(WAYBAR / "vinos-routine.jsonc")["custom/vinos-routine"]
    assert module["menu"] == "on-click-right"
    assert module["menu-file"].endswith("/vinos-routine-menu.xml")
    actions: dict[str, str] = module["menu-actions"]
    return actions


def menu_items() -> dict[str, str]:
    """id → label of the menu file's items (separators aside)."""
    root = ET.parse(WAYBAR / "vinos-routine-menu.xml").getroot()
    return {
        obj.attrib["id"]: obj.findtext("property[@name='label']") or ""
        for obj in root.iter("object")
        if obj.attrib.get("class") == "GtkMenuItem"
    }


def subcommands() -> set[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a.choices, dict)]
    assert isinstance(sub.choices, dict)
    return set(sub.choices)


def test_every_menu_item_has_an_action_with_real_subcommands() -> None:
    items, actions = menu_items(), menu_actions()
    assert set(items) == set(actions)
    assert {"enable", "disable", "logs"} <= set(items)
    assert all(items.values()), "an item without a label"
    known = subcommands()
    for key, action in actions.items():
        used = re.findall(r"vinos-routine (\w+)", action)
        assert used, f"{key}: runs no vinos-routine command"
        assert set(used) <= known, f"{key}: {used} not among {sorted(known)}"


@pytest.fixture
def menu_env(tmp_path: Path) -> dict[str, str]:
    """waybar's environment: vinos-routine on PATH, and a terminal. The terminal is a stand-in
    (no display here): it runs its command with the test's stdin as the keyboard."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    term = bin_dir / "xdg-terminal-exec"
    term.write_text('#!/bin/sh\nexec "$@"\n')
    term.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin"}


def click(action: str, env: dict[str, str], typed: str) -> subprocess.CompletedProcess[str]:
    # Its exit status is the final prompt's: what it did is checked instead.
    return subprocess.run(
        ["sh", "-c", action],
        env=env,
        input=typed,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def enabled(env: dict[str, str], name: str) -> bool:
    out = subprocess.run(
        ["vinos-routine", "list", "--json"], env=env, capture_output=True, text=True, check=True
    )
    (line,) = [ln for ln in json.loads(out.stdout) if ln["name"] == name]
    return bool(line["enabled"])


@pytest.mark.usefixtures("not_root")
def test_enable_disable_and_logs_actions(menu_env: dict[str, str], vinos_env: Path) -> None:
    (vinos_env / "routines/wb-hello.toml").write_text(
        '[routine]\nkind = "command"\n[schedule]\ncron = "0 9 * * *"\n'
        '[command]\nrun = "echo hello from the menu"\n'
    )
    actions = menu_actions()
    assert not enabled(menu_env, "wb-hello")

    out = click(actions["enable"], menu_env, "wb-hello\n\n")
    assert "wb-hello" in out.stdout, "the routines are listed before the prompt"
    assert enabled(menu_env, "wb-hello"), out.stdout + out.stderr

    out = click(actions["disable"], menu_env, "wb-hello\n\n")
    assert not enabled(menu_env, "wb-hello"), out.stdout + out.stderr

    # An empty answer does nothing.
    click(actions["enable"], menu_env, "\n\n")
    assert not enabled(menu_env, "wb-hello")

    run = subprocess.run(
        ["vinos-routine", "run", "wb-hello"],
        env=menu_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = click(actions["logs"], menu_env, "wb-hello\n\n")
    assert "hello from the menu" in out.stdout, out.stdout + out.stderr
