"""The SNI of a TLS ClientHello, read from the bytes a real TLS client (Python's ssl, i.e.
OpenSSL) sends, and refused whenever it cannot be read whole."""

from __future__ import annotations

import ssl

import pytest

from sandbox.egress import Refusal
from sandbox.egressserver import sni_refusal
from sandbox.tlshello import Hello, HelloState, parse_client_hello


def client_hello(server_name: str | None) -> bytes:
    """The first flight OpenSSL sends for `server_name` (None: no SNI)."""
    context = ssl.create_default_context()
    if server_name is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def records(handshake: bytes, size: int) -> bytes:
    """`handshake` cut into TLS handshake records of `size` bytes."""
    out = b""
    for i in range(0, len(handshake), size):
        part = handshake[i : i + size]
        out += b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part
    return out


def test_the_name_a_real_client_sends() -> None:
    assert parse_client_hello(client_hello("API.GitHub.com")) == Hello(
        HelloState.NAME, name="api.github.com"
    )
    assert parse_client_hello(client_hello(None)) == Hello(HelloState.NO_NAME)


def test_a_hello_split_over_records_and_reads_is_joined() -> None:
    hello = client_hello("api.github.com")
    body = hello[5:]
    split = records(body, 100)
    assert parse_client_hello(split) == Hello(HelloState.NAME, name="api.github.com")
    for cut in (0, 3, 5, 50, len(split) - 1):
        assert parse_client_hello(split[:cut]).state is HelloState.INCOMPLETE
        assert sni_refusal(split[:cut], "api.github.com") is False


def minimal_hello(extensions: bytes) -> bytes:
    body = b"\x03\x03" + b"\x00" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    body += len(extensions).to_bytes(2, "big") + extensions
    return records(b"\x01" + len(body).to_bytes(3, "big") + body, 16384)


def server_name(*names: bytes) -> bytes:
    entries = b"".join(b"\x00" + len(n).to_bytes(2, "big") + n for n in names)
    data = len(entries).to_bytes(2, "big") + entries
    return b"\x00\x00" + len(data).to_bytes(2, "big") + data


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", "not a TLS handshake"),
        (b"SSH-2.0-OpenSSH_9.2\r\n", "not a TLS handshake"),
        (b"\x16\x03\x01\x00\x00", "a TLS record of a bad length"),
        (records(b"\x02\x00\x00\x00", 100), "the first handshake message is no ClientHello"),
        (minimal_hello(server_name(b"a.test") * 2), "an extension given twice"),
        (minimal_hello(server_name(b"a.test", b"b.test")), "more than one server name"),
        (minimal_hello(server_name(b"caf\xc3\xa9.test")), "a malformed ClientHello"),
        (minimal_hello(b"\x00\x00\x00\x09\x00\x07\x00\x00\x09a.test"), "a malformed ClientHello"),
    ],
)
def test_what_cannot_be_read_whole_is_invalid(data: bytes, why: str) -> None:
    assert parse_client_hello(data) == Hello(HelloState.INVALID, why=why)
    refusal = sni_refusal(data, "a.test")
    assert isinstance(refusal, Refusal) and refusal.status == 403


def test_a_host_list_tunnel_needs_the_connect_host_as_its_sni() -> None:
    assert sni_refusal(client_hello("api.github.com"), "api.github.com") is None
    assert sni_refusal(client_hello("gist.github.com"), "api.github.com") == Refusal(
        403, "CONNECT api.github.com: the TLS ClientHello names gist.github.com (SNI)"
    )
    assert sni_refusal(client_hello(None), "api.github.com") == Refusal(
        403, "CONNECT api.github.com: the TLS ClientHello names no server (SNI)"
    )
    assert sni_refusal(minimal_hello(server_name(b"a.test")), "a.test") is None
