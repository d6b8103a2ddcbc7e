"""Who may be sent to on a loopback port, decided on /proc/net/tcp(6) text (no /proc read, no
user database: `name_of` is a table here). The chain with a real second user's listener is
tests/worker/test_worker_squatter.py; the dashboard's own decision on the same parser is
tests/dashboard/test_dashboard_squatter.py."""

from __future__ import annotations

import ipaddress

import pytest

from routines.listeners import (
    DiagError,
    Listener,
    Owners,
    loopback_target,
    owners,
    parse_diag,
    parse_table,
    read_listeners,
    read_tables,
    untrusted,
)
from tests.dashboard.squatkit import HEADER, row
from worker.loopback import prove
from worker.providers.base import ProviderError

ME, OLLAMA, FRIEND, OTHER = 1000, 968, 1001, 1002
NAMES = {0: "root", ME: "me", OLLAMA: "ollama", FRIEND: "friend", OTHER: "mallory"}
TCP = "\n".join(
    [
        HEADER,
        row(0, "127.0.0.1", 1000, "0A", ME, 1),  # ours
        row(1, "127.0.0.1", 1001, "0A", 0, 2),  # root's
        row(2, "127.0.0.1", 11434, "0A", OLLAMA, 3),  # the `ollama` system user's
        row(3, "127.0.0.1", 1003, "0A", FRIEND, 4),  # a user config.toml may name
        row(4, "127.0.0.1", 1004, "0A", OTHER, 5),  # anyone else
        row(5, "127.0.0.1", 1005, "01", OTHER, 6),  # a connection, not a listener
        row(6, "0.0.0.0", 1006, "0A", OTHER, 7),  # the wildcard takes 127.0.0.1 too
        row(7, "127.0.0.2", 1007, "0A", OTHER, 8),  # 127.0.0.2 is not 127.0.0.1
    ]
)
TCP6 = "\n".join(
    [
        HEADER,
        row(0, "::", 1008, "0A", OTHER, 9),  # dual stack: takes 127.0.0.1 and ::1
        row(1, "::1", 1009, "0A", OTHER, 10),
        row(2, "::1", 1000, "0A", OTHER, 11),  # beside our 127.0.0.1:1000, on ::1
    ]
)
TABLE = parse_table(TCP) + parse_table(TCP6)


def check(url: str, trusted: tuple[str, ...] = ()) -> None:
    prove(
        url,
        trusted,
        "Ollama",
        "ollama_listener_users",
        table=lambda: TABLE,
        name_of=NAMES.get,
        me=ME,
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:1000",  # ours
        "http://127.0.0.1:1001/v1",  # root's
        "http://127.0.0.1:11434",  # ollama's, trusted by name
        "http://127.0.0.1:2000",  # nobody listens: the request fails on its own
        "http://127.0.0.1:1005",  # only a connection there
        "http://127.0.0.1:1009",  # ::1 is not 127.0.0.1
        "http://192.0.2.7:1004",  # off this machine: the network decides
        "https://api.example.com/v1",
    ],
)
def test_ours_root_ollama_and_elsewhere_may_be_sent_to(url: str) -> None:
    check(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:1004",
        "http://127.0.0.1:1006",  # bound to 0.0.0.0
        "http://127.0.0.1:1008",  # bound to ::
        "http://[::1]:1009",
        "http://localhost:1000",  # ours on 127.0.0.1, theirs on ::1: localhost may be either
        "http://LOCALHOST.:1004",
        "http://0.0.0.0:1004",  # Linux connects 0.0.0.0 to 127.0.0.1
        "http://[::ffff:127.0.0.1]:1004",
        "http://127.0.0.2:1007",
    ],
)
def test_anyone_else_is_refused_naming_port_and_user(url: str) -> None:
    with pytest.raises(ProviderError) as caught:
        check(url)
    message = str(caught.value)
    port = loopback_target(url)
    assert port is not None
    assert f"port {port.port} of this machine" in message
    assert f"uid {OTHER}, user mallory" in message
    assert 'add "mallory" to ollama_listener_users' in message


