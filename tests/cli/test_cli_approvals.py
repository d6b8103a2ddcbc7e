"""Proposed actions end to end: real `vinos-routine run` (the worker as a real process, talking to
the fake Ollama server on 127.0.0.1), real `pending` / `approve` / `deny`, and the approved action
run in real bwrap as this unprivileged user, its input on stdin.

The action in these tests appends its stdin to a file in the routine's workspace (the one
place a sandbox may write that outlives it), so "ran exactly once, with its stdin" is a file's
content, not a log line.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from routines import proposals
from routines.ledger import from_iso
from routines.signing import NAMESPACE, sign_routine
from supervisor.engine.approvals import action_argv
from tests.cli.cli_helpers import Cli, OnPty
from tests.fakes import FakeOllama, Reply
from tests.fakes import ollama_replies as O

INPUT = "To: bob@example.org\nSubject: Re: lunch\n\nThursday works. See you at noon.\n"


@pytest.fixture
def ollama(cli: Cli) -> Iterator[FakeOllama]:
    with FakeOllama() as fake:
        (cli.routines / "config.toml").write_text(f'ollama_url = "{fake.url}"\n')
        yield fake


def ran_log(cli: Cli, name: str = "drafter") -> Path:
    return cli.routines / "workspace" / name / "ran.log"


def drafter(cli: Cli, *, expire: str = "7 days", name: str = "drafter") -> Path:
    log = ran_log(cli, name)
    log.parent.mkdir(parents=True, exist_ok=True)
    return cli.write(
        name,
        f"""[routine]
description = "drafts replies"
approvals_expire = "{expire}"
needs_you_timeout = "{expire}"

[schedule]
cron = "0 6 * * *"
timezone = "{cli.zone}"

[agent]
route = "ollama"
system = "You draft replies to my mail."

