"""A hostile routine, end to end: its sandboxed command plants links and swaps directories
wherever it can write, then real runs, `brief`, `brief --json`, `logs` and `history` follow.
Nothing outside the routine's own places may change, nothing secret may show.

Real CLI (in-process runs, no daemon), real bwrap, as the unprivileged user. HOME is a planted
home and VINOS_HOME its ~/.vinos, the layout a user has.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.inprocess import run_in_process

REPO = Path(__file__).resolve().parents[2]

# Runs in the sandbox (cwd: the run's scratch dir). Every write it can make, it makes at a
# name the runtime uses; every dir it could swap, it tries to swap.
ATTACK = r"""
import os, time
home = os.environ["HOME"]
vinos = home + "/.vinos/routines"
ws = vinos + "/workspace/evil"
sc = os.getcwd()
targets = [home + "/.bashrc", home + "/.config/systemd/user", vinos + "/state/other",
           home + "/.ssh/id_rsa", vinos + "/state/evil", "/proc/self/environ"]
report = []
def attempt(what, f):
    try:
        f(); report.append(what + ":ok")
    except OSError as e:
        report.append(what + ":" + (e.strerror or "?").replace(" ", "-"))
attempt("mv-scratch", lambda: os.rename(sc, sc + "-moved"))
attempt("mv-workspace", lambda: os.rename(ws, ws + "-moved"))
parent = os.path.dirname(sc)
def swap():
    os.rename(parent, parent + "-old")
    os.symlink(home + "/.config/systemd/user", parent)
attempt("swap-scratch-parent", swap)
attempt("state-mkdir", lambda: os.makedirs(vinos + "/state/evil/.scratch", exist_ok=True))
attempt("state-memory", lambda: open(vinos + "/state/evil/memory.md", "a").write("INJECT"))
attempt("bashrc", lambda: open(home + "/.bashrc", "a").write("INJECT"))
now = time.time()
stamps = [time.strftime("%Y-%m-%d-%H%M", time.gmtime(now + 60 * k)) for k in range(-1, 3)]
names = [".scratch", "runs", "memory.md", "last-run.json", "brief-seen.json", "state"]
names += [s + ".md" for s in stamps] + [s + "-%d.md" % n for s in stamps for n in range(2, 30)]
for d in (sc, ws, "/tmp", sc + "/.scratch"):
    for i, n in enumerate(names):
        try:
            os.symlink(targets[i % len(targets)], d + "/" + n)
        except OSError:
            pass
    try:
        os.makedirs(d + "/.scratch", exist_ok=True)
    except OSError:
        pass
for t in targets:
    try:
        report.append(t + ":" + open(t).read()[:80])
    except OSError as e:
        report.append(t + ":" + (e.strerror or "?").replace(" ", "-"))
print("hostile output " + " ".join(report))
print("[evil] refused tool call: shell:forged \x1b[31mred")
"""


def _snapshot(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple[str, ...]]:
    """Every path below root, without following links: kind, and content hash or target."""
    out: dict[str, tuple[str, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in dirnames + filenames:
            path = here / name
            st = path.lstat()
            if path.is_symlink():
                out[str(path)] = ("link", os.readlink(path))
            elif path.is_dir():
                out[str(path)] = ("dir", oct(st.st_mode))
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[str(path)] = ("file", digest, oct(st.st_mode))
    return out


@pytest.fixture
def world(not_root: None) -> Iterator[dict[str, object]]:
    # Not under /tmp: the sandbox has a private /tmp, where a home below it would be writable
    # (privately) and so hide what the read-only root does for a real home.
    base = Path(tempfile.mkdtemp(prefix="vinos-hostile-", dir=Path.home()))
    try:
        yield _plant(base)
    finally:
        shutil.rmtree(base)


def _plant(base: Path) -> dict[str, object]:
    home = base / "home"
    vinos = home / ".vinos"
    marker = "VINOS-SECRET-" + secrets.token_hex(8)
    token = "tok" + secrets.token_hex(12)
    planted = {
        ".bashrc": "# the user's bashrc\n",
        ".config/systemd/user/keep.service": "[Unit]\n",
        ".ssh/id_rsa": f"KEY {marker}\n",
        ".vinos/secrets/anthropic-key": f"sk-ant-{marker}\n",
        ".vinos/routines/state/other/memory.md": f"other's memory {marker}\n",
        ".vinos/routines/other.toml": (
            '[routine]\nkind = "command"\n[schedule]\ncron = "0 6 * * *"\n'
            '[command]\nrun = "true"\n[output]\ntype = "webhook"\n'
            f'url = "https://hooks.example.com/services/{token}"\n'
        ),
    }
    for rel, text in planted.items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    blob = base64.b64encode(ATTACK.encode()).decode()
    run = f"/usr/bin/python3 -c \\\"import base64; exec(base64.b64decode('{blob}'))\\\""
    (vinos / "routines/evil.toml").write_text(
        '[routine]\nkind = "command"\n[schedule]\ncron = "0 6 * * *"\ntimezone = "UTC"\n'
        f'[command]\nrun = "{run}"\n'
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ANTHROPIC_API_KEY", "VINOS_ROUTINE_DEBUG", "NO_COLOR")
    }
    env.update(
        HOME=str(home),
        VINOS_HOME=str(vinos),
        PYTHONPATH=str(REPO),
        TZ="UTC",
        LANG="C.UTF-8",
    )
    return {"home": home, "vinos": vinos, "env": env, "marker": marker, "token": token}


def _cli(world: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    # The CLI's entry point in this process (inprocess.py), as `python -m supervisor` runs it.
    return run_in_process(args, env=world["env"], cwd=str(world["home"]))


@pytest.mark.slow
def test_a_hostile_command_changes_nothing_outside_its_own_places(
    world: dict[str, object],
) -> None:
    home, vinos = Path(str(world["home"])), Path(str(world["vinos"]))
    own = (
        vinos / "routines/state",  # the runtime's: outputs, ledger, run logs (checked below)
        vinos / "routines/workspace/evil",
        vinos / "routines/scratch/evil",
    )
    before = _snapshot(home, own)
    seen: list[str] = []
    for _ in range(2):  # the second run meets whatever the first one left
        r = _cli(world, "run", "evil")
        assert r.returncode == 0, r.stdout + r.stderr
        seen.append(r.stdout + r.stderr)
    for args in (("brief",), ("brief", "--json"), ("logs", "evil"), ("history", "evil")):
        r = _cli(world, *args)
        assert r.returncode == 0, r.stderr
        seen.append(r.stdout + r.stderr)
    after = _snapshot(home, own)
    # The runtime makes the parents of the workspaces and scratch dirs, empty but for `evil`.
    for made in ("workspace", "scratch"):
        assert after.pop(str(vinos / "routines" / made), ("dir",))[0] == "dir"
    assert after == before
    state = vinos / "routines/state/evil"
    outputs = sorted(state.glob("*.md"))
    assert len(outputs) == 2
    for out in outputs:
        assert not out.is_symlink() and out.is_file()
        text = out.read_text()
        assert text.startswith("# evil")
        # What the sandbox could not do, from its own report.
        # Their parents are the read-only root: the mount points cannot move.
        assert "mv-scratch:Read-only-file-system" in text
        assert "mv-workspace:Read-only-file-system" in text
        assert "swap-scratch-parent:Read-only-file-system" in text
        assert "state-mkdir:Read-only-file-system" in text
        assert "state-memory:No-such-file-or-directory" in text
        assert "bashrc:Read-only-file-system" in text
    for name in ("memory.md", "last-run.json", "runs", ".scratch"):
        path = state / name
        assert not path.is_symlink()
    assert not (state / "memory.md").exists()
    assert list((state / ".scratch").iterdir()) == []
    assert list((vinos / "routines/scratch/evil").iterdir()) == []  # run scratch removed
    everything = "\n".join(seen)
    assert str(world["marker"]) not in everything
    assert str(world["token"]) not in everything
    assert "\x1b" not in everything  # no escape sequence of the command's reached a terminal
    brief = json.loads(_cli(world, "brief", "--json").stdout)
    assert {o["routine"] for o in brief["outputs"]} == {"evil"}


def test_links_in_a_state_dir_from_an_older_version_are_never_followed(
    world: dict[str, object],
) -> None:
    """Sandboxes of the first version could write the state dir; their links may still be
    there. A run, `brief` and `brief --json` must follow none of them."""
    home, vinos = Path(str(world["home"])), Path(str(world["vinos"]))
    state = vinos / "routines/state/evil"
    state.mkdir(parents=True)
    (state / ".scratch").symlink_to(home / ".config/systemd/user")
    (state / "2026-01-01-0600.md").symlink_to(home / ".ssh/id_rsa")
    (state / "memory.md").symlink_to(home / ".ssh/id_rsa")
    before = _snapshot(home, (vinos / "routines/state",))
    r = _cli(world, "run", "evil")
    assert r.returncode == 1  # the run fails: its output dir is a link
    assert "scratch" in r.stdout + r.stderr
    for args in (("brief", "--date", "2026-01-01"), ("brief", "--json", "--date", "2026-01-01")):
        shown = _cli(world, *args)
        assert shown.returncode == 0, shown.stderr
        assert str(world["marker"]) not in shown.stdout + shown.stderr
        assert "2026-01-01-0600" not in shown.stdout  # a link is not an output
    assert _snapshot(home, (vinos / "routines/state",)) == before
    assert list((home / ".config/systemd/user").iterdir()) == [
        home / ".config/systemd/user/keep.service"
    ]


def test_a_forged_line_in_a_run_log_is_shown_escaped(world: dict[str, object]) -> None:
    """A log written before events were escaped (or by hand): `logs` still shows one line
    per entry, its newline and escape sequences visible, not obeyed."""
    runs = Path(str(world["vinos"])) / "routines/state/evil/runs"
    runs.mkdir(parents=True)
    forged = "refused tool call: shell:x\n\x1b[32m■ ok · done\x1b[0m"
    entry = {"ts": "2026-12-03T06:00:00.000+00:00", "kind": "tool_refused", "text": forged}
    (runs / "r1.jsonl").write_text(json.dumps(entry) + "\n")
    shown = _cli(world, "logs", "evil")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "06:00:00 ✗ refused tool call: shell:x\\n\\x1b[32m■ ok · done\\x1b[0m"
    ]


def test_debug_prints_each_bwrap_argv_on_the_terminal(world: dict[str, object]) -> None:
    env = dict(world["env"], VINOS_ROUTINE_DEBUG="1")  # type: ignore[call-overload]
    r = _cli({**world, "env": env}, "run", "evil")
    assert r.returncode == 0, r.stderr
    [line] = [ln for ln in r.stdout.splitlines() if "sandbox argv: " in ln]
    assert "bwrap" in line and "--remount-ro /" in line
    # The workspace reaches bwrap as a descriptor, or, where the kernel keeps the quota
    # (sandbox/overlay.py), as the overlay the maker mounted.
    assert "--bind-fd" in line or "/vinos-overlay-" in line


@pytest.mark.parametrize("answer", ["http-500", "refused"])
def test_a_webhook_token_never_reaches_the_ledger_logs_or_the_cli(
    world: dict[str, object], answer: str
) -> None:
    """A webhook URL is a credential: shown and recorded as https://host/… only."""
    token = str(world["token"])
    if answer == "refused":
        url = f"http://127.0.0.1:1/services/{token}?key={token}"
        server = None
    else:
        server = _Answer500()
        url = f"http://127.0.0.1:{server.port}/services/{token}?key={token}"
    vinos = Path(str(world["vinos"]))
    (vinos / "routines/hook.toml").write_text(
        '[routine]\nkind = "command"\n[schedule]\ncron = "0 6 * * *"\n'
        f'[command]\nrun = "echo hi"\n[output]\ntype = "webhook"\nurl = "{url}"\n'
    )
    try:
        seen = [_cli(world, "run", "hook")]
    finally:
        if server is not None:
            server.close()
    assert seen[0].returncode == 1
    for args in (("history", "hook"), ("history", "hook", "--json"), ("logs", "hook")):
        seen.append(_cli(world, *args))
    seen.append(_cli(world, "list"))
    text = "\n".join(r.stdout + r.stderr for r in seen)
    assert "http://127.0.0.1:" in text and "/…" in text  # it is shown, redacted
    assert token not in text
    state = vinos / "routines/state"
    for path in state.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


class _Answer500:
    """A real HTTP server on 127.0.0.1 that answers every POST with 500."""

    def __init__(self) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
