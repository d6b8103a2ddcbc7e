"""A routine file's name is untrusted text: `\\e[2J…EVIL.toml` must not clear the screen in `list`,
`validate` or `status`, nor a newline in a name break the table. The CLI escapes names with
routines/safetext.one_line, as it does every other untrusted text.

Before: the escape reached the terminal raw, and `list` crashed on it (the table's width
counted it as a colour code).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from routines.spec.paths import paths
from tests.supervisor.daemonkit import DaemonProcess, command_routine, write_routine

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

EVIL = "\x1b[2J\x1b]0;pwned\x07EVIL"
BROKEN = "new\nline"


def test_escapes_and_newlines_in_file_names_are_shown_escaped(
    tmp_path: Path, not_root: None
) -> None:
    routines = paths().routines_dir
    for name in (EVIL, BROKEN):
        (routines / f"{name}.toml").write_text(command_routine("true", enabled=False))
    write_routine("plain", command_routine("true", enabled=False))
    d = DaemonProcess(tmp_path).start()  # `list` and `status` also ask the running daemon
    for args in (("list",), ("validate",), ("status",)):
        out = d.cli(*args)
        shown = out.stdout + out.stderr
        assert "Traceback" not in shown, shown
        assert "\x1b" not in shown and "\x07" not in shown, (args, shown)
        assert "\\x1b[2J\\x1b]0;pwned\\x07EVIL" in shown, (args, shown)
        assert "new\\nline" in shown, (args, shown)
        # A newline in a name never starts a line of its own.
        assert not [ln for ln in shown.splitlines() if ln.startswith("line")], shown
    listing = d.cli("list").stdout.splitlines()
    assert listing[0].split() == ["NAME", "KIND", "STATE", "SCHEDULE", "NEXT", "LAST", "TODAY"]
    assert [ln.split()[0] for ln in listing[1:4]] == [
        "\\x1b[2J\\x1b]0;pwned\\x07EVIL",
        "new\\nline",
        "plain",
    ]
    assert d.stop() == 0
    assert "\x1b" not in d.log()
