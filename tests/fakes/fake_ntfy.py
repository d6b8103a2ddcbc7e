"""An ntfy server's publish API on 127.0.0.1 (https://docs.ntfy.sh/publish/): POST or PUT
/<topic> with the message as the body and Title, Tags, Click, Priority and Authorization
headers; it answers the message event as JSON, as ntfy does. With `token` set, a request
without `Authorization: Bearer <token>` gets ntfy's 401 (as a server whose topic is
access-controlled). Each accepted push is in `pushes`.
"""

from __future__ import annotations

import time
from typing import Any

from .server import FakeServer, Recorded, Reply

__all__ = ["FakeNtfy"]


class FakeNtfy(FakeServer):
    def __init__(self, *, token: str | None = None, status: int = 200, delay: float = 0) -> None:
        super().__init__()
        self.token = token
        self.status = status  # a status other than 200: the server refuses every push
        self.delay = delay  # seconds before each answer (a slow server)

    @property
    def pushes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in ("POST", "PUT")]

    def route(self, req: Recorded) -> Reply:
        topic = req.path.strip("/")
        if req.method not in ("POST", "PUT") or not topic or "/" in topic:
            return Reply(404, {"code": 40401, "http": 404, "error": "page not found"})
        if self.token is not None and req.headers.get("authorization") != f"Bearer {self.token}":
            return Reply(401, {"code": 40101, "http": 401, "error": "unauthorized"})
        if self.status != 200:
            return Reply(self.status, {"http": self.status, "error": "refused"}, delay=self.delay)
        event: dict[str, Any] = {
            "id": f"m{len(self.requests)}",
            "time": int(time.time()),
            "event": "message",
            "topic": topic,
            "message": req.raw.decode("utf-8", "replace"),
        }
        for key in ("title", "click"):
            if key in req.headers:
                event[key] = req.headers[key]
        if "tags" in req.headers:
            event["tags"] = req.headers["tags"].split(",")
        return Reply(200, event, delay=self.delay)