def test_a_user_named_in_config_is_trusted_and_no_one_else() -> None:
    with pytest.raises(ProviderError, match="user friend"):
        check("http://127.0.0.1:1003")
    check("http://127.0.0.1:1003", trusted=("friend",))
    with pytest.raises(ProviderError, match="user mallory"):
        check("http://127.0.0.1:1004", trusted=("friend",))


def test_a_uid_without_a_name_is_never_trusted() -> None:
    assert untrusted([0, ME, 4242], ME, {"ollama"}, NAMES.get) == (4242,)
    with pytest.raises(ProviderError, match="uid 1002, no user name"):
        prove(
            "http://127.0.0.1:1004",
            ("mallory",),
            "x",
            "s",
            table=lambda: TABLE,
            name_of=lambda _: None,
            me=ME,
        )


def test_the_table_is_read_only_for_a_loopback_url() -> None:
    def no_read() -> list[Listener]:
        raise AssertionError("read /proc for a URL off this machine")

    prove("https://api.example.com/v1", (), "x", "s", table=no_read)


def test_loopback_target_reads_where_a_url_connects() -> None:
    v4, v6 = ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")
    assert loopback_target("http://127.0.0.1:11434") == Owners((v4,), 11434)
    assert loopback_target("http://localhost/v1") == Owners((v4, v6), 80)
    assert loopback_target("https://[::1]/v1") == Owners((v6,), 443)
    assert loopback_target("http://[::]:8080") == Owners((v6,), 8080)
    assert loopback_target("http://127.9.9.9:1") == Owners((ipaddress.ip_address("127.9.9.9"),), 1)
    assert loopback_target("http://10.0.0.1:11434") is None
    assert loopback_target("http://127.0.0.1:99999") is None  # does not parse: fails on its own
    assert loopback_target("ftp://127.0.0.1/") is None


def test_owners_counts_every_socket_a_connection_could_reach() -> None:
    assert owners(TABLE, Owners((ipaddress.ip_address("127.0.0.1"),), 1000)) == (ME,)
    both = Owners((ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")), 1000)
    assert owners(TABLE, both) == (ME, OTHER)


def diag_message(family: int, address: str, port: int, uid: int, inode: int) -> bytes:
    """One sock_diag answer (nlmsghdr + inet_diag_msg) as the kernel writes it."""
    import struct

    src = ipaddress.ip_address(address).packed.ljust(16, b"\0")
    body = struct.pack(
        "=BBBB2s2s16s16sI8sIIIII",
        family,
        10,
        0,
        0,
        port.to_bytes(2, "big"),
        b"\0\0",
        src,
        bytes(16),
        0,
        bytes(8),
        0,
        0,
        0,
        uid,
        inode,
    )
    return struct.pack("=IHHII", 16 + len(body), 20, 2, 1, 0) + body


def test_parse_diag_reads_the_kernels_netlink_answer() -> None:
    import socket
    import struct

    done = struct.pack("=IHHII", 20, 3, 2, 1, 0) + bytes(4)
    data = diag_message(socket.AF_INET, "127.0.0.1", 11434, OTHER, 7) + diag_message(
        socket.AF_INET6, "::", 8080, ME, 8
    )
    got, finished = parse_diag(data)
    assert not finished
    assert [(str(s.address), s.port, s.uid, s.inode) for s in got] == [
        ("127.0.0.1", 11434, OTHER, 7),
        ("::", 8080, ME, 8),
    ]
    assert parse_diag(done) == ([], True)
    with pytest.raises(DiagError):
        parse_diag(struct.pack("=IHHII", 36, 2, 0, 1, 0) + bytes(20))


def test_sock_diag_and_proc_agree_on_the_kernels_own_listeners() -> None:
    # Both real: the netlink answer the worker reads, and the /proc tables it falls back to.
    import os
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        inode = os.stat(f"/proc/self/fd/{s.fileno()}").st_ino
        fast = [x for x in read_listeners() if x.port == port]
        slow = [x for x in read_tables() if x.port == port]
    assert fast == slow == [Listener(ipaddress.IPv4Address("127.0.0.1"), port, os.getuid(), inode)]
