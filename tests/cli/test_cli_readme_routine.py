"""The README's example routine, as the README prints it, run for real (in-process CLI, real
bwrap, a home with ~/Documents): it reports the disk of the folder it declares and the system's.
It used `df` over the whole sandbox, which shows a routine only its own /usr."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.cli_helpers import Cli

REPO = Path(__file__).resolve().parents[2]


def readme_routine() -> tuple[str, str]:
    """The README's first TOML block: the routine's name (from its path comment) and its text."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"```toml\n(# ~/\.vinos/routines/([a-z-]+)\.toml.*?)```", text, re.S)
    assert block, "the README shows no routine file"
    return block.group(2), block.group(1)


def test_the_readmes_routine_reports_the_declared_folders_disk_and_the_systems(
    cli: Cli, tmp_path: Path
) -> None:
    name, text = readme_routine()
    assert name == "disk-report"
    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    (cli.routines / f"{name}.toml").write_text(text)
    assert cli("validate", str(cli.routines / f"{name}.toml")).returncode == 0
    res = cli("run", name, env={"HOME": str(home)})
    assert res.returncode == 0, res.stdout + res.stderr
    [written] = re.findall(r"^output: (/.+\.md)$", res.stdout, re.M)
    out = Path(written).read_text()
    rows = [ln for ln in out.splitlines() if re.search(r"\d+%\s*$", ln)]
    # df's two rows: the disk under ~/Documents and /usr's (the same disk, on some machines).
    assert len(rows) == 2, out
    assert "Filesystem" in out and "Avail" in out