[[agent.actions]]
name = "send-reply"
description = "Send the drafted reply"
run = "tee -a {log}"
""",
    )


def propose(summary: str = "Reply to Bob about lunch", text: str = INPUT) -> Reply:
    return O.tool_calls(
        ("propose_action", {"action": "send-reply", "input": text, "summary": summary})
    )


def run_once(cli: Cli, name: str = "drafter") -> subprocess.CompletedProcess[str]:
    r = cli("run", name)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def rows(cli: Cli) -> list[proposals.Proposal]:
    with cli.ledger() as led:
        return [p for i in range(1, 100) if (p := proposals.get(led, i)) is not None]


def test_a_proposal_is_recorded_and_nothing_runs(
    cli: Cli, ollama: FakeOllama, not_root: None
) -> None:
    drafter(cli)
    ollama.add(propose())
    r = run_once(cli)  # a paused run did not fail: exit status 0
    assert "needs_you" in r.stdout and "paused until you answer" in r.stdout
    [p] = rows(cli)
    assert (p.routine, p.action, p.state, p.input) == ("drafter", "send-reply", "waiting", INPUT)
    assert p.command == f"tee -a {ran_log(cli)}"
    assert p.decided_by is None and p.exit_status is None
    assert not ran_log(cli).exists()
    with cli.ledger() as led:
        [run] = led.history("drafter")
    # "Ask me first" (the default): the run paused at the action, waiting for the person.
    assert (run.status, run.outcome, run.detail) == (
        "needs_you",
        None,
        "waiting for you: send-reply",
    )
    assert json.loads(cli.state.joinpath("drafter/last-run.json").read_text())["summary"] == (
        "waiting for you: send-reply"
    )
    # The model saw propose_action with the action's enum; nothing was asked of it since.
    tools = {t["function"]["name"]: t for t in ollama.chats[0].body["tools"]}
    params = tools["propose_action"]["function"]["parameters"]
    assert params["properties"]["action"]["enum"] == ["send-reply"]
    assert len(ollama.chats) == 1

    out = cli("pending")
    assert out.returncode == 0, out.stderr
    assert f"#{p.id}  drafter · send-reply · " in out.stdout
    assert "Reply to Bob about lunch" in out.stdout
    assert "│ To: bob@example.org" in out.stdout and "(1 more lines)" in out.stdout
    assert f"vinos-routine approve {p.id}" in out.stdout
    assert f"needs you: run {p.run_id} is paused until you answer" in out.stdout
    [j] = [json.loads(line) for line in cli("pending", "--json").stdout.splitlines()]
    assert (j["id"], j["state"], j["input"], j["paused"]) == (p.id, "waiting", INPUT, True)

    shown = cli("brief")
    brief = shown.stdout.splitlines()
    assert shown.returncode == 0, shown.stderr
    assert brief[:4] == [
        "Needs you: 1 paused run",
        "1 action waits for your decision:",
        f"  #{p.id} drafter · send-reply: Reply to Bob about lunch (its run is paused)",
        f"      vinos-routine approve {p.id}   ·   vinos-routine deny {p.id}",
    ]
    [listed] = json.loads(cli("brief", "--json").stdout)["pending"]
    assert (listed["id"], listed["summary"]) == (p.id, "Reply to Bob about lunch")


def test_undeclared_actions_and_oversized_input_are_refused_and_the_run_goes_on(
    cli: Cli, ollama: FakeOllama, not_root: None
) -> None:
    drafter(cli)
    big = "x" * (64 * 1024 + 1)
    ollama.add(
        O.tool_calls(
            ("propose_action", {"action": "rm-rf", "input": "", "summary": "nope"}),
            ("propose_action", {"action": "send-reply", "input": big, "summary": "big"}),
        ),
        O.text("# Nothing sent"),
    )
    r = run_once(cli)
    assert rows(cli) == []
    results = [m["content"] for m in ollama.chats[1].body["messages"] if m["role"] == "tool"]
    assert "refused: no declared action 'rm-rf'" in results[0]
    assert "refused: the input is 65,537 bytes; at most 65,536" in results[1]
    assert r.stdout.count("refused tool call: propose:") == 2
    assert "[drafter] refused tool call: propose:rm-rf" in r.stdout
    with cli.ledger() as led:
        [run] = led.history("drafter")
    assert run.status == "ok" and run.outcome != "needs-attention"


def test_approved_runs_once_with_its_stdin_and_a_second_approve_is_an_error(
    cli: Cli, ollama: FakeOllama, not_root: None
) -> None:
    drafter(cli)
    ollama.add(propose(), O.text("drafted"))
    run_once(cli)
    [p] = rows(cli)
    piped = cli("approve", str(p.id))  # not a terminal, no --yes: nothing runs
    assert piped.returncode == 2 and "add --yes" in piped.stderr
    assert not ran_log(cli).exists()

    r = cli.spawn("approve", str(p.id), "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"command: tee -a {ran_log(cli)}" in r.stdout  # the exact command was shown …
    # … the input, its first lines again above the question, and the action's output.
    assert r.stdout.count("Thursday works. See you at noon.") == 3
    assert ran_log(cli).read_text() == INPUT
    [done] = rows(cli)
    assert (done.state, done.decided_by, done.exit_status) == ("done", "cli", 0)
    assert done.output == INPUT

    again = cli("approve", str(p.id), "--yes")
    assert again.returncode == 1
    assert "cannot be approved: it was already approved by cli" in again.stderr
    assert "cannot be denied" in cli("deny", str(p.id)).stderr
    assert ran_log(cli).read_text() == INPUT  # still once
    assert "nothing waits for you" in cli("pending").stdout
    history = cli("history", "drafter").stdout
    assert f"#{p.id} " in history
    assert "send-reply · done by cli, exit 0 · Reply to Bob about lunch" in history
    assert "output: To: bob@example.org" in history
    # --json: the runs, then the proposal as the text view lists it, with its whole record.
    lines = [json.loads(line) for line in cli("history", "drafter", "--json").stdout.splitlines()]
    assert [x["run_id"] for x in lines if "kind" not in x] == [p.run_id]
    [listed] = [x for x in lines if x.get("kind") == "proposal"]
    assert (listed["id"], listed["state"], listed["decided_by"], listed["exit_status"]) == (
        p.id,
        "done",
        "cli",
        0,
    )
    assert listed["input"] == INPUT and listed["output"].startswith("To: bob@example.org")


def test_approve_asks_on_a_terminal(
    cli: Cli, ollama: FakeOllama, on_pty: OnPty, not_root: None
) -> None:
    drafter(cli)
    ollama.add(propose(), O.text("drafted"))
    run_once(cli)
    [p] = rows(cli)
    run = on_pty("approve", str(p.id))
    run.read_until("now? [y/N]")
    run.send("n\n")
    assert run.wait() == 1
    assert not ran_log(cli).exists() and rows(cli)[0].state == "waiting"
    run = on_pty("approve", str(p.id))
    run.read_until("now? [y/N]")
    run.send("y\n")
    assert run.wait() == 0, run.text
    assert ran_log(cli).read_text() == INPUT


def test_denied_is_recorded_and_the_paused_routine_runs_nothing_beside_it(
    cli: Cli, ollama: FakeOllama, not_root: None
) -> None:
    drafter(cli)
    ollama.add(propose())
    run_once(cli)
    [p] = rows(cli)
    refused = cli("run", "drafter")  # never beside its paused run
    assert refused.returncode == 1
    assert f"waiting for you on {p.run_id}: answer it first" in refused.stderr
    r = cli("deny", str(p.id), "--why", "too curt, add a greeting")
    assert r.returncode == 0, r.stderr
    assert f"denied #{p.id}" in r.stdout and "its paused run goes on" in r.stdout
    [d] = rows(cli)
    assert (d.state, d.decided_by, d.why) == ("denied", "cli", "too curt, add a greeting")
    assert not ran_log(cli).exists()
    # The daemon resumes it with the refusal (tests/supervisor/test_daemon_needs_you.py).
    assert len(ollama.chats) == 1


def test_an_expired_proposal_cannot_be_approved(
    cli: Cli, ollama: FakeOllama, not_root: None
) -> None:
    drafter(cli, expire="1 second")
    ollama.add(propose(), O.text("drafted"))
    run_once(cli)
    [p] = rows(cli)
    deadline = time.monotonic() + 30
    while datetime.now(UTC) <= from_iso(p.expires_at):  # a condition, not a timed sleep
        assert time.monotonic() < deadline
        time.sleep(0.05)
    r = cli("approve", str(p.id), "--yes")
    assert r.returncode == 1
    assert "cannot be approved: it expired at" in r.stderr
    assert rows(cli)[0].state == "expired"
    assert not ran_log(cli).exists()
    assert "nothing waits for you" in cli("pending").stdout


def test_an_edit_of_the_routine_invalidates_its_waiting_proposals(
    cli: Cli, ollama: FakeOllama, not_root: None
) -> None:
    path = drafter(cli)
    ollama.add(
        O.tool_calls(
            ("propose_action", {"action": "send-reply", "input": INPUT, "summary": "one"}),
            ("propose_action", {"action": "send-reply", "input": INPUT, "summary": "two"}),
        ),
    )
    run_once(cli)
    # The run paused at the first: the second was not run (the resumed model may call it).
    [first] = rows(cli)
    path.write_text(path.read_text().replace("tee -a", "tee"))  # the action changed
    r = cli("approve", str(first.id), "--yes")
    assert r.returncode == 1
    assert "cannot be approved: it is invalidated: its routine file was edited" in r.stderr
    assert [p.state for p in rows(cli)] == ["invalidated"]
    assert "nothing waits for you" in cli("pending").stdout
    assert not ran_log(cli).exists()


@pytest.mark.slow
def test_two_approvals_racing_in_two_processes_run_it_once(
    cli: Cli, ollama: FakeOllama, not_root: None
) -> None:
    drafter(cli)
    ollama.add(propose(), O.text("drafted"))
    run_once(cli)
    [p] = rows(cli)
    procs = [
        subprocess.Popen(
            cli.argv("approve", str(p.id), "--yes"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli.environ(),
            cwd=cli.home,
        )
        for _ in range(2)
    ]
    results = [(proc.wait(timeout=120), *proc.communicate()) for proc in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, _, err in results if code == 1)
    assert "was not run: it was already approved by cli" in loser or "already approved" in loser
    assert ran_log(cli).read_text() == INPUT
    assert rows(cli)[0].state == "done"


# -- auto_approve: real ssh-keygen keys made here --------------------------------------------


def make_key(directory: Path, name: str) -> Path:
    key = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
        check=True,
    )
    return key


@pytest.fixture
def keys(cli: Cli, tmp_path: Path) -> dict[str, Path]:
    """alice is trusted (in VINOS_HOME/allowed_signers), eve is not."""
    d = tmp_path / "keys"
    d.mkdir()
    found = {n: make_key(d, n) for n in ("alice", "eve")}
    kind, blob = found["alice"].with_suffix(".pub").read_text().split()[:2]
    (cli.home / "allowed_signers").write_text(f'alice namespaces="{NAMESPACE}" {kind} {blob}\n')
    return found


def auto_drafter(cli: Cli) -> Path:
    path = drafter(cli)
    path.write_text(path.read_text().replace("[routine]\n", "[routine]\nauto_approve = true\n"))
    return path


def settled(cli: Cli) -> proposals.Proposal:
    """The run's one proposal once the auto-approve runner is through with it: ran, or
    still waiting with the reason it was not run automatically."""
    deadline = time.monotonic() + 60
    while True:
        [p] = rows(cli)
        if p.state == "done" or (p.state == "waiting" and p.why):
            return p
        assert time.monotonic() < deadline, p
        time.sleep(0.05)


def test_a_signed_routine_with_auto_approve_runs_its_proposal_at_once(
    cli: Cli, ollama: FakeOllama, keys: dict[str, Path], not_root: None
) -> None:
    sign_routine(auto_drafter(cli), keys["alice"])
    ollama.add(propose(), O.text("sent"))
    out = run_once(cli).stdout
    # Said as it happens: not "1 action waits for you" for an action that is being run.
    assert "1 action proposed: auto_approve runs it now if the signature verifies" in out
    assert "waits for you" not in out.replace("else it waits for you", "")
    p = settled(cli)
    assert (p.state, p.decided_by, p.exit_status, p.output) == ("done", "auto", 0, INPUT)
    assert ran_log(cli).read_text() == INPUT
    assert "nothing waits for you" in cli("pending").stdout


def dropped_to_ask(cli: Cli) -> proposals.Proposal:
    """The run paused (the signature did not verify: "everything" became "ask") and its one
    request waits for a person; the run's log says why."""
    [p] = rows(cli)
    assert (p.state, p.decided_by) == ("waiting", None)
    with cli.ledger() as led:
        [run] = led.history("drafter")
    assert run.status == "needs_you"
    logs = cli("logs", "drafter").stdout
    assert 'permissions "everything" ignored, asking first' in logs, logs
    return p


