"""`make demo`: vinos-routine working for real, on a fresh machine, with no network and no key.

1. validates and lists the six starter routines (they ship disabled);
2. explains a plain-language schedule;
3. starts the daemon in the foreground on a demo VINOS_HOME with a command routine that runs
   every minute in the bubblewrap sandbox, and prints each output as it lands;
4. stops cleanly on Ctrl-C, SIGTERM or SIGHUP (a closed terminal), or, for a scripted run,
   after DEMO_SECONDS or once DEMO_OUTPUTS outputs landed: its daemon never outlives it
   (tests/test_demo.py sends each signal).
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOME = Path(os.environ.get("DEMO_HOME", REPO / "demo-home"))

DEMO_ROUTINE = r'''# A command routine: no model, just a shell string run in the same sandbox
# an agent's shell tools get. Its stdout is the output; a non-zero exit is a failure.
[routine]
description = "Every minute: load, disk, and what the sandbox lets a routine see"
enabled = true
kind = "command"

[schedule]
cron = "* * * * *"

[command]
# One line for the shell (the sandbox refuses newlines in a command); in a TOML """ string a
# backslash at the end of a line joins it to the next.
run = """\
echo "- load: $(cut -d' ' -f1-3 /proc/loadavg)"; \
echo "- disk: $(df -h ~ | awk 'NR==2 {print $4 " free of " $2}')"; \
echo "- processes I can see: $(ls /proc | grep -c '^[0-9]') (a fresh PID namespace)"; \
echo "- files in ~/.ssh I can read: $(cat ~/.ssh/* 2>/dev/null | wc -c) bytes (masked)"; \
echo "- network: $(getent hosts example.com >/dev/null 2>&1 && echo reachable || echo none)"; \
echo "- writing to my home: $(touch ~/demo-probe 2>/dev/null && echo allowed || echo refused)"\
"""
timeout_sec = 30

[output]
type = "brief"
title = "Machine check · {{date}}"
'''


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m" if sys.stdout.isatty() else f"\n== {text}", flush=True)


def cli(*args: str, env: dict[str, str]) -> int:
    print("$ " + shlex.join(["vinos-routine", *args]), flush=True)
    return subprocess.call([sys.executable, "-m", "supervisor", *args], env=env)


# The signals that stop the demo. Their handler only notes the signal; the loop below stops
# the daemon (a terminal's Ctrl-C also reaches the daemon itself, in the same process group).
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent() -> None:
    """In the daemon's process, before exec: SIGTERM when the demo dies, however it dies
    (SIGKILL included), so no daemon is left running on demo-home."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def main() -> int:
    stopped: list[int] = []
    for sig in STOPS:
        signal.signal(sig, lambda signum, _frame: stopped.append(signum))
    try:
        return _demo(stopped)
    finally:
        for sig in STOPS:
            signal.signal(sig, signal.SIG_DFL)


def _demo(stopped: list[int]) -> int:
    if os.geteuid() == 0:
        print(
            "make demo runs as an unprivileged user (the daemon refuses root); "
            "run it through 'make demo', which arranges that",
            file=sys.stderr,
        )
        return 1
    if HOME.exists():
        shutil.rmtree(HOME)
    (HOME / "routines").mkdir(parents=True)
    # Its own runtime dir (never the real one, where your daemon may run), short because a
    # Unix socket path has at most 107 bytes.
    runtime = Path(tempfile.mkdtemp(prefix="vinos-demo-"))
    env = dict(os.environ)
    env.update(
        VINOS_HOME=str(HOME),
        VINOS_SYSTEM_DIR=str(REPO / "routines" / "starters"),
        XDG_RUNTIME_DIR=str(runtime),
        PYTHONPATH=str(REPO),
    )
    env.pop("ANTHROPIC_API_KEY", None)

    say("The six starter routines (shipped disabled) are valid")
    cli(
        "validate",
        *sorted(str(p) for p in (REPO / "routines" / "starters").glob("*.toml")),
        env=env,
    )
    say("Schedules in plain language, explained by code")
    cli("schedule", "explain", "--every", "every weekday at 9:00", "--count", "3", env=env)

    (HOME / "routines" / "machine-check.toml").write_text(DEMO_ROUTINE)
    say("A demo command routine, due every minute, next to the starters")
    cli("list", env=env)

    state = HOME / "routines" / "state" / "machine-check"
    if stopped:
        shutil.rmtree(runtime, ignore_errors=True)
        say(f"Stopped by signal {stopped[0]} before the daemon started")
        return 0
    daemon = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "daemon"],
        env=env,
        preexec_fn=_die_with_parent,  # noqa: PLW1509 (the demo starts no thread)
    )
    say(
        f"Started the daemon, pid {daemon.pid}, its socket in {runtime} (outputs land in "
        f"{state}/); Ctrl-C stops it"
    )
    deadline = float(os.environ.get("DEMO_SECONDS", "0")) or None
    wanted = int(os.environ.get("DEMO_OUTPUTS", "0"))  # a scripted run: stop after N outputs
    started = time.monotonic()
    seen: set[Path] = set()
    while daemon.poll() is None and not stopped:
        time.sleep(1)
        for out in sorted(state.glob("*.md")) if state.exists() else []:
            if out not in seen:
                seen.add(out)
                say(f"Output landed: {out}")
                print(out.read_text(), flush=True)
        if deadline and time.monotonic() - started > deadline:
            break
        if wanted and len(seen) >= wanted:
            break
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGINT)
    try:
        code = daemon.wait(timeout=60)
    except subprocess.TimeoutExpired:  # a daemon that does not stop in a minute is killed
        daemon.kill()
        code = daemon.wait()
    shutil.rmtree(runtime, ignore_errors=True)
    say(f"Daemon stopped (exit {code}); {len(seen)} output(s) in {state}")
    cli("history", "machine-check", env=env)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
