"""An MCP server with a host list reaches only those hosts: the real mcp-server-fetch,
started by sandbox.start_stdio with `network = ["allowed.test"]`, spoken to through the SDK
session of worker/mcpclient.py, its traffic through the real egress proxy (a process of its
own, in the test internet of test_egress_internet.py: namespaces of the test's own)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from routines.mcpinstall import resolve_install
from sandbox.stdio import start_stdio
from tests.sandbox.sandbox_testkit import Box
from tests.sandbox.test_egress_internet import Internet, internet
from worker.mcpclient import Portal, Session
from worker.mcptools import render_result

pytestmark = pytest.mark.slow
__all__ = ["internet"]  # the fixture, used by name

FETCH = str(Path(sys.executable).parent / "mcp-server-fetch")


def _fetch(session: Session, url: str) -> tuple[str, bool]:
    result = session.call_tool("fetch", {"url": url, "raw": True}, 60.0)
    got = render_result(result.content, result.structured_content, result.is_error)
    return got.text, got.is_error


def test_the_fetch_server_reaches_its_hosts_and_no_other(box: Box, internet: Internet) -> None:
    policy = dataclasses.replace(box.policy(), network=("allowed.test",))
    install = resolve_install(
        [FETCH, "--ignore-robots-txt"],
        home=os.path.realpath(box.home),
        path_env=dict(policy.env)["PATH"],
    )
    policy = dataclasses.replace(policy, ro_binds=install.binds)
    portal = Portal()
    session = Session(
        portal, start_stdio(list(install.argv), policy, proxy_prefix=internet.prefix), 60.0
    )
    try:
        listed, listed_error = _fetch(session, "http://allowed.test/listed")
        blocked, blocked_error = _fetch(session, "http://blocked.test/unlisted")
    finally:
        session.close()
        portal.close()
    assert not listed_error and "hello from 192.0.2.10:80 GET /listed" in listed, listed
    assert blocked_error, blocked
    assert "hello from" not in blocked
    assert internet.hits() == ["net 192.0.2.10 80 GET /listed HTTP/1.1"], json.dumps(
        [listed, blocked]
    )
    assert not session.child.running()