def test_a_one_byte_edit_after_signing_stops_auto_approve(
    cli: Cli, ollama: FakeOllama, keys: dict[str, Path], not_root: None
) -> None:
    path = auto_drafter(cli)
    sign_routine(path, keys["alice"])
    path.write_bytes(path.read_bytes().replace(b"drafts replies", b"drafts replieS"))
    ollama.add(propose())
    run_once(cli)
    p = dropped_to_ask(cli)
    assert "signature invalid" in cli("logs", "drafter").stdout
    assert not ran_log(cli).exists()
    r = cli.spawn("approve", str(p.id), "--yes")  # a person still can
    assert r.returncode == 0, r.stderr
    assert rows(cli)[0].decided_by == "cli"


def test_a_signature_by_an_untrusted_key_is_ignored(
    cli: Cli, ollama: FakeOllama, keys: dict[str, Path], not_root: None
) -> None:
    sign_routine(auto_drafter(cli), keys["eve"])
    ollama.add(propose())
    run_once(cli)
    dropped_to_ask(cli)
    assert not ran_log(cli).exists()


def test_auto_approve_without_a_signature_is_refused(
    cli: Cli, ollama: FakeOllama, keys: dict[str, Path], not_root: None
) -> None:
    path = auto_drafter(cli)
    r = cli("run", "drafter")
    assert r.returncode == 1
    assert f"{path}: [routine].auto_approve:" in r.stderr
    assert "drafter.toml.sig is missing" in r.stderr and "vinos-routine sign drafter" in r.stderr
    assert rows(cli) == [] and not ollama.chats


