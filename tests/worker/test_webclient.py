"""The worker's HTTP (worker.webclient, httpx2) against real servers on 127.0.0.1: chunked
replies, a complete body on a connection left open, keep-alive, redirects, proxies from the
environment, the total deadline, and an Ollama reply streaming into the run log."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeOllama, FakeServer, Reply
from tests.fakes import ollama_replies as O
from tests.worker.worker_harness import make_job, routine_toml, run_worker
from worker import webclient
from worker.connector import WEBHOOK as HOOK
from worker.output import post_webhook
from worker.providers.base import Conversation, ProviderError, UserTurn
from worker.providers.ollama import OllamaProvider

WAIT = 30.0  # generous: a gate that is not opened by then is a failure, not a slow machine


class RawServer:
    """A TCP server on 127.0.0.1 that hands each connection to `serve(conn, index)`, for the
    replies http.server cannot send (a body on a connection left open, a slow drip)."""

    def __init__(self, serve: Callable[[socket.socket, int], None]) -> None:
        self._serve = serve
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            index = self.connections
            threading.Thread(target=self._one, args=(conn, index), daemon=True).start()

    def _one(self, conn: socket.socket, index: int) -> None:
        with conn, contextlib.suppress(OSError):  # the client went away: nothing to serve
            self._serve(conn, index)

    def close(self) -> None:
        self.stop.set()
        self._sock.close()


@pytest.fixture
def raw() -> Iterator[Callable[[Callable[[socket.socket, int], None]], RawServer]]:
    servers: list[RawServer] = []

    def make(serve: Callable[[socket.socket, int], None]) -> RawServer:
        servers.append(RawServer(serve))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def read_request(conn: socket.socket) -> bytes:
    """One request (head and Content-Length body) off a connection; b"" at its end."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return head


def test_a_chunked_reply_is_read(raw: Callable[..., RawServer]) -> None:
    def serve(conn: socket.socket, _: int) -> None:
        read_request(conn)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
            b'5\r\n{"a":\r\n4\r\n 12}\r\n0\r\n\r\n'
        )

    server = raw(serve)
    resp = webclient.WebClient().post_json(server.url + "/x", {"q": 1}, timeout=WAIT, trust=HOOK)
    assert (resp.status, resp.json()) == (200, {"a": 12})


def test_a_complete_body_on_an_open_connection_returns_at_once(
    raw: Callable[..., RawServer],
) -> None:
    """The server sends a whole Content-Length body and keeps the connection open: the
    answer is complete, so the client must not wait for the close (or its timeout)."""
    done = threading.Event()

    def serve(conn: socket.socket, _: int) -> None:
        read_request(conn)
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{"ok":true}')
        done.wait(WAIT * 2)  # the connection stays open until the test is over

    server = raw(serve)
    resp = webclient.WebClient().post_json(server.url, {}, timeout=WAIT * 2, trust=HOOK)
    still_open = not done.is_set()
    done.set()
    assert resp.json() == {"ok": True} and still_open


def test_one_client_keeps_its_connection_alive_and_says_who_it_is(
    ollama: FakeOllama, raw: Callable[..., RawServer]
) -> None:
    heads: list[bytes] = []

    def serve(conn: socket.socket, _: int) -> None:
        while head := read_request(conn):
            heads.append(head)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    server = raw(serve)
    client = webclient.WebClient()
    for _ in range(3):
        assert (
            client.post_json(server.url + "/api/chat", {}, timeout=WAIT, trust=HOOK).status == 200
        )
    assert server.connections == 1 and len(heads) == 3
    assert b"\r\nUser-Agent: vinos-routine" in heads[0]


