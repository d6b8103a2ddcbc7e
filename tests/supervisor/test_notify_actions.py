"""A "needs you" notification's one action, "Open the dashboard", through a real notify-send
stand-in (a shell script first on PATH: a notification server cannot run in this headless
session, so the click is the script printing the action, as `notify-send --wait` prints the
one chosen). Where notify-send has no --action (libnotify < 0.7.10) it is a plain
notification, and `doctor` says which (supervisor/cli/setupplan.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from supervisor.engine import notify
from tests.supervisor.daemonkit import fake_notify_send, notifications, wait_for


@pytest.fixture(autouse=True)
def _fresh_answers() -> None:
    notify._TAKES.clear()  # asked once per binary: each test has its own stand-in


def opener(tmp_path: Path) -> tuple[list[str], Path]:
    mark = tmp_path / "opened"
    return [sys.executable, "-c", f"open({str(mark)!r}, 'w').close()"], mark


def test_open_runs_the_opener_and_the_notification_names_only_that_action(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, record = fake_notify_send(tmp_path, choose="open")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    argv, mark = opener(tmp_path)
    assert notify.send("drafter needs you", "the run is paused", on_open=argv)
    wait_for(mark.exists, what="the dashboard's opener")
    [call] = notifications(record)
    assert "--action=open=Open the dashboard" in call and "--wait" in call
    # Never an approval on the notification itself: the one action opens the dashboard.
    assert not [a for a in call if a.startswith("--action") and "open=" not in a]
    assert notify.actions_in_force()[0] is True


def test_another_answer_or_a_closed_notification_opens_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, record = fake_notify_send(tmp_path, choose="closed")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    argv, mark = opener(tmp_path)
    cmd = notify.argv("drafter needs you", "the run is paused", "normal", actions=True)
    assert cmd is not None and "--wait" in cmd
    listener = notify._send_listening(cmd, argv, None, "drafter needs you")
    assert listener is not None
    listener.join(60)
    assert not listener.is_alive() and len(notifications(record)) == 1
    assert not mark.exists()


def test_without_action_support_it_is_a_plain_notification_and_doctor_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, record = fake_notify_send(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    argv, mark = opener(tmp_path)
    assert notify.send("drafter needs you", "the run is paused", on_open=argv)
    [call] = notifications(record)
    assert not [a for a in call if a.startswith("--action")] and "--wait" not in call
    takes, why = notify.actions_in_force()
    assert takes is False and "has no --action" in why
    assert not mark.exists()
