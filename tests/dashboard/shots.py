"""The documentation's screenshots, made from fixed data: `make screenshots`.

`python -m tests.dashboard.shots DIR` writes DIR/NAME.png and, beside each, DIR/NAME.txt: the
page's visible text. tests/dashboard/test_screenshots.py renders the same pages from the same
data and fails when a committed .txt differs from what the code renders now, so the pictures
in docs/ cannot go stale unnoticed.

The data never changes from one run to the next:
- the routines: the six starters as shipped, `day-brief` copied to ~/.vinos/routines and
  enabled there (as a person adopts a starter), and the demo's command routine
  (scripts/demo.py), due hourly here instead of every minute, so no run starts while the pages
  are taken;
- the runs: rows written to the ledger with fixed times, their outputs and run logs;
- the clock: the dashboard's pages are rendered at FIXED (dashboard.app.Settings.clock), and the
  real daemon (for the overview's "daemon up" line) runs with its wall clock moved to FIXED
  (VINOS_DEBUG_TIMINGS' clock_offset_file), so it agrees on what is due; TZ is UTC;
- the paths: HOME is a temp dir and the dashboard shows paths below it as `~/...`.
The daemon's pid is the one value that changes; the text files say `pid N` instead.

Chromium is the distribution's (tests/dashboard/browser.py: executable_path, never a
downloaded browser).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

from routines.ledger import Ledger
from routines.runs import Outcome, RunEnd, RunStatus, Trigger
from routines.spec.paths import paths

REPO = Path(__file__).resolve().parents[2]
# A Tuesday morning, 09:30 UTC. Seconds past the minute so the daemon's own (moving) clock
# stays in the same minute while the pages are taken.
FIXED = datetime(2026, 3, 10, 9, 30, 5, tzinfo=UTC)
WAIT_MS = 60_000
DAEMON_PID = re.compile(r"daemon up \(pid \d+\)")


@dataclass(frozen=True, slots=True)
class Shot:
    """One page: its file name (NAME.png, NAME.txt), its path below the session's base, and an
    element that is there once the page is complete."""

    name: str
    path: str
    ready: str


PLAYGROUND = urlencode(
    {"form": "every", "expr": "every monday and thursday at 8am", "tz": "Europe/Berlin"}
)
SHOTS = (
    Shot("overview", "/", "#routine-machine-check"),
    Shot("run", "/run/day-brief-20260310-0600", "#output"),
    Shot("routine", "/routine/day-brief", "#status-chart svg"),
    Shot("cost", "/cost", "#cost-chart svg"),
    Shot("brief", "/brief", ".brief-item"),
    Shot("schedule", f"/schedule?{PLAYGROUND}", "#fires li"),
)


def demo_routine() -> str:
    """scripts/demo.py's routine, due hourly (see the module's docstring)."""
    spec = importlib.util.spec_from_file_location("demo", REPO / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # defines constants and functions only: main() is not run
    text = demo.DEMO_ROUTINE
    if not isinstance(text, str):
        raise AssertionError("scripts/demo.py's DEMO_ROUTINE is not a string")
    for old, new in (('cron = "* * * * *"', 'cron = "0 * * * *"'), ("Every minute", "Hourly")):
        if old not in text:
            raise AssertionError(f"scripts/demo.py's routine no longer has {old!r}")
        text = text.replace(old, new)
    return text


MACHINE_CHECK = """\
- load: 0.42 0.37 0.31
- disk: 182G free of 468G
- processes I can see: 3 (a fresh PID namespace)
- files in ~/.ssh I can read: 0 bytes (masked)
- network: none
- writing to my home: refused
"""

DAY_BRIEF = """\
# Tuesday, 10 March

## Inbox
- **Invoice from Hetzner** (due Friday): 23.80 EUR, paid by card on file.
- Anna asks whether Thursday's review can move to 14:00; a reply is drafted for you.

## Calendar
- 10:00 Stand-up (15 min)
- 14:00 Design review: *dashboard screenshots*

## GitHub
- 2 pull requests wait for your review in `vinos/site`.

