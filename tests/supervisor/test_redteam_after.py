"""Red team: an `after` follower is handed only its upstream's own output file.

The chain (whoever holds a fleet's database credentials, who may write run rows but never
read a machine's files, docs/security.md): a run row of the upstream routine, ended `ok`,
whose `output_file` names any file of the person's (`~/.ssh/id_ed25519`). The daemon of
every machine read that path, as the person and outside any sandbox, and handed its tail to
the follower's run as "the output of up's run": to the model, and to anywhere the follower
sends its output. Now only a file in the upstream routine's own state folder on this
machine is read; any other path hands on nothing.

The test writes the row into the machine's SQLite ledger, standing for the database writer
(the code that reads it, `Ledger.history` and the trigger book, is the same on both)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from routines.ledger import Ledger
from routines.runs import RunEnd, RunStatus, Trigger
from routines.spec.paths import paths
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    final,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # a real daemon


def test_a_row_naming_another_file_hands_the_follower_none_of_it(
    tmp_path: Path, not_root: None
) -> None:
    secret = tmp_path / "ssh" / "id_ed25519"
    secret.parent.mkdir()
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- SECRET-KEY-MATERIAL\n")
    write_routine("up", command_routine("echo up", schedule='cron = "0 0 1 1 *"'))
    write_routine(
        "down",
        '[routine]\nkind = "command"\nenabled = true\n[trigger]\nafter = ["up"]\n'
        '[command]\nrun = "cat"\ntimeout_sec = 60\n',
    )
    d = DaemonProcess(tmp_path).start()
    d.request("status")  # the follower is tracked from now
    now = datetime.now(UTC)
    run_id = f"{now.strftime('%Y%m%dT%H%M%S')}-up-0f0f0f"
    with Ledger(paths().ledger) as led:  # what a fleet database's writer can write
        led.record_run("up", run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING,
                       now=now)  # fmt: skip
        led.finish_run(run_id, RunEnd(RunStatus.OK, output_file=str(secret)), now=now)
    d.request("reload")
    wait_for(lambda: len(final("down")) == 1, what="the follower's run")
    assert d.stop() == 0
    [run] = final("down")
    assert run.status == "ok", run.detail
    assert run.output_file is not None
    assert "SECRET-KEY-MATERIAL" not in Path(run.output_file).read_text()
