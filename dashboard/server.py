"""`python -m dashboard` (what `vinos-routine dashboard` starts): bind 127.0.0.1, or take the
socket systemd passes (LISTEN_FDS), and serve the app with uvicorn.

The browser is opened on a small 0600 HTML file in the runtime dir that redirects to
`/?token=…`, as Jupyter does: a URL with the token on xdg-open's command line would be
readable by every local user in /proc/PID/cmdline.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import html
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from dashboard.security import load_or_create_token
from routines.paths import paths

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


def ours_already(port: int, token: str) -> bool:
    """Whether the dashboard that holds `port` is this user's (it accepts our token)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    try:
        conn.request(
            "GET",
            "/api/pulse",
            headers={"Host": f"127.0.0.1:{port}", "Cookie": f"vinos_dashboard={token}"},
        )
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def write_opener(runtime_dir: Path, port: int, token: str) -> Path:
    """A 0600 page that sends the browser to the dashboard with the token."""
    url = html.escape(f"http://127.0.0.1:{port}/?token={token}")
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
    token = load_or_create_token(p.runtime_dir / "dashboard.token")
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
            if exc.errno == errno.EADDRINUSE and ours_already(args.port, token):
                opener = write_opener(p.runtime_dir, args.port, token)
                print(f"the dashboard is already running on http://127.0.0.1:{args.port}/")
                if not args.no_open:
                    open_browser(opener)
                return 0
            print(
                f"vinos-routine dashboard: cannot listen on 127.0.0.1:{args.port} "
                f"({exc.strerror}); choose another with --port",
                file=sys.stderr,
            )
            return 1
        port = sock.getsockname()[1]
    opener = write_opener(p.runtime_dir, port, token)
    print(
        f"dashboard on http://127.0.0.1:{port}/ (open {opener}; token in "
        f"{p.runtime_dir / 'dashboard.token'})",
        flush=True,
    )
    if not args.no_open:
        open_browser(opener)
    return serve(sock, port, token)


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
    uvicorn.Server(config).run(sockets=[sock])
    return 0
