"""The sandbox socket's pure decisions (supervisor/control/sandboxsock.py): which requests are
taken, the argv the daemon writes for them, and the rlimits a call gets. The real daemon's
behaviour is tests/supervisor/test_sandbox_daemon.py."""

from __future__ import annotations

import json
import resource

import pytest

from supervisor.control.sandboxsock import SandboxCall, clamp_rlimits, parse_call, sandboxcli_argv

INF = resource.RLIM_INFINITY


def _request(**over: object) -> bytes:
    req: dict[str, object] = {
        "name": "probe",
        "argv": False,
        "words": ["echo", "hi"],
        "env": {"PATH": "/usr/bin", "TERM": "xterm"},
        "rlimits": [[7, 1024, 4096]],
    }
    req.update(over)
    return json.dumps(req).encode()


def test_a_well_formed_request_is_the_call_it_names() -> None:
    assert parse_call(_request(argv=True), 4) == SandboxCall(
        "probe", True, ("echo", "hi"), {"PATH": "/usr/bin", "TERM": "xterm"}, ((7, 1024, 4096),)
    )


@pytest.mark.parametrize(
    ("data", "nfds", "why"),
    [
        (_request(), 3, "3 descriptors, not 4 (stdin, stdout, stderr, cwd)"),
        (_request(), 5, "5 descriptors, not 4 (stdin, stdout, stderr, cwd)"),
        (b"{", 4, "not JSON"),
        (b"[]", 4, "not an object"),
        (_request(name="--help"), 4, "no routine name"),
        (_request(name=""), 4, "no routine name"),
        (_request(name=3), 4, "no routine name"),
        (_request(words=[]), 4, "no command"),
        (_request(words=["a\0b"]), 4, "no command"),
        (_request(words="true"), 4, "no command"),
        (_request(env={"A": 1}), 4, "a malformed environment"),
        (_request(env=["A=1"]), 4, "a malformed environment"),
        (_request(rlimits=[[7, 1]]), 4, "malformed rlimits"),
        (_request(rlimits=[[7, 1, "2"]]), 4, "malformed rlimits"),
        (_request(rlimits=[[7, 1, True]]), 4, "malformed rlimits"),
    ],
)
def test_a_malformed_request_is_refused_with_why(data: bytes, nfds: int, why: str) -> None:
    assert parse_call(data, nfds) == why


def test_the_daemon_writes_the_argv_and_the_client_names_only_routine_and_command() -> None:
    # A word that looks like an option lands after `--`: sandboxcli's command, never a flag of
    # the interpreter or a module of the client's choosing.
    call = SandboxCall("probe", True, ("-m", "os", "--x"), {}, ())
    assert sandboxcli_argv(call, "/py") == [
        "/py", "-P", "-m", "worker.sandboxcli", "probe", "--argv", "--", "-m", "os", "--x"
    ]  # fmt: skip
    plain = SandboxCall("probe", False, ("true",), {}, ())
    assert sandboxcli_argv(plain, "/py") == [
        "/py", "-P", "-m", "worker.sandboxcli", "probe", "--", "true"
    ]  # fmt: skip


def test_a_call_gets_the_clients_rlimits_never_above_the_daemons_hard_ones() -> None:
    own = {1: (100, 200), 2: (INF, INF), 3: (50, 50)}
    asked = ((1, 150, 1000), (2, 10, INF), (3, INF, INF), (99, 1, 1))
    # 1: hard capped at 200, soft kept; 2: as asked; 3: both capped; 99: unknown, left out.
    assert clamp_rlimits(asked, own) == [[1, 150, 200], [2, 10, INF], [3, 50, 50]]
