"""`python -m dashboard` (what `vinos-routine dashboard` starts): bind 127.0.0.1, or take the
socket systemd passes (LISTEN_FDS), and serve the app with uvicorn.

The browser is opened on a small 0600 HTML file in the runtime dir that redirects to
`/?token=…`, as Jupyter does: a URL with the token on xdg-open's command line would be
readable by every local user in /proc/PID/cmdline.

When the port is taken, nothing is asked of whoever listens there: another local user may
have taken it first. Only when the kernel's tables prove the listener is this user's own
dashboard (dashboard.listener) does the command open the browser there.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import html
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from dashboard.listener import Holder, Verdict, clear_state, who_holds, write_state
from dashboard.security import new_token, private_dir
from routines.spec.paths import paths

__all__ = ["DEFAULT_PORT", "main"]

DEFAULT_PORT = 8742
SD_LISTEN_FDS_START = 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vinos-routine dashboard")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--no-open", action="store_true")
    return parser.parse_args(argv)


def inherited_socket() -> socket.socket | None:
    """The listening socket systemd passed (socket activation), or None."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()) or os.environ.get("LISTEN_FDS") != "1":
        return None
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(key, None)
    sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    os.set_inheritable(sock.fileno(), False)
    return sock


def bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    sock.listen(64)
    return sock


def already_running(port: int, runtime_dir: Path, wait: float = 10.0) -> Verdict:
    """Who holds 127.0.0.1:`port`, proven from the kernel's tables (dashboard.listener);
    nothing that proves who we are is sent. A socket of ours that no dashboard holds yet may
    be systemd's, waiting for the first connection to start the service: one connection
    (no byte sent) wakes it, and the state file it then writes is awaited."""
    verdict = who_holds(port, runtime_dir)
    if verdict.holder is not Holder.MINE_NOT_DASHBOARD:
        return verdict
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=3):
        pass
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        verdict = who_holds(port, runtime_dir)
        if verdict.holder is not Holder.MINE_NOT_DASHBOARD:
            return verdict
        time.sleep(0.1)
    return verdict


def refusal(port: int, verdict: Verdict) -> str:
    """What the command says when 127.0.0.1:`port` is not this dashboard's (pure)."""
    if verdict.holder is Holder.FOREIGN:
        who = ", ".join(f"uid {u}" + _user_name(u) for u in verdict.uids)
        return (
            f"vinos-routine dashboard: another program ({who}) listens on 127.0.0.1:{port}; "
            "it is not your dashboard, and nothing was sent to it (no token, no browser). "
            "Choose another port with --port, or find that program (ss -ltnp) and stop it"
        )
    return (
        f"vinos-routine dashboard: a program of yours listens on 127.0.0.1:{port}, but no "
        "dashboard of yours holds that socket; nothing was sent to it. Choose another port "
        "with --port, or stop that program (ss -ltnp shows it)"
    )


def _user_name(uid: int) -> str:
    import pwd

    try:
        return f", user {pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return ""


def write_opener(runtime_dir: Path, port: int, token: str) -> Path:
    """A 0600 page that sends the browser to the dashboard with the token."""
    url = html.escape(f"http://127.0.0.1:{port}/?token={token}")
    private_dir(runtime_dir)
    path = runtime_dir / "dashboard-open.html"
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(
            '<!doctype html><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="0;url={url}">'
            f'<title>vinos-routine</title><a href="{url}">Open the vinos-routine dashboard</a>\n'
        )
    tmp.replace(path)
    return path


def open_browser(opener: Path) -> None:
    xdg = shutil.which("xdg-open")
    if xdg is None:
        print(f"xdg-open not found: open {opener} in a browser", file=sys.stderr)
        return
    subprocess.Popen(
        [xdg, opener.as_uri()],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    p = paths()
    token_file = p.runtime_dir / "dashboard.token"
    sock = inherited_socket()
    if sock is not None:
        host, port = sock.getsockname()[:2]
        if sock.family != socket.AF_INET or host != "127.0.0.1":
            print(
                f"vinos-routine dashboard: the socket systemd passed listens on {host}:{port}; "
                "it must be 127.0.0.1 only (ListenStream=127.0.0.1:PORT)",
                file=sys.stderr,
            )
            return 1
    else:
        try:
            sock = bind(args.port)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                print(
                    f"vinos-routine dashboard: cannot listen on 127.0.0.1:{args.port} "
                    f"({exc.strerror}); choose another with --port",
                    file=sys.stderr,
                )
                return 1
            return open_running(args.port, p.runtime_dir, token_file, args.no_open)
        port = sock.getsockname()[1]
    # A new launch token at each start: one left from an earlier start opens nothing.
    token = new_token(token_file)
    write_state(p.runtime_dir, os.getpid(), port)
    opener = write_opener(p.runtime_dir, port, token)
    print(
        f"dashboard on http://127.0.0.1:{port}/ (open {opener}; token in {token_file})",
        flush=True,
    )
    if not args.no_open:
        open_browser(opener)
    try:
        return serve(sock, port, token)
    finally:
        clear_state(p.runtime_dir, os.getpid())


def open_running(port: int, runtime_dir: Path, token_file: Path, no_open: bool) -> int:
    """`port` is taken: open the dashboard there only when the kernel says it is ours."""
    verdict = already_running(port, runtime_dir)
    if verdict.holder is not Holder.OURS:
        print(refusal(port, verdict), file=sys.stderr)
        return 1
    print(f"the dashboard is already running on http://127.0.0.1:{port}/")
    if not no_open:
        from routines.store import read_regular

        raw = read_regular(token_file, 256, head=True) or b""
        token = raw.decode("ascii", "replace").strip()
        if not token:
            print(f"vinos-routine dashboard: no launch token in {token_file}", file=sys.stderr)
            return 1
        open_browser(write_opener(runtime_dir, port, token))
    return 0


def serve(sock: socket.socket, port: int, token: str) -> int:
    import uvicorn

    from dashboard.app import Settings, build_app

    app = build_app(Settings(paths(), token, port))
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        proxy_headers=False,
        server_header=False,
    )
    # uvicorn re-raises the SIGTERM it stopped on once it is done; as an exception here, so
    # main's cleanup (the state file) runs (tests/dashboard/test_dashboard_squatter.py).
    signal.signal(signal.SIGTERM, _stopped)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(0)
