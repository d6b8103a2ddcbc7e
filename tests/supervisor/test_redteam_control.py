"""Red team, the control socket as another local user: when $XDG_RUNTIME_DIR is a place
another user can write (a shared /tmp on a machine without logind), they can put a socket
where the daemon's goes. The CLI connected and sent its hello, then every request, to
whoever listened: the daemon checks its clients' uid, but the client never checked the
daemon's. Now nothing is sent until SO_PEERCRED says the listener is this user.

The listener is a real second user's socket (tests/helpers/squatter.py, started as
vinos-test2 by scripts/second-user.sh), owned by that uid as an attacker's would be."""

from __future__ import annotations

import os

import pytest

from supervisor.cli.client import DaemonNotRunning, connect
from tests.dashboard.squatkit import SecondUser


def test_the_cli_sends_nothing_to_a_socket_another_user_listens_on() -> None:
    other = SecondUser.from_env()
    st = os.stat(other.path)
    assert st.st_uid != os.getuid()  # the premise: a socket of another uid
    with pytest.raises(DaemonNotRunning) as info:
        connect(other.path, timeout=10)
    assert f"another user (uid {st.st_uid}) listens there; nothing was sent" in str(info.value)


def test_the_dashboard_sends_nothing_to_a_socket_another_user_listens_on() -> None:
    from dashboard.control import DaemonDown, request

    other = SecondUser.from_env()
    owner = os.stat(other.path).st_uid
    with pytest.raises(DaemonDown) as info:
        request(other.path, "status", timeout=10)
    assert f"another user (uid {owner}) listens on {other.path}" in str(info.value)


def test_the_thin_client_and_the_waybar_follower_send_nothing_to_another_users_socket() -> None:
    """The thin `list`/`status` path and `status --waybar --follow` have sockets of their own
    (no ipc import at start-up): the same check, before a byte is sent or a byte printed."""
    import socket

    from supervisor.cli import daemonsock, waybarfollow

    other = SecondUser.from_env()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(other.path))
        assert not daemonsock.peer_is_us(sock)
    a, b = socket.socketpair()
    with a, b:
        assert daemonsock.peer_is_us(a)
    assert daemonsock._exchange(str(other.path), b'{"type":"request"}\n') is None
    assert list(waybarfollow._lines(str(other.path))) == []