def test_the_deadline_is_total_even_when_bytes_keep_coming(
    raw: Callable[..., RawServer],
) -> None:
    """A byte every 0.05 s never trips a per-read timeout; only a total deadline ends it.
    Without one the request would succeed once the drip ends (after about 50 s)."""

    def serve(conn: socket.socket, _: int) -> None:
        read_request(conn)
        body = b"[" + b" " * 1000 + b"]"
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        for byte in body:
            if server.stop.wait(0.05):
                return
            conn.sendall(bytes([byte]))

    server = raw(serve)
    with pytest.raises(webclient.TimedOut, match="within 2 s"):
        webclient.WebClient().post_json(server.url, {}, timeout=2, trust=HOOK)


def test_a_body_over_the_cap_is_refused(ollama: FakeOllama) -> None:
    ollama.add(O.text("word " * 1000))
    with pytest.raises(webclient.Broken, match="passed 1,000 bytes"):
        webclient.WebClient().post_json(
            ollama.url + "/api/chat", {"stream": False}, timeout=WAIT, max_body=1000, trust=HOOK
        )


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:port/x", "ftp://127.0.0.1/x", "127.0.0.1:11434", "http://"]
)
def test_an_unusable_url_is_a_connect_failure_not_a_crash(url: str) -> None:
    with pytest.raises(webclient.ConnectFailed):
        webclient.WebClient().post_json(url, {}, timeout=WAIT, trust=HOOK)
    error = post_webhook(url, {"markdown": "x"}, timeout=WAIT)
    assert error is not None and "failed" in error


# --- redirects ---


class _Hook(FakeServer):
    scripted = frozenset({("POST", "/hook"), ("POST", "/stolen")})


def test_a_webhook_is_never_redirected() -> None:
    with _Hook(default=Reply(200, {})) as target, _Hook() as hook:
        hook.default = Reply(307, "", headers={"location": target.url + "/stolen"})
        error = post_webhook(hook.url + "/hook", {"markdown": "secret"}, timeout=WAIT)
        assert error is not None and "HTTP 307" in error
        assert len(hook.requests) == 1 and target.requests == []


def _ask(url: str) -> str:
    provider = OllamaProvider(url, context_tokens=2048, web=webclient.WebClient())
    conv = Conversation("system", [UserTurn("hi")])
    return provider.complete(conv, [], model="llama3.2:3b", max_tokens=100, timeout=WAIT).text


def test_ollama_follows_a_redirect_on_its_own_host(ollama: FakeOllama) -> None:
    ollama.add(Reply(307, "", headers={"location": ollama.url + "/api/chat"}), O.text("Hi."))
    assert _ask(ollama.url) == "Hi."
    assert [c.body["messages"][-1]["content"] for c in ollama.chats] == ["hi", "hi"]


def test_ollama_refuses_a_redirect_to_another_host(ollama: FakeOllama) -> None:
    with FakeOllama([O.text("elsewhere")]) as other:
        port = other.url.rsplit(":", 1)[1]
        ollama.add(Reply(307, "", headers={"location": f"http://localhost:{port}/api/chat"}))
        with pytest.raises(ProviderError, match=r"redirected to another host \(localhost\)"):
            _ask(ollama.url)
        assert other.chats == []


def test_ollama_follows_at_most_three_redirects(ollama: FakeOllama) -> None:
    ollama.default = Reply(308, "", headers={"location": ollama.url + "/api/chat"})
    with pytest.raises(ProviderError, match="more than 3 redirects"):
        _ask(ollama.url)
    assert len(ollama.chats) == 4


# --- proxies from the environment ---


@pytest.fixture
def proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


def _proxy(raw: Callable[..., RawServer], seen: list[bytes]) -> RawServer:
    """A proxy-ish server: records each request line; answers a plain request itself with an
    Ollama reply, and refuses a CONNECT (no TLS here) with 403."""

    def serve(conn: socket.socket, _: int) -> None:
        head = read_request(conn)
        seen.append(head.split(b"\r\n")[0])
        if head.startswith(b"CONNECT "):
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        body = b'{"model":"m","message":{"role":"assistant","content":"via proxy"},"done":true}'
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    return raw(serve)


