"""Who listens on a port of this machine, read from /proc/net/tcp(6) text and sock_diag bytes.
The worker's connector decides on these tables (tests/worker/test_connector.py; the chain with a
real second user's listener is tests/worker/test_worker_squatter.py); the dashboard's own
decision on the same parser is tests/dashboard/test_dashboard_squatter.py."""

from __future__ import annotations

import ipaddress

import pytest

from routines.listeners import (
    DiagError,
    Listener,
    Owners,
    owners,
    parse_diag,
    parse_table,
    read_listeners,
    read_tables,
    untrusted,
)
from tests.dashboard.squatkit import HEADER, row

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


def test_ours_roots_and_named_users_are_trusted_and_a_nameless_uid_never() -> None:
    assert untrusted([0, ME, OLLAMA, FRIEND, OTHER], ME, {"ollama"}, NAMES.get) == (FRIEND, OTHER)
    assert untrusted([FRIEND, OTHER], ME, {"friend"}, NAMES.get) == (OTHER,)
    assert untrusted([4242], ME, {"ollama"}, NAMES.get) == (4242,)