## Top of mind
1. Finish the release notes.
2. Book the train for the 19th.
"""


def _log(path: Path, start: datetime, entries: list[tuple[float, str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for seconds, kind, text in entries:
            ts = (start + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")
            f.write(json.dumps({"ts": ts, "kind": kind, "text": text}) + "\n")


def _run(
    ledger: Ledger, routine: str, run_id: str, at: datetime, seconds: float, end: RunEnd
) -> None:
    ledger.record_run(
        routine, run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=at
    )
    ledger.start_run(run_id, now=at, worker_pid=None)
    ledger.finish_run(run_id, now=at + timedelta(seconds=seconds), end=end)


def seed() -> None:
    """The routines and runs the pages show (see the module's docstring)."""
    p = paths()
    p.routines_dir.mkdir(parents=True, exist_ok=True)
    (p.routines_dir / "machine-check.toml").write_text(demo_routine())
    starter = (REPO / "routines" / "starters" / "day-brief.toml").read_text()
    if "\nenabled = false\n" not in starter:
        raise AssertionError("the day-brief starter no longer says enabled = false")
    (p.routines_dir / "day-brief.toml").write_text(
        starter.replace("\nenabled = false\n", "\nenabled = true\n")
    )
    today = FIXED.replace(hour=0, minute=0, second=0)
    with Ledger(p.ledger) as ledger:
        _machine_check(ledger, today)
        _day_brief(ledger, today)


def _machine_check(ledger: Ledger, today: datetime) -> None:
    """The demo routine's runs this morning, hourly, each with its output."""
    p = paths()
    for hour in (6, 7, 8, 9):
        at = today.replace(hour=hour)
        run_id = f"machine-check-20260310-{hour:02d}00"
        name = f"{run_id}.md"
        state = p.routine_state("machine-check")
        (state / "runs").mkdir(parents=True, exist_ok=True)
        (state / name).write_text(MACHINE_CHECK)
        _log(
            state / "runs" / f"{run_id}.jsonl",
            at,
            [
                (0, "start", "schedule run of machine-check"),
                (0.4, "log", f"output written: {name}"),
                (0.4, "end", "ok"),
            ],
        )
        end = RunEnd(status=RunStatus.OK, outcome=Outcome.DONE, route="command", output_file=name)
        _run(ledger, "machine-check", run_id, at, 0.4, end)


def _day_brief(ledger: Ledger, today: datetime) -> None:
    """30 mornings of day-brief: some escalated (premium tokens, cost), two failed; today's
    with its output and its run log (tool calls, a refusal, the escalation)."""
    p = paths()
    for n in range(30):
        day = today - timedelta(days=n)
        at = day.replace(hour=6)
        run_id = f"day-brief-{day:%Y%m%d}-0600"
        failed = n in (4, 11)
        escalated = n % 3 == 0
        output = None if failed else f"{run_id}.md"
        state = p.routine_state("day-brief")
        if n == 0:
            (state / "runs").mkdir(parents=True, exist_ok=True)
            (state / str(output)).write_text(DAY_BRIEF)
            _log(
                state / "runs" / f"{run_id}.jsonl",
                at,
                [
                    (0, "start", "schedule run of day-brief"),
                    (1.2, "tool_call", "read ~/inbox/2026-03-10-hetzner.eml"),
                    (3.9, "tool_call", "shell: gcalcli agenda today tomorrow --nocolor"),
                    (5.1, "tool_call", "shell: gh api /notifications --paginate"),
                    (6.0, "tool_refused", "read ~/.ssh/config: not among its tools"),
                    (7.5, "escalated", "local model unsure: 3 threads to summarise"),
                    (
                        41.8,
                        "usage",
                        "tokens in 5210 out 640 local 8200/1100 $0.0412",
                    ),
                    (42.0, "log", f"output written: {output}"),
                    (42.0, "end", "ok"),
                ],
            )
        dollars = round(0.02 + (n % 5) * 0.011 + (0.03 if escalated else 0), 4)
        _run(
            ledger,
            "day-brief",
            run_id,
            at,
            42 + n % 7,
            RunEnd(
                status=RunStatus.FAILED if failed else RunStatus.OK,
                detail="mail: connection refused" if failed else "",
                outcome=None if failed else Outcome.DONE,
                route="local->premium" if escalated else "local",
                escalated=escalated,
                escalated_reason="local model unsure" if escalated else None,
                input_tokens=5210 if escalated else 0,
                output_tokens=640 if escalated else 0,
                local_input_tokens=8200,
                local_output_tokens=1100,
                tool_calls=4,
                dollars=0.0412 if n == 0 else dollars,
                output_file=output,
            ),
        )


@contextlib.contextmanager
def environment(work: Path) -> Iterator[None]:
    """HOME, the runtime dir and TZ for the pages (restored after: the tests share a process)."""
    runtime = Path(tempfile.mkdtemp(prefix="vinos-shots-"))  # short: a socket path is in it
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    values = {
        "HOME": str(home),
        "VINOS_HOME": None,  # ~/.vinos, shown as such
        "VINOS_SYSTEM_DIR": str(REPO / "routines" / "starters"),
        "XDG_RUNTIME_DIR": str(runtime),
        "TZ": "UTC",
        "VINOS_DEBUG_TIMINGS": None,
    }
    from routines.schedule import tz

    saved = {key: os.environ.get(key) for key in values}
    try:
        for key, value in values.items():
            _set(key, value)
        time.tzset()
        # The machine's zone is read once per process: another test in this worker may have
        # read it under another TZ (a routine without `timezone` showed "Etc/UTC" under CI).
        tz.machine_timezone.cache_clear()
        yield
    finally:
        for key, value in saved.items():
            _set(key, value)
        time.tzset()
        tz.machine_timezone.cache_clear()
        shutil.rmtree(runtime, ignore_errors=True)


def _set(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


@contextlib.contextmanager
def daemon(work: Path) -> Iterator[None]:
    """The real daemon, its wall clock at FIXED (moving on from there)."""
    from dashboard import control

    offset = work / "clock-offset"
    offset.write_text(str((FIXED - datetime.now(UTC)).total_seconds()))
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(REPO),
        VINOS_DEBUG_TIMINGS=json.dumps({"clock_offset_file": str(offset), "forkserver": False}),
    )
    with (work / "daemon.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "daemon"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    try:
        sock = paths().control_socket
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the daemon exited:\n{(work / 'daemon.log').read_text()}")
            try:
                control.request(sock, "status", timeout=5)
                break
            except control.DaemonDown:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def dashboard() -> Iterator[str]:
    """The dashboard in this process, its pages rendered at FIXED; yields the launch URL."""
    import uvicorn

    from dashboard.app import Settings, build_app
    from dashboard.security import new_token
    from dashboard.server import bind

    sock = bind(0)
    port = sock.getsockname()[1]
    token = new_token(paths().runtime_dir / "dashboard.token")
    app = build_app(Settings(paths(), token, port, clock=lambda: FIXED))
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the dashboard did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/?token={token}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def visible_text(text: str) -> str:
    """A page's visible text as the .txt files hold it: lines stripped of trailing blanks, the
    daemon's pid replaced."""
    text = DAEMON_PID.sub("daemon up (pid N)", text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines()) + "\n"


def take(work: Path, out: Path | None) -> dict[str, str]:
    """Every page's visible text by name; with `out`, NAME.png and NAME.txt written there."""
    from playwright.sync_api import expect

    from tests.dashboard.browser import browser

    texts: dict[str, str] = {}
    with environment(work):
        seed()
        with daemon(work), dashboard() as launch, browser(work / "profile") as ctx:
            page = ctx.new_page()
            page.goto(launch)
            base = page.url.rstrip("/")
            for shot in SHOTS:
                page.goto(base + shot.path)
                expect(page.locator(shot.ready).first).to_be_visible(timeout=WAIT_MS)
                texts[shot.name] = visible_text(page.locator("body").inner_text())
                if out is not None:
                    page.screenshot(path=str(out / f"{shot.name}.png"), full_page=True)
    if out is not None:
        for name, text in texts.items():
            (out / f"{name}.txt").write_text(text)
    return texts


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.dashboard.shots DIR", file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vinos-shots-") as work:
        texts = take(Path(work), out)
    for name in texts:
        print(f"wrote {out / name}.png and {name}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
