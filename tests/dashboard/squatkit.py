"""The test side of a second local user's listener (tests/helpers/squatter.py, started as
root by scripts/second-user.sh before the tests, as the user vinos-test2)."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["HEADER", "SecondUser", "Squat", "row"]


@dataclass(frozen=True)
class Squat:
    """One socket the second user listens on."""

    owner: SecondUser
    id: int
    port: int
    uid: int

    def received(self) -> list[str]:
        """Every request sent to it so far, as raw text (request line and headers)."""
        got = self.owner.ask({"cmd": "received", "id": self.id})["requests"]
        assert isinstance(got, list)
        return [str(r) for r in got]

    def close(self) -> None:
        self.owner.ask({"cmd": "close", "id": self.id})


class SecondUser:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def from_env(cls) -> SecondUser:
        given = os.environ.get("VINOS_SECOND_USER_SOCKET", "")
        if not given or not Path(given).exists():
            pytest.fail(
                "no second local user to play the attacker: as root, scripts/dev-pytest.sh and "
                "make test start one (scripts/second-user.sh start $USER, then set "
                "VINOS_SECOND_USER_SOCKET to the path it prints)"
            )
        return cls(Path(given))

    def ask(self, req: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(self.path))
            with s.makefile("rwb") as f:
                f.write(json.dumps(req).encode() + b"\n")
                f.flush()
                reply = json.loads(f.readline())
        assert isinstance(reply, dict)
        if "error" in reply:
            raise OSError(f"the second user's helper: {reply['error']}")
        return reply

    def call(self, path: Path, text: str) -> dict[str, Any]:
        """As the second user: connect to the SEQPACKET socket `path`, send `text` with
        descriptors, and say what came back (tests/helpers/squatter.py `call`)."""
        return self.ask({"cmd": "call", "path": str(path), "text": text})

    def plant(self, name: str, text: str) -> Path:
        """An executable of the second user's, `name` below a new folder of theirs in /tmp."""
        return Path(str(self.ask({"cmd": "plant", "name": name, "text": text})["path"]))

    def listen(self, port: int = 0, address: str = "127.0.0.1") -> Squat:
        r = self.ask({"cmd": "listen", "port": port, "address": address})
        squat = Squat(self, int(r["id"]), int(r["port"]), int(r["uid"]))
        assert squat.uid != os.getuid(), "the helper runs as this very user"
        return squat


# /proc/net/tcp(6) text for the pure tests of the parser and the decisions
# (tests/dashboard/test_dashboard_squatter.py, tests/routines/test_listeners.py).
HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"


def row(n: int, addr: str, port: int, state: str, uid: int, inode: int) -> str:
    """A line of /proc/net/tcp(6): the address as the kernel prints it, in 32-bit words of
    this machine's byte order."""
    raw = ipaddress.ip_address(addr).packed
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    local = f"{raw.hex().upper()}:{port:04X}"
    zero = "0" * len(raw.hex()) + ":0000"
    return (
        f"{n:4}: {local} {zero} {state} 00000000:00000000 00:00000000 00000000 {uid:5} 0 {inode} 1"
    )
