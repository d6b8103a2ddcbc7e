"""The phone push through ntfy ([notify.ntfy]): what it says (the routine's name and the
dashboard's link, never the request), that `python -m worker.ntfy` publishes it to a real
HTTP server on 127.0.0.1 speaking ntfy's publish API (tests/fakes/fake_ntfy.py) with the
token from the secrets file and never in a log line, that a token file open to others is
refused, that a failure is one log line, that the daemon's side never waits for it, and that
the connector refuses a loopback port another local user holds."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from routines.spec.config import NtfySettings
from routines.spec.loader import load_text
from routines.spec.paths import Paths
from supervisor.engine import phone
from supervisor.engine.finish import Notification, proposal_notifications
from supervisor.engine.pauses import expired_note
from tests.dashboard.squatkit import Squat
from tests.fakes import FakeNtfy

TOKEN = "tk_s3cretNtfyToken0123456789"
DASHBOARD = "https://laptop.tailnet.example:8742"
REQUEST = "Hi Bob, the wire transfer code is 4471"  # a paused request's content
ROUTINE = load_text(
    '[routine]\ndescription = "drafts replies"\n[schedule]\ncron = "0 9 * * *"\n'
    '[agent]\nroute = "ollama"\n'
    'system = "You draft replies."\n[[agent.actions]]\nname = "send-reply"\nrun = "cat"\n',
    Path("/nowhere/drafter.toml"),
)


def home(tmp: Path) -> Paths:
    return Paths(home=tmp, system_dir=tmp / "system", runtime_dir=tmp / "run")


def write_token(tmp: Path, mode: int = 0o600) -> Path:
    f = home(tmp).ntfy_token_file
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(TOKEN + "\n")
    f.chmod(mode)
    return f


def paused_note() -> Notification:
    [note] = proposal_notifications(ROUTINE, (7,), paused=True)
    return note


def push_for(url: str, tmp: Path, dashboard: str | None = DASHBOARD) -> dict[str, Any]:
    got = phone.push_of(paused_note(), NtfySettings(url, dashboard), home(tmp))
    assert got is not None
    return got


def test_a_push_carries_the_routines_name_and_the_dashboards_link_only(tmp_path: Path) -> None:
    assert push_for("https://ntfy.sh/my-topic", tmp_path) == {
        "url": "https://ntfy.sh/my-topic",
        "title": "drafter needs you",
        "message": phone.WAITING,
        "tags": "bell",
        "click": DASHBOARD,
        "token_file": str(tmp_path / "secrets" / "ntfy-token"),
    }
    # No dashboard URL known: no link at all (never a guess, never an approval link).
    assert push_for("https://ntfy.sh/t", tmp_path, None)["click"] is None


def test_only_a_pause_and_its_expiry_go_to_the_phone(tmp_path: Path) -> None:
    settings, p = NtfySettings("https://ntfy.sh/t"), home(tmp_path)
    [proposed] = proposal_notifications(ROUTINE, (7,))
    assert phone.push_of(proposed, settings, p) is None  # a proposal of a run that goes on
    assert phone.push_of(Notification("drafter: done", "ok"), settings, p) is None
    expired = phone.push_of(expired_note("drafter", "r-1"), settings, p)
    assert expired is not None
    assert (expired["title"], expired["message"], expired["tags"]) == (
        "drafter: nobody answered",
        phone.EXPIRED,
        "hourglass",
    )
    assert phone.start(paused_note(), None, p) is None  # no [notify.ntfy]: nothing starts


def test_worker_ntfy_publishes_with_the_token_and_logs_nothing_of_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_token(tmp_path)
    caplog.set_level(logging.DEBUG)
    with FakeNtfy(token=TOKEN) as ntfy:
        assert phone.send(push_for(f"{ntfy.url}/my-topic", tmp_path)) is True
        [req] = ntfy.pushes
    assert (req.method, req.path) == ("POST", "/my-topic")
    h = req.headers
    assert (h["title"], h["tags"], h["click"]) == ("drafter needs you", "bell", DASHBOARD)
    assert h["authorization"] == f"Bearer {TOKEN}"
    assert req.raw.decode() == phone.WAITING
    # The request's content, its input, its id's commands: none of it reaches the phone.
    sent = repr(req.headers) + req.raw.decode()
    for secret in (REQUEST, "approve", "deny", "pending"):
        assert secret not in sent
    assert TOKEN not in caplog.text


def test_without_a_token_file_the_push_goes_without_authorization(tmp_path: Path) -> None:
    with FakeNtfy() as ntfy:
        assert phone.send(push_for(f"{ntfy.url}/t", tmp_path, None)) is True
        [req] = ntfy.pushes
    assert "authorization" not in req.headers
    assert "click" not in req.headers  # no dashboard URL: no Click header


def test_a_token_file_open_to_others_is_refused_and_nothing_is_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = write_token(tmp_path, 0o644)
    with FakeNtfy() as ntfy:
        assert phone.send(push_for(f"{ntfy.url}/t", tmp_path)) is False
        assert ntfy.requests == []
    [line] = [r.getMessage() for r in caplog.records if r.name == "vinos.phone"]
    assert f"{token} is open to other users (mode 0644): run `chmod 600 {token}`" in line
    assert TOKEN not in caplog.text


def test_a_refused_push_is_one_log_line_without_the_token_or_the_topic(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_token(tmp_path)
    with FakeNtfy(token="another-token") as ntfy:
        assert phone.send(push_for(f"{ntfy.url}/private-topic", tmp_path)) is False
    [line] = [r.getMessage() for r in caplog.records if r.name == "vinos.phone"]
    assert line == f"the ntfy push was not sent: ntfy at {ntfy.url}/… answered 401 Unauthorized"
    assert TOKEN not in caplog.text and "private-topic" not in caplog.text


def test_the_daemons_side_never_waits_for_the_push(tmp_path: Path) -> None:
    with FakeNtfy(delay=3.0) as ntfy:
        settings = NtfySettings(f"{ntfy.url}/t")
        began = time.monotonic()
        thread = phone.start(paused_note(), settings, home(tmp_path))
        assert time.monotonic() - began < 0.5  # the loop goes on while ntfy is slow
        assert thread is not None
        thread.join(timeout=30)
        assert len(ntfy.pushes) == 1


def test_a_loopback_ntfy_on_another_users_port_gets_nothing(
    tmp_path: Path, squat: Squat, caplog: pytest.LogCaptureFixture
) -> None:
    write_token(tmp_path)
    url = f"http://127.1:{squat.port}/my-topic"
    assert phone.send(push_for(url, tmp_path)) is False
    [line] = [r.getMessage() for r in caplog.records if r.name == "vinos.phone"]
    assert f"port {squat.port} of this machine is held by another user's program" in line
    assert line.startswith(f"the ntfy push was not sent: ntfy at http://127.1:{squat.port}/…")
    assert squat.received() == []
    assert TOKEN not in caplog.text


def test_a_token_no_header_can_carry_is_refused_without_quoting_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = write_token(tmp_path)
    token.write_text("tk_first half\u00e9\n")
    with FakeNtfy() as ntfy:
        assert phone.send(push_for(f"{ntfy.url}/t", tmp_path)) is False
        assert ntfy.requests == []
    [line] = [r.getMessage() for r in caplog.records if r.name == "vinos.phone"]
    assert line == (
        f"the ntfy push was not sent: the ntfy token in {token} has a space or a character "
        "outside printable ASCII, which no header carries: write the token alone on one line"
    )
    assert "first half" not in caplog.text
