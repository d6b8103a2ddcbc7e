"""The server name (SNI) of a TLS ClientHello, from the first bytes a client sends, pure.

With a host list, the egress proxy lets a CONNECT tunnel carry only a TLS session whose
ClientHello names the CONNECT host: otherwise `CONNECT listed.example:443` could carry a
session for any other site the same front serves (domain fronting). This reads the
TLSPlaintext records (RFC 8446 5.1), joins the handshake fragments, and walks the ClientHello
(4.1.2) to its server_name extension (RFC 6066 3). Anything it cannot read whole is refused,
never guessed: a second server_name extension, two names in it, a name that is not ASCII,
an encrypted inner ClientHello (ECH).

Stdlib only: imported by the proxy process (sandbox/egressserver.py).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["MAX_HELLO", "Hello", "HelloState", "parse_client_hello"]

MAX_HELLO = 64 * 1024  # a ClientHello with post-quantum key shares is ~2 KB
_RECORD_MAX = 2**14 + 256  # a record's plaintext, with some slack for odd clients
_HANDSHAKE = 22
_CLIENT_HELLO = 1
_SERVER_NAME = 0
_HOST_NAME = 0
# Encrypted ClientHello (RFC 9849) and its draft predecessor ESNI: the server the session is
# really for travels encrypted inside, and the outer SNI only names a front. A CDN serving
# a listed host would open any other site it serves. tests/sandbox/test_redteam_tls.py.
_ENCRYPTED_HELLO = (0xFE0D, 0xFFCE)


class HelloState(enum.Enum):
    INCOMPLETE = "incomplete"  # read more bytes and ask again
    NAME = "name"  # a ClientHello with one host name: Hello.name
    NO_NAME = "no name"  # a ClientHello without server_name
    INVALID = "invalid"  # not a TLS ClientHello, or one read ambiguously: Hello.why


class Hello(NamedTuple):
    state: HelloState
    name: str = ""  # lower case, no trailing dot (NAME)
    why: str = ""  # INVALID


class _Short(Exception):
    """The ClientHello ends before a length it declared."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise _Short
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> _Reader:
        return _Reader(self.take(self.number(length_bytes)))

    def text(self) -> str:
        """The rest, as an ASCII host name (a name that is not ASCII is malformed)."""
        raw = self.take(len(self.data) - self.pos)
        if not raw or not raw.isascii():
            raise _Short
        return raw.decode("ascii").lower().rstrip(".")

    def at_end(self) -> bool:
        return self.pos == len(self.data)


def parse_client_hello(data: bytes) -> Hello:
    """What the first bytes of a TLS client say, once enough of them have arrived."""
    handshake = bytearray()
    pos = 0
    while True:
        if len(data) < pos + 5:
            return Hello(HelloState.INCOMPLETE)
        if data[pos] != _HANDSHAKE or data[pos + 1] != 3:
            return Hello(HelloState.INVALID, why="not a TLS handshake")
        length = int.from_bytes(data[pos + 3 : pos + 5], "big")
        if not 0 < length <= _RECORD_MAX:
            return Hello(HelloState.INVALID, why="a TLS record of a bad length")
        if len(data) < pos + 5 + length:
            return Hello(HelloState.INCOMPLETE)
        handshake += data[pos + 5 : pos + 5 + length]
        pos += 5 + length
        if len(handshake) < 4:
            continue
        if handshake[0] != _CLIENT_HELLO:
            return Hello(HelloState.INVALID, why="the first handshake message is no ClientHello")
        need = int.from_bytes(handshake[1:4], "big")
        if need > MAX_HELLO:
            return Hello(HelloState.INVALID, why="a ClientHello too long")
        if len(handshake) >= 4 + need:
            try:
                return _hello_body(_Reader(bytes(handshake[4 : 4 + need])))
            except _Short:
                return Hello(HelloState.INVALID, why="a malformed ClientHello")


def _hello_body(r: _Reader) -> Hello:
    r.take(2 + 32)  # legacy_version, random
    r.vector(1)  # legacy_session_id
    r.vector(2)  # cipher_suites
    r.vector(1)  # legacy_compression_methods
    if r.at_end():
        return Hello(HelloState.NO_NAME)  # no extensions at all
    extensions = r.vector(2)
    if not r.at_end():
        return Hello(HelloState.INVALID, why="bytes after the ClientHello's extensions")
    names: list[str] = []
    seen: set[int] = set()
    while not extensions.at_end():
        kind = extensions.number(2)
        body = extensions.vector(2)
        if kind in seen:
            return Hello(HelloState.INVALID, why="an extension given twice")
        seen.add(kind)
        if kind in _ENCRYPTED_HELLO:
            return Hello(HelloState.INVALID, why="an encrypted ClientHello (ECH) hides its server")
        if kind == _SERVER_NAME:
            entries = body.vector(2)
            while not entries.at_end():
                name_type = entries.number(1)
                name = entries.vector(2).text()
                if name_type == _HOST_NAME:
                    names.append(name)
    if not names:
        return Hello(HelloState.NO_NAME)
    if len(names) > 1:
        return Hello(HelloState.INVALID, why="more than one server name")
    return Hello(HelloState.NAME, name=names[0])
