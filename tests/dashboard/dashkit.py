"""The real dashboard process for tests: `vinos-routine dashboard --port 0 --no-open`, its
port read from its first line, and plain HTTP requests to it (http.client, no browser).

Like a browser, it exchanges the launch token once for the session cookie (`session`) and
the session's base path (`base`, where every page is: paths given to `request` are below
it unless `bare`), and reads the CSRF value from a page (`csrf`)."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from routines.spec.paths import paths

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str
    cookies: list[str] = field(default_factory=list)


class Dashboard:
    def __init__(self, log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.env = dict(env or os.environ)
        self.env.setdefault("PYTHONPATH", str(REPO))
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.session = ""
        self.base = ""
        self._csrf = ""

    def start(self, timeout: float = 30) -> Dashboard:
        err = open(self.log, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "dashboard", "--port", "0", "--no-open"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
        err.close()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if "http://127.0.0.1:" not in line:
            self.stop()
            raise AssertionError(f"dashboard did not start: {line!r}\n{self.log.read_text()}")
        self.port = int(line.split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"dashboard exited:\n{self.log.read_text()}")
            with contextlib.suppress(OSError):
                if self.get("/api/pulse", bare=True).status == 403:
                    self.session = self.exchange(self.token)
                    return self
            time.sleep(0.05)
        raise AssertionError(f"dashboard not answering:\n{self.log.read_text()}")

    @property
    def token(self) -> str:
        """The launch token good now (it changes at each exchange)."""
        return (paths().runtime_dir / "dashboard.token").read_text().strip()

    def exchange(self, token: str) -> str:
        """The session cookie `/?token=TOKEN` sets ("" when refused); `base` from where it
        redirects."""
        reply = self.get(f"/?token={token}", bare=True)
        if reply.status == 303:
            self.base = reply.headers["location"].split("?", 1)[0].removesuffix("/")
        for cookie in reply.cookies:
            name, _, rest = cookie.partition("=")
            if name == "vinos_dashboard":
                return rest.split(";", 1)[0]
        return ""

    @property
    def csrf(self) -> str:
        """The CSRF value of this start, as the overview page carries it."""
        if not self._csrf:
            found = re.search(r'name="csrf" content="([^"]+)"', self.get("/", cookie=True).body)
            assert found, "no CSRF value on the overview page"
            self._csrf = found.group(1)
        return self._csrf

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """Where the pages are: the origin and the session's base path."""
        return self.origin + self.base

    def request(
        self,
        method: str,
        path: str,
        *,
        host: str | None = None,
        cookie: bool = False,
        headers: dict[str, str] | None = None,
        body: str | None = None,
        bare: bool = False,
    ) -> Reply:
        if not bare and not path.startswith(self.base + "/"):
            path = self.base + path
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {"Host": host or f"127.0.0.1:{self.port}", **(headers or {})}
        if cookie:
            h["Cookie"] = f"vinos_dashboard={self.session}"
        if body is not None:
            h.setdefault("Content-Type", "application/x-www-form-urlencoded")
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            return Reply(
                resp.status,
                {k.lower(): v for k, v in resp.getheaders()},
                resp.read().decode("utf-8", "replace"),
                resp.headers.get_all("set-cookie") or [],
            )
        finally:
            conn.close()

    def get(self, path: str, **kw: object) -> Reply:
        return self.request("GET", path, **kw)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
