"""The phone push through a real daemon: a routine's run pauses as "needs you" (a real worker,
real bwrap, the fake Ollama server) and its pause then expires; the daemon's ntfy push for
each reaches a server on 127.0.0.1 speaking ntfy's publish API (tests/fakes/fake_ntfy.py)
with the routine's name, the dashboard's link and the token, and never the request's
content; the token is in no line of the daemon's log."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from routines.spec.paths import paths
from tests.fakes import FakeNtfy, FakeOllama
from tests.supervisor.daemonkit import DaemonProcess, wait_for, write_routine
from tests.supervisor.test_daemon_needs_you import propose, routine, run_row

pytestmark = pytest.mark.slow  # a real daemon: make test-fast leaves it out

TOKEN = "tk_daemonNtfyToken9876543210"
DASHBOARD = "https://laptop.tailnet.example:8742"
REQUEST = "Hi Bob, the door code is 4471\n"


def test_a_pause_and_its_expiry_each_push_to_the_phone_without_the_request(
    tmp_path: Path, not_root: None
) -> None:
    p = paths()
    p.ntfy_token_file.parent.mkdir(parents=True, exist_ok=True)
    p.ntfy_token_file.write_text(TOKEN + "\n")
    p.ntfy_token_file.chmod(0o600)
    with FakeNtfy(token=TOKEN) as ntfy, FakeOllama([propose(text=REQUEST)]) as ollama:
        p.config_file.parent.mkdir(parents=True, exist_ok=True)
        p.config_file.write_text(
            f'[notify.ntfy]\nurl = "{ntfy.url}/vinos-topic"\ndashboard_url = "{DASHBOARD}"\n'
        )
        write_routine("drafter", routine('needs_you_timeout = "30m"'))
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        fin = d.request("run", {"name": "drafter"})
        assert fin["status"] == "needs_you", fin
        [paused] = wait_for(lambda: ntfy.pushes, what="the pause's push")
        d.step(timedelta(minutes=31))
        wait_for(lambda: run_row(fin["run_id"]).status == "expired", what="the expiry")
        [_, expired] = wait_for(lambda: ntfy.pushes[1:] and ntfy.pushes, what="the expiry push")
        assert d.stop() == 0
    assert (paused.method, paused.path) == ("POST", "/vinos-topic")
    assert paused.headers["title"] == "drafter needs you"
    assert paused.headers["click"] == DASHBOARD
    assert paused.headers["authorization"] == f"Bearer {TOKEN}"
    assert paused.raw.decode() == "A run is waiting for you. Open the dashboard to answer."
    assert expired.headers["title"] == "drafter: nobody answered"
    assert expired.headers["tags"] == "hourglass"
    for push in (paused, expired):
        sent = repr(push.headers) + push.raw.decode()
        assert "door code" not in sent and "send-reply" not in sent
    assert TOKEN not in d.log()
