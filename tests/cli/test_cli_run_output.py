"""What `run` says about the output it delivered: the name in the state store, never the
worker's scratch name (two runs in one minute are stored as NAME.md and NAME-2.md)."""

from __future__ import annotations

from datetime import datetime, timedelta

from routines.spec.outputs import output_name
from tests.cli.cli_helpers import Cli


def test_the_progress_line_names_the_delivered_file_not_the_scratch_name(
    cli: Cli, not_root: None
) -> None:
    cli.command("disk", "echo 'root 91% full'")
    store = cli.state / "disk"
    store.mkdir(parents=True, exist_ok=True)
    # An earlier run's output holds this minute's name (and the next minute's, should the
    # run cross one): this run's output is stored beside it as NAME-2.md.
    now = datetime.now(cli.tz)
    taken = {output_name(now + timedelta(minutes=m)) for m in (0, 1)}
    for name in taken:
        (store / name).write_text("# an earlier run\n")
    res = cli("run", "disk", "--no-daemon")
    assert res.returncode == 0, res.stdout + res.stderr
    [delivered] = [p.name for p in store.glob("*.md") if p.name not in taken]
    assert delivered.endswith("-2.md")
    written = [line for line in res.stdout.splitlines() if "output written" in line]
    assert len(written) == 1 and written[0].endswith(f"output written: {delivered}"), res.stdout
    assert "root 91% full" in (store / delivered).read_text()