def test_http_proxy_from_the_environment_is_used(
    proxy_env: pytest.MonkeyPatch, raw: Callable[..., RawServer]
) -> None:
    seen: list[bytes] = []
    proxy_env.setenv("HTTP_PROXY", _proxy(raw, seen).url)
    assert _ask("http://ollama.invalid:11434") == "via proxy"
    assert seen == [b"POST http://ollama.invalid:11434/api/chat HTTP/1.1"]


def test_https_proxy_and_no_proxy_are_honoured(
    proxy_env: pytest.MonkeyPatch, raw: Callable[..., RawServer]
) -> None:
    seen: list[bytes] = []
    proxy_env.setenv("HTTPS_PROXY", _proxy(raw, seen).url)
    with pytest.raises(webclient.ConnectFailed):
        webclient.WebClient().post_json("https://hooks.invalid/x", {}, timeout=WAIT, trust=HOOK)
    assert seen == [b"CONNECT hooks.invalid:443 HTTP/1.1"]
    proxy_env.setenv("NO_PROXY", "example.org,hooks.invalid")
    with pytest.raises(webclient.ConnectFailed):  # straight to a name that does not resolve
        webclient.WebClient().post_json("https://hooks.invalid/x", {}, timeout=WAIT, trust=HOOK)
    assert len(seen) == 1


def test_loopback_is_never_proxied(
    proxy_env: pytest.MonkeyPatch, raw: Callable[..., RawServer], ollama: FakeOllama
) -> None:
    seen: list[bytes] = []
    proxy_env.setenv("HTTP_PROXY", _proxy(raw, seen).url)
    ollama.add(O.text("direct"))
    assert _ask(ollama.url) == "direct" and seen == []


# --- streaming ---


def test_a_streamed_reply_arrives_piece_by_piece(ollama: FakeOllama) -> None:
    """The fake holds the rest of the reply until the first line has reached `on_text`:
    a client that waited for the whole body would never open the gate."""
    gate = threading.Event()
    opened_in_time: list[bool] = []
    first = b'{"model":"m","message":{"role":"assistant","content":"Line one.\\n"},"done":false}\n'
    final = (
        b'{"model":"m","message":{"role":"assistant","content":"Line two."},"done":false}\n'
        b'{"model":"m","message":{"role":"assistant","content":""},"done":true,'
        b'"done_reason":"stop","eval_count":4}\n'
    )

    def hold() -> None:
        opened_in_time.append(gate.wait(WAIT))

    ollama.add(Reply(200, chunks=(first, hold, final)))
    seen: list[str] = []

    def on_text(text: str) -> None:
        seen.append(text)
        gate.set()

    provider = OllamaProvider(
        ollama.url, context_tokens=2048, web=webclient.WebClient(), on_text=on_text
    )
    reply = provider.complete(
        Conversation("s", [UserTurn("u")]), [], model="m", max_tokens=10, timeout=WAIT * 2
    )
    assert opened_in_time == [True]
    assert seen == ["Line one.", "Line two."]
    assert (reply.text, reply.output_tokens) == ("Line one.\nLine two.", 4)
    assert ollama.chats[0].body["stream"] is True


def test_a_slow_local_model_shows_its_lines_in_the_run_log(home: Path, ollama: FakeOllama) -> None:
    words = "First line of the news.\nSecond line, later.\nThird line, last."
    ollama.add(O.text(words, word_delay=0.01))
    r = run_worker(make_job(home, routine_toml(route="ollama"), ollama_url=ollama.url))
    assert r.result.status == "ok"
    texts = [e.text for e in r.events_of("model_text")]
    assert texts == ["First line of the news.", "Second line, later.", "Third line, last."]
    kinds = r.kinds()
    first_text = kinds.index("model_text")
    assert kinds.index("model_call") < first_text < kinds.index("model_reply")
