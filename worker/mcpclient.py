"""The official `mcp` SDK's ClientSession, spoken over a sandboxed server's pipes.

Imported only by runs whose routine declares MCP servers (worker.mcptools imports it at a
server's first use): the SDK and its dependencies cost a worker ~1 s to import, and
tests/worker/test_worker_mcp.py checks a run without MCP never loads `mcp`.

Why not the SDK's `stdio_client`: it spawns the process itself (anyio.open_process with
a command and args), with no way to pass the descriptors bwrap needs (the seccomp program,
--info-fd, the --bind-fd directories, the egress proxy's socket) or to start it in the
netholder's namespace. So sandbox.start_stdio starts it, and the two small pumps below move
newline-delimited JSON-RPC (the stdio transport's framing, parsed and written by the SDK's
own message types) between its pipes and the session's streams, as stdio_client's do.

The session is given no sampling, elicitation or roots callback, so it advertises none of
those capabilities (a run lends a server neither its model nor a person), and a server that
asks anyway gets the SDK's default JSON-RPC error at once, never a hung call
(tests/worker/test_worker_mcp_everything.py).

The worker is synchronous: an anyio blocking portal runs the SDK's event loop in one
thread for the whole run; each request waits on it with a deadline.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from sandbox.stdio import StdioChild

__all__ = ["MAX_LINE", "McpFailure", "Portal", "RemoteTool", "Session"]

MAX_LINE = 4 * 1024 * 1024  # one JSON-RPC message from a server; past it the server is cut off


class McpFailure(Exception):
    """A request failed: the server is gone, hung or answered with an error.

    `answered` is True when the server, still running, answered the request with a
    JSON-RPC error (an unknown tool, bad arguments): that call's tool error, and the
    session stays usable. `hung` when no answer came in time. Any failure but an answered
    one means the session is lost.
    """

    def __init__(self, message: str, *, answered: bool = False, hung: bool = False) -> None:
        super().__init__(message)
        self.answered = answered
        self.hung = hung


@dataclass(frozen=True, slots=True)
class RemoteTool:
    name: str
    description: str
    schema: dict[str, Any]


class Portal:
    """The event loop thread of a run's MCP sessions."""

    def __init__(self) -> None:
        self._cm: AbstractContextManager[BlockingPortal] = start_blocking_portal()
        self.portal = self._cm.__enter__()

    def close(self) -> None:
        self._cm.__exit__(None, None, None)


class Session:
    """One initialised ClientSession over `child`'s pipes."""

    def __init__(self, portal: Portal, child: StdioChild, timeout: float) -> None:
        self.child = child
        self._portal = portal.portal
        self._cm = self._portal.wrap_async_context_manager(_session(child))
        self.closed = False
        try:
            self.session: ClientSession = self._cm.__enter__()

            async def init() -> None:
                with anyio.fail_after(timeout):
                    await self.session.initialize()

            self._call(init, timeout, "initialize")
        except BaseException:
            self.close()
            raise

    def list_tools(self, timeout: float) -> list[RemoteTool]:
        async def listing() -> list[RemoteTool]:
            tools: list[RemoteTool] = []
            cursor: str | None = None
            with anyio.fail_after(timeout):
                for _ in range(100):  # pages; a server that never stops paging is cut off
                    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await self.session.list_tools(params=params)
                    tools += [
                        RemoteTool(t.name, t.description or "", dict(t.input_schema))
                        for t in page.tools
                    ]
                    cursor = page.next_cursor
                    if not cursor:
                        break
            return tools

        result: list[RemoteTool] = self._call(listing, timeout, "tools/list")
        return result

    def call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> Any:
        """The CallToolResult (the SDK's type)."""

        async def calling() -> types.CallToolResult:
            with anyio.fail_after(timeout):
                return await self.session.call_tool(name, arguments)

        return self._call(calling, timeout, "tools/call")

    def _call(self, fn: Any, timeout: float, what: str) -> Any:
        try:
            return self._portal.call(fn)
        except TimeoutError:
            raise McpFailure(f"no answer to {what} within {timeout:g} s", hung=True) from None
        except MCPError as exc:
            if self.child.wait(1.0):  # its stdout closes just before it is seen to exit
                raise McpFailure(f"the server is gone: {self.child.exit_note()}") from None
            if exc.code == types.CONNECTION_CLOSED:  # its stdout ended or went too long
                raise McpFailure(f"{what} failed: the server closed its output") from None
            raise McpFailure(f"{what} failed: {exc}", answered=True) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            self.child.wait(1.0)
            note = self.child.exit_note() or str(exc) or type(exc).__name__
            raise McpFailure(f"the server is gone: {note}") from None
        except Exception as exc:  # an answer the SDK could not read: the server's fault
            raise McpFailure(f"{what} failed: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        """End the session, then the server's whole process tree; never raises."""
        if self.closed:
            return
        self.closed = True
        try:
            self._cm.__exit__(None, None, None)
        except BaseException:  # a session torn down by a dead server: nothing left to do
            pass
        finally:
            self.child.close()


@asynccontextmanager
async def _session(child: StdioChild) -> AsyncIterator[ClientSession]:
    async with _pipes(child) as (read, write), ClientSession(read, write) as session:
        yield session


@asynccontextmanager
async def _pipes(
    child: StdioChild,
) -> AsyncIterator[tuple[Any, Any]]:
    """The session's read and write streams over the child's stdout and stdin."""
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        buf = b""
        async with read_send:
            while True:
                try:
                    await anyio.wait_readable(child.stdout)
                    chunk = os.read(child.stdout, 65536)
                except BlockingIOError:
                    continue
                except (OSError, anyio.ClosedResourceError):
                    return
                if not chunk:
                    return  # EOF: the session fails what is pending (CONNECTION_CLOSED)
                buf += chunk
                *lines, buf = buf.split(b"\n")
                if len(buf) > MAX_LINE:
                    return  # a line without end: treated as the server gone
                for line in lines:
                    if line.strip():
                        await read_send.send(_parse(line))

    async def writer() -> None:
        async with write_recv:
            async for message in write_recv:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                view = memoryview((data + "\n").encode())
                while view:
                    try:
                        await anyio.wait_writable(child.stdin)
                        view = view[os.write(child.stdin, view) :]
                    except BlockingIOError:
                        continue
                    except (OSError, anyio.ClosedResourceError):
                        await read_send.aclose()
                        return

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_recv, write_send
        finally:
            tg.cancel_scope.cancel()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc
