"""`vinos-routine`'s entry point: `list`, `status`, `history` and `cost` asked of the daemon
when one is up, before anything else is imported; every other command, and these whenever
the daemon cannot answer, go to supervisor/cli/main.py as before.

This module's start-up is the whole cost of a thin `list`: it imports only what Python has
loaded at start anyway, plus `_socket` and `json` (no argparse, TOML, SQLite, dataclasses,
pathlib or enum; tests/supervisor/test_thin_client.py checks the list). A daemon that is not
there costs one stat of its socket file. The options these verbs take are parsed here by hand; any
that is not recognised exactly (`--help`, an abbreviation, a bad number) goes to the full
parser, which says what argparse says.
"""

from __future__ import annotations

import os
import sys

from supervisor.cli.daemonsock import (
    context,
    daemon_running,
    home_of_env,
    peer_is_us,
    socket_path,
)

__all__ = ["context", "main", "parse", "socket_path", "thin"]

VERBS = ("list", "status", "history", "cost")


def _flags(rest: list[str], allowed: tuple[str, ...]) -> dict[str, object] | None:
    opts: dict[str, object] = {}
    for arg in rest:
        if arg not in allowed:
            return None
        opts[arg[2:]] = True
    return opts


def _history(rest: list[str]) -> dict[str, object] | None:
    opts: dict[str, object] = {}
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--json":
            opts["json"] = True
        elif arg == "-n" or (arg.startswith("-n") and len(arg) > 2):
            value = arg[2:] if len(arg) > 2 else (rest[i + 1] if i + 1 < len(rest) else "")
            i += 0 if len(arg) > 2 else 1
            if not value or value.startswith(("-", "=")):
                return None
            try:
                opts["n"] = int(value)  # what argparse's type does
            except ValueError:
                return None
            if not 1 <= opts["n"] <= 1_000_000:  # type: ignore[operator]
                return None  # refused by the full parser (history.py's -n)
        elif arg.startswith("-") or "name" in opts:
            return None
        else:
            opts["name"] = arg
        i += 1
    return opts if "name" in opts else None


def _cost(rest: list[str]) -> dict[str, object] | None:
    opts: dict[str, object] = {}
    periods = 0
    i = 0
    while i < len(rest):
        arg = rest[i]
        nxt = rest[i + 1] if i + 1 < len(rest) else None
        if arg == "--json":
            opts["json"] = True
        elif arg in ("--today", "--week"):
            opts["period"] = arg[2:]
            periods += 1
        elif arg == "--days":
            if nxt is None or nxt.startswith("-"):
                return None
            opts["days"], i = nxt, i + 1
            periods += 1
        elif arg == "--month":
            if nxt is not None and not nxt.startswith("-"):
                opts["month"], i = nxt, i + 1
            else:
                opts["month"] = "month:this"  # the option's `const`
            periods += 1
        else:
            return None
        i += 1
    # The options are mutually exclusive, and argparse says so: the full path does.
    return opts if periods <= 1 else None


def parse(argv: list[str]) -> tuple[str, dict[str, object]] | None:
    """(verb, options) when `argv` is a read command the daemon can answer, else None."""
    if not argv or argv[0] not in VERBS:
        return None
    verb, rest = argv[0], argv[1:]
    if verb == "list":
        opts = _flags(rest, ("--json",))
    elif verb == "status":
        opts = _flags(rest, ("--json", "--waybar"))
        if opts is not None and len(opts) > 1:
            return None  # mutually exclusive: argparse's message
    elif verb == "history":
        opts = _history(rest)
    else:
        opts = _cost(rest)
    return None if opts is None else (verb, opts)


def _exchange(path: str, request: bytes) -> list[bytes] | None:
    """The lines the daemon sent after its hello, up to its response; None on any failure."""
    import _socket

    timeout = float(os.environ.get("VINOS_CONTROL_TIMEOUT_SEC") or 10.0)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        if not peer_is_us(sock):
            return None  # the full client says who listens there; nothing is sent to them
        sock.sendall(b'{"type":"hello","protocol":1}\n' + request)
        lines: list[bytes] = []
        pending = b""
        while True:
            data = sock.recv(1 << 16)
            if not data:
                return None
            pending += data
            *done, pending = pending.split(b"\n")
            for line in done:
                lines.append(line)
                # Unescaped quotes are never inside a JSON string: only a response has this.
                if b'"type":"response"' in line:
                    return lines
    except TimeoutError:
        # The daemon holds its lock (daemon_running) yet did not answer within the control
        # timeout: the full path must not wait it out a second time.
        from supervisor.client import waited_out

        waited_out()
        return None
    except OSError:
        return None
    finally:
        sock.close()


def thin(argv: list[str]) -> int | None:
    """The exit code of the command answered by the daemon, or None: run it in-process."""
    parsed = parse(argv)
    if parsed is None:
        return None
    path = socket_path()
    home = home_of_env()
    if home is None or len(os.fsencode(path)) > 107 or not os.path.exists(path):
        return None  # no daemon: the plain in-process path, without a socket import
    if not daemon_running(path):
        return None  # a socket unit listening for a stopped daemon: a read never starts it
    import json

    verb, opts = parsed
    args = {"verb": verb, "opts": opts, **context(home)}
    req = {"type": "request", "id": 1, "cmd": "answer", "args": args}
    lines = _exchange(path, json.dumps(req, separators=(",", ":")).encode() + b"\n")
    if not lines:
        return None
    try:
        messages = [json.loads(line) for line in lines]
    except ValueError:
        return None
    hello, *events, response = messages
    result = response.get("result") if response.get("ok") else None
    if hello.get("type") != "hello" or not isinstance(result, dict) or "code" not in result:
        if os.environ.get("VINOS_ROUTINE_DEBUG"):  # why the full path runs instead
            why = result.get("fallback") if isinstance(result, dict) else response.get("error")
            print(f"vinos-routine: in-process: {why}", file=sys.stderr)
        return None  # an older daemon, or one that cannot answer this exactly
    out = [e["text"].encode("latin-1") for e in events if e.get("data", {}).get("fd") == 1]
    err = [e["text"].encode("latin-1") for e in events if e.get("data", {}).get("fd") == 2]
    try:
        sys.stdout.buffer.write(b"".join(out))
        sys.stdout.flush()
    except BrokenPipeError:  # `vinos-routine list | head`: the reader left, not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    if err:
        sys.stderr.buffer.write(b"".join(err))
        sys.stderr.flush()
    code: int = result["code"]
    return code


def _plain(argv: list[str]) -> bool:
    try:
        return all(len(a) <= 4096 and a.encode("utf-8") is not None for a in argv)
    except UnicodeEncodeError:
        return False


def main() -> int:
    """Entry point of the `vinos-routine` console script."""
    argv = sys.argv[1:]
    if argv in (["status", "--waybar", "--follow"], ["status", "--follow", "--waybar"]):
        from supervisor.cli.waybarfollow import follow

        return follow()
    # An argument no command takes (too long, not UTF-8) goes to the full CLI, which refuses it
    # in one place (supervisor.cli.main.bad_argument), never to the daemon.
    plain = _plain(argv)
    if plain and argv[:1] == ["sandbox"]:
        from supervisor.cli.sandboxexec import exact_form, exec_sandboxcli

        if (form := exact_form(argv[1:])) is not None:
            exec_sandboxcli(*form)  # before argparse and the command modules: never returns
    code = thin(argv) if plain else None
    if code is not None:
        return code
    from supervisor.cli.main import main as full

    return full(argv)
