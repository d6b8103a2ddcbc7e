"""The test side of a second local user's listener (tests/helpers/squatter.py, started as
root by scripts/second-user.sh before the tests, as the user vinos-test2)."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["SecondUser", "Squat"]


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

    def listen(self, port: int = 0, address: str = "127.0.0.1") -> Squat:
        r = self.ask({"cmd": "listen", "port": port, "address": address})
        squat = Squat(self, int(r["id"]), int(r["port"]), int(r["uid"]))
        assert squat.uid != os.getuid(), "the helper runs as this very user"
        return squat
