"""A real PostgreSQL cluster for the fleet tests: initdb + pg_ctl in a temporary directory, as
the unprivileged test user, listening only on a Unix socket in that directory."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

__all__ = ["Cluster", "bindir"]


def bindir() -> Path | None:
    """Where initdb and pg_ctl live: pg_config's answer, Debian's versioned dirs, /usr/bin."""
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if out and (Path(out) / "initdb").is_file():
            return Path(out)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    candidates += ["/usr/bin/initdb"]
    for c in candidates:
        if Path(c).is_file():
            return Path(c).parent
    return None


class Cluster:
    """One cluster, started once per test session; a fresh database per test."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        # Short: a Unix socket path must fit in 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="vpg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root
        self.user = os.environ.get("USER") or "vinos-test"
        self._names = itertools.count(1)

    def _run(self, *argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True, text=True)

    def start(self) -> None:
        import getpass

        self.user = getpass.getuser()
        self._run(
            str(self.bin / "initdb"),
            "-D", str(self.data),
            "-U", self.user,
            "--auth=trust",
            "--no-sync",
            "--locale=C.UTF-8",
            "-E", "UTF8",
        )  # fmt: skip
        opts = (
            f"-c listen_addresses='' -c unix_socket_directories='{self.socket_dir}' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=60 -c shared_buffers=16MB"
        )
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts,
            "-l", str(self.root / "log"), "-w", "-t", "60", "start",
        )  # fmt: skip
        self.opts = opts

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", self.opts,
            "-l", str(self.root / "log"), "-w", "-t", "60", "start",
        )  # fmt: skip

    def processes(self) -> list[int]:
        """The postmaster's pid and its children's (the backends, the background workers)."""
        import psutil

        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]

    def hang(self) -> list[int]:
        """Freeze the server (SIGSTOP of the postmaster and every backend): connections stay
        open and nothing answers, as on a hung host. The pids, for `unhang`."""
        import signal

        pids = self.processes()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return pids

    def unhang(self, pids: list[int]) -> None:
        import signal

        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.socket_dir} port=5432 dbname={dbname} user={self.user}"

    def create_database(self, template: str | None = None) -> str:
        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            sql = f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else "")
            conn.execute(sql.encode())
        return name