def runner(cli: Cli, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The action runner as `approve` starts it."""
    return subprocess.run(
        argv, check=False, env=cli.environ(), cwd=cli.home, capture_output=True, text=True
    )


def test_an_input_changed_after_it_was_shown_is_not_run(
    cli: Cli, ollama: FakeOllama, not_root: None
) -> None:
    """`approve` shows the input, then the action runner claims and runs it: the runner runs
    only the input whose fingerprint `approve` passed it. A writer of the ledger (on a fleet,
    anyone with the database's password) changing it in between makes nothing run."""
    drafter(cli)
    ollama.add(propose())
    run_once(cli)
    [p] = rows(cli)
    with cli.ledger() as led, led.transaction() as tx:
        tx.execute("UPDATE proposals SET input = 'rm -rf ~' WHERE id = ?", (p.id,))
    argv = action_argv(p.id, shown=proposals.fingerprint(INPUT))
    r = runner(cli, argv)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "its input changed since it was shown" in r.stderr
    assert not ran_log(cli).exists()
    [after] = rows(cli)
    assert (after.state, after.exit_status) == ("done", None)
    assert "not the one you were shown; nothing ran" in (after.output or "")
    # The input it was shown runs.
    with cli.ledger() as led, led.transaction() as tx:
        tx.execute("UPDATE proposals SET state = 'waiting', input = ? WHERE id = ?", (INPUT, p.id))
    ok = runner(cli, argv)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ran_log(cli).read_text() == INPUT
