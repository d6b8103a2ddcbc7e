"""Nothing in the code opens an outbound connection except through the one connector
(worker/connector.py, inside the clients worker/webclient.py builds), and the few places
below that carry no secret and no prompt, each with why. An AST walk over every module of
the product's packages: a new HTTP client, a socket connected to an internet address, an SDK
given its own HTTP stack, or an MCP client over HTTP fails here, naming the file and line."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dashboard", "ipc", "routines", "sandbox", "supervisor", "worker")

# Modules that speak a network protocol of their own. None may import them but the modules
# named, for the reason given.
CLIENT_MODULES = {
    "http.client": {
        # `install URL` fetches a routine file from the gallery: no key, no prompt is sent.
        "supervisor/cli/commands/fetch.py",
    },
    "urllib.request": {"supervisor/cli/commands/fetch.py"},
    "httpx": set(),  # httpx2 is the worker's one HTTP stack
    "requests": set(),
    "aiohttp": set(),
    "urllib3": set(),
    "mcp.client.sse": set(),  # MCP servers run over stdio in the sandbox; no HTTP transport
    "mcp.client.streamable_http": set(),
    "mcp.client.websocket": set(),
}
# Calls that open a TCP connection by themselves.
CONNECTS = {
    "create_connection": {
        # Sends no byte: `doctor`/setup ask whether Ollama's port answers at all.
        "supervisor/hostcheck.py",
        # Sends no byte: wakes the person's own socket-activated dashboard (who_holds
        # checked that the socket is ours first).
        "dashboard/server.py",
    },
    "open_connection": set(),
}
# httpx2's ways to make a client or send without one: webclient.py builds every client.
HTTPX2_MAKERS = {
    "Client",
    "AsyncClient",
    "HTTPTransport",
    "AsyncHTTPTransport",
    "get",
    "post",
    "put",
    "patch",
    "delete",
    "head",
    "options",
    "request",
    "stream",
}
HTTPX2_HOME = "worker/webclient.py"
# SDK clients: each must be handed webclient's client (http_client=), never build its own.
SDKS = {"Anthropic", "AsyncAnthropic", "OpenAI", "AsyncOpenAI"}
# An INET socket made by hand: the egress proxy's own dialer (it serves the sandbox, which
# holds no secret: DESIGN, "Nothing that parses bytes a sandbox sent holds a secret"), the
# network holder's listener inside the sandbox's namespace, the dashboard's listener, and
# the connector's bind probe (binds, never connects).
INET_SOCKETS = {
    "sandbox/egress.py",
    "sandbox/netholder.py",
    "dashboard/server.py",
    "worker/connector.py",
}


def modules() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            yield rel, ast.parse(path.read_text(encoding="utf-8"), rel)


def dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def import_offences(rel: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
    for module, allowed in CLIENT_MODULES.items():
        if rel not in allowed and any(n == module or n.startswith(module + ".") for n in names):
            yield f"{rel}:{node.lineno}: imports {module}"
    if isinstance(node, ast.ImportFrom) and node.module == "httpx2" and rel != HTTPX2_HOME:
        for a in node.names:
            if a.name in HTTPX2_MAKERS:
                yield f"{rel}:{node.lineno}: imports httpx2.{a.name}"


def call_offences(rel: str, node: ast.Call, httpx2_names: set[str]) -> Iterator[str]:
    name = dotted(node.func)
    head, _, last = name.rpartition(".")
    if last in CONNECTS and rel not in CONNECTS[last]:
        yield f"{rel}:{node.lineno}: {name}() opens a connection"
    if head in httpx2_names and last in HTTPX2_MAKERS and rel != HTTPX2_HOME:
        yield f"{rel}:{node.lineno}: {name}() is an HTTP client of its own"
    if last in SDKS and not any(k.arg == "http_client" for k in node.keywords):
        yield f"{rel}:{node.lineno}: {name}() builds its own HTTP client (pass http_client=)"
    if name.endswith("socket.socket") and rel not in INET_SOCKETS:
        families = {dotted(a).rpartition(".")[2] for a in node.args[:1]}
        if families & {"AF_INET", "AF_INET6"}:
            yield f"{rel}:{node.lineno}: an INET socket made by hand"


def offences(rel: str, tree: ast.Module) -> list[str]:
    """Every breach of the rules above in one module, in line order."""
    httpx2_names = {"httpx2"} | {
        a.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for a in node.names
        if a.name == "httpx2" and a.asname
    }
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found += [(node.lineno, o) for o in import_offences(rel, node)]
        elif isinstance(node, ast.Call):
            found += [(node.lineno, o) for o in call_offences(rel, node, httpx2_names)]
    return [o for _, o in sorted(found)]


def test_no_outbound_connection_outside_the_connector() -> None:
    found = [o for rel, tree in modules() for o in offences(rel, tree)]
    assert found == []


def test_the_walk_finds_each_kind_of_offence() -> None:
    # The checker itself, on code that breaks each rule (else a typo in it passes all).
    code = """
import urllib.request
import httpx2 as h
from httpx2 import Client
import socket, anthropic, asyncio
socket.create_connection(("10.0.0.1", 80))
h.post("http://x")
anthropic.Anthropic(api_key="k")
socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
asyncio.open_connection("x", 1)
from mcp.client.streamable_http import streamablehttp_client
"""
    got = list(offences("worker/evil.py", ast.parse(code)))
    assert [g.split(": ", 1)[1] for g in got] == [
        "imports urllib.request",
        "imports httpx2.Client",
        "socket.create_connection() opens a connection",
        "h.post() is an HTTP client of its own",
        "anthropic.Anthropic() builds its own HTTP client (pass http_client=)",
        "an INET socket made by hand",
        "asyncio.open_connection() opens a connection",
        "imports mcp.client.streamable_http",
    ]
