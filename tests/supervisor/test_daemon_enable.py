"""The daemon's `enable`/`disable` control commands (what the dashboard uses; the CLI writes
the same change itself through supervisor/engine/toggle.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routines.spec.loader import load_file
from routines.spec.paths import paths
from supervisor.cli.client import DaemonError
from tests.supervisor.daemonkit import DaemonProcess, command_routine, state, write_routine

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def test_enable_and_disable_through_the_daemon(tmp_path: Path, not_root: None) -> None:
    write_routine("nightly", command_routine("true", schedule='cron = "0 3 * * *"', enabled=False))
    d = DaemonProcess(tmp_path).start()
    try:
        assert d.request("status")["enabled"] == 0
        assert d.request("enable", {"name": "nightly"}) == {"name": "nightly", "enabled": True}
        st = state("nightly")
        assert st.enabled_override is True and st.failure_streak == 0 and st.cursor
        assert d.request("status")["enabled"] == 1  # the scheduler took it up at once
        assert d.request("status")["next"][0]["routine"] == "nightly"
        assert d.request("disable", {"name": "nightly"}) == {"name": "nightly", "enabled": False}
        assert state("nightly").enabled_override is False
        assert d.request("status")["enabled"] == 0
        with pytest.raises(DaemonError, match="no routine named 'nightlY'") as exc:
            d.request("enable", {"name": "nightlY"})
        assert exc.value.code == "unknown_routine"
    finally:
        d.stop()


def test_status_json_has_one_shape_whether_the_daemon_is_up_or_not(
    tmp_path: Path, not_root: None
) -> None:
    write_routine("nightly", command_routine("true", schedule='cron = "0 3 * * *"'))
    d = DaemonProcess(tmp_path)
    down = json.loads(d.cli("status", "--json").stdout)
    d.start()
    try:
        up = json.loads(d.cli("status", "--json").stdout)
    finally:
        d.stop()
    assert sorted(down) == sorted(up)
    assert (down["daemon"], up["daemon"]) == (False, True)
    assert down["next"][0]["routine"] == up["next"][0]["routine"] == "nightly"
    assert (down["pid"], down["status"], down["unwritten"]) == (None, None, [])
    assert isinstance(up["pid"], int) and up["unwritten"] == []


def test_an_edit_of_an_enabled_file_keeps_it_on_and_another_file_does_not(
    tmp_path: Path, not_root: None
) -> None:
    """The override is bound to its file (supervisor/engine/toggle.py): the daemon carries it across
    the person's edit (saved by rename, as editors do), and never onto a file that appears
    under the name after the first was removed."""
    p = paths()
    write_routine("nightly", command_routine("true", schedule='cron = "0 3 * * *"', enabled=False))
    d = DaemonProcess(tmp_path).start()
    try:
        d.request("enable", {"name": "nightly"})
        edited = command_routine("echo edited", schedule='cron = "0 3 * * *"', enabled=False)
        write_routine("nightly", edited)
        d.request("reload")
        assert d.request("status")["enabled"] == 1  # the edit kept it on
        assert state("nightly").file_identity == load_file(p.routines_dir / "nightly.toml").identity
        (p.routines_dir / "nightly.toml").unlink()
        d.request("reload")
        write_routine("nightly", command_routine("echo other", enabled=False))
        d.request("reload")
        assert d.request("status")["enabled"] == 0  # another file: off, as it says
    finally:
        d.stop()
