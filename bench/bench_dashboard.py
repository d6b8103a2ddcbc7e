"""The dashboard: time to first byte of its pages and its resident memory, against a bare `python -m
http.server` serving a static page of the same size, in the same run.

A VINOS_HOME with 10 routines and 3,000 finished runs over 30 days (seeded into the ledger),
a real daemon (so the overview's `status` request is answered) and the real dashboard
process (`vinos-routine dashboard --port 0 --no-open`). TTFB: from sending the request on a
fresh connection to the status line, median and p95 of 60 requests (15 quick) per page.
RSS after those requests. Targets: overview TTFB under 100 ms, RSS under 80 MB.

Runs as an unprivileged user (the daemon refuses root): `make bench` arranges that.
"""

from __future__ import annotations

import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

from bench.common import Row
from routines.runs import RunEnd, RunStatus, Trigger

REPO = Path(__file__).resolve().parent.parent
TARGET_TTFB_MS = 100.0
TARGET_RSS_MB = 80.0
ROUTINES = 10
RUNS_PER_ROUTINE = 300


def _seed(home: Path) -> None:
    from routines.ledger import Ledger

    routines = home / "routines"
    routines.mkdir(parents=True)
    for i in range(ROUTINES):
        (routines / f"routine-{i}.toml").write_text(
            f'[routine]\nkind = "command"\nenabled = false\ndescription = "bench {i}"\n'
            f'[schedule]\ncron = "{i} 6 * * *"\ntimezone = "UTC"\n[command]\nrun = "true"\n'
        )
    now = datetime.now(UTC)
    with Ledger(routines / "state" / "ledger.db") as ledger:
        for i in range(ROUTINES):
            for n in range(RUNS_PER_ROUTINE):
                at = now - timedelta(minutes=n * 144 + i)
                run_id = f"bench-{i}-{n}"
                ledger.record_run(
                    f"routine-{i}",
                    run_id=run_id,
                    trigger=Trigger.SCHEDULE,
                    status=RunStatus.RUNNING,
                    now=at,
                )
                ledger.finish_run(
                    run_id,
                    now=at + timedelta(seconds=30),
                    end=RunEnd(
                        status=RunStatus.OK if n % 7 else RunStatus.FAILED, dollars=0.001 * (n % 5)
                    ),
                )


def _ttfb(port: int, path: str, headers: dict[str, str], count: int) -> list[float]:
    out = []
    for _ in range(count):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.connect()
        t0 = time.perf_counter()
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        out.append(time.perf_counter() - t0)
        body = resp.read()
        assert resp.status == 200, (path, resp.status, body[:200])
        conn.close()
    return out


def _exchange(port: int, token: str) -> tuple[str, str]:
    """The base path and session cookie the launch token buys, as a browser gets them: the
    dashboard answers `/?token=` with a 303 to its per-start base path and sets the cookie."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", f"/?token={token}", headers={"Host": f"127.0.0.1:{port}"})
    resp = conn.getresponse()
    resp.read()
    conn.close()
    assert resp.status == 303, ("token exchange", resp.status)
    base = (resp.getheader("location") or "").split("?", 1)[0].removesuffix("/")
    for header, value in resp.getheaders():
        name, _, rest = value.partition("=")
        if header.lower() == "set-cookie" and name == "vinos_dashboard":
            return base, rest.split(";", 1)[0]
    raise AssertionError("the token exchange set no session cookie")


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(len(values) * 0.95) - 1)]


def _start_line(proc: subprocess.Popen[bytes], marker: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if marker not in line:
        proc.kill()
        raise RuntimeError(f"did not start: {line!r}")
    return line


def run(quick: bool) -> list[Row]:
    count = 15 if quick else 60
    with tempfile.TemporaryDirectory(prefix="vinos-bench-dash-") as tmp:
        root = Path(tmp)
        (root / "system").mkdir()
        (root / "run").mkdir(mode=0o700)
        env = dict(
            os.environ,
            VINOS_HOME=str(root / "home"),
            VINOS_SYSTEM_DIR=str(root / "system"),
            XDG_RUNTIME_DIR=str(root / "run"),
            PYTHONPATH=str(REPO),
        )
        os.environ.update({k: env[k] for k in ("VINOS_HOME", "VINOS_SYSTEM_DIR")})
        _seed(root / "home")
        procs: list[subprocess.Popen[bytes]] = []
        try:
            daemon = subprocess.Popen(
                [sys.executable, "-m", "supervisor", "daemon"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(daemon)
            sock = root / "run" / "vinos-routine" / "control.sock"
            deadline = time.monotonic() + 30
            while not sock.exists():
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise RuntimeError("the daemon did not start")
                time.sleep(0.05)
            dash = subprocess.Popen(
                [sys.executable, "-m", "supervisor", "dashboard", "--port", "0", "--no-open"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            procs.append(dash)
            line = _start_line(dash, "http://127.0.0.1:")
            port = int(line.split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
            token = (root / "run" / "vinos-routine" / "dashboard.token").read_text().strip()
            prefix, session = _exchange(port, token)
            headers = {"Host": f"127.0.0.1:{port}", "Cookie": f"vinos_dashboard={session}"}
            _ttfb(port, f"{prefix}/", headers, 3)  # warm: templates compiled, modules loaded
            pages = {
                p: _ttfb(port, prefix + p, headers, count)
                for p in ("/", "/cost", "/routine/routine-0")
            }
            conn = http.client.HTTPConnection("127.0.0.1", port)
            conn.request("GET", f"{prefix}/", headers=headers)
            size = len(conn.getresponse().read())
            conn.close()
            dash_rss = psutil.Process(dash.pid).memory_info().rss / 2**20

            static = root / "static"
            static.mkdir()
            (static / "index.html").write_bytes(b"x" * size)
            bare = subprocess.Popen(
                [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "0"],
                cwd=static,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            procs.append(bare)
            bare_port = int(_start_line(bare, "port ").split("port ", 1)[1].split()[0])
            bare_headers = {"Host": f"127.0.0.1:{bare_port}"}
            _ttfb(bare_port, "/index.html", bare_headers, 3)
            base = _ttfb(bare_port, "/index.html", bare_headers, count)
            bare_rss = psutil.Process(bare.pid).memory_info().rss / 2**20
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(30)
    base_ms = statistics.median(base) * 1000
    rows = []
    for path, times in pages.items():
        ms = statistics.median(times) * 1000
        rows.append(
            Row(
                f"dashboard TTFB {path} (p95 {_p95(times) * 1000:.1f} ms)",
                ms,
                "ms",
                baseline=f"http.server static {size // 1024} KB: {base_ms:.2f} ms",
                ratio=ms / base_ms,
                target=f"< {TARGET_TTFB_MS:.0f} ms" if path == "/" else "",
                met=ms < TARGET_TTFB_MS if path == "/" else None,
            )
        )
    rows.append(
        Row(
            "dashboard RSS after serving",
            dash_rss,
            "MB",
            baseline=f"http.server: {bare_rss:.1f} MB",
            ratio=dash_rss / bare_rss,
            target=f"< {TARGET_RSS_MB:.0f} MB",
            met=dash_rss < TARGET_RSS_MB,
        )
    )
    return rows
