"""Red team, TLS through a host list: the proxy checks the ClientHello's SNI against the
CONNECT host, but an Encrypted ClientHello (ECH, and its draft ESNI) carries the real server
name inside, encrypted: the outer SNI names the listed host, and a CDN that fronts both opens
the inner one. What the proxy cannot read, it refuses."""

from __future__ import annotations

import pytest

from sandbox.egress import Refusal
from sandbox.egressserver import sni_refusal
from sandbox.tlshello import HelloState, parse_client_hello
from tests.sandbox.test_tlshello import client_hello, minimal_hello, records, server_name


def extension(kind: int, body: bytes) -> bytes:
    return kind.to_bytes(2, "big") + len(body).to_bytes(2, "big") + body


def with_extension(hello: bytes, ext: bytes) -> bytes:
    """A real client's one-record ClientHello with `ext` appended to its extensions (every
    length on the way, record, handshake and extensions block, grown to match)."""
    body = bytearray(hello[5 + 4 :])
    pos = 2 + 32
    pos += 1 + body[pos]  # session id
    pos += 2 + int.from_bytes(body[pos : pos + 2], "big")  # cipher suites
    pos += 1 + body[pos]  # compression methods
    length = int.from_bytes(body[pos : pos + 2], "big")
    body[pos : pos + 2] = (length + len(ext)).to_bytes(2, "big")
    body += ext
    return records(b"\x01" + len(body).to_bytes(3, "big") + bytes(body), 16384)


# An ECH "outer" extension: type outer (0), a cipher suite, config id, enc, payload.
_ECH = b"\x00" + b"\x00\x01\x00\x01" + b"\x2a" + b"\x00\x20" + b"k" * 32 + b"\x00\x40" + b"p" * 64


@pytest.mark.parametrize("kind", [0xFE0D, 0xFFCE])
def test_an_encrypted_client_hello_is_refused_whatever_its_outer_name(kind: int) -> None:
    real = with_extension(client_hello("api.github.com"), extension(kind, _ECH))
    # The splice is sound: without the extension the same hello passes.
    assert (
        sni_refusal(with_extension(client_hello("api.github.com"), b""), "api.github.com") is None
    )
    hello = parse_client_hello(real)
    assert hello.state is HelloState.INVALID, hello
    refusal = sni_refusal(real, "api.github.com")
    assert isinstance(refusal, Refusal) and refusal.status == 403
    assert "encrypted ClientHello" in refusal.reason
    minimal = minimal_hello(server_name(b"a.test") + extension(kind, _ECH))
    assert parse_client_hello(minimal).state is HelloState.INVALID
