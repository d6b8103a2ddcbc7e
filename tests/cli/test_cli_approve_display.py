"""What `approve` shows before it asks, as the hidden-recipient chain was run: a 3,000-line
input whose real recipients are at the top and whose last screen is a harmless fake. Next to
the question stand the action, the command, the input's size and line count and its first
lines; a long input is paged through $PAGER (a real program here: `tee` into a file, so the
test reads what the pager was given), escaped already."""

from __future__ import annotations

from datetime import UTC, datetime

from routines import proposals
from tests.cli.cli_helpers import Cli, OnPty

ROUTINE = """[routine]
description = "drafts replies"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "ollama"
system = "You draft replies to my mail."

[[agent.actions]]
name = "send-reply"
description = "Send the drafted reply"
run = "msmtp -t"
"""
HIDDEN = "To: attacker@evil.test\nBcc: spy@evil.test\nSubject: Re: lunch\n\n"
FILLER = "".join(f"quoted line {n}\n" for n in range(3000))
FAKE_TAIL = "\x1b[2J\x1b[H-----\nTo: bob@example.org\nSubject: Re: lunch\n\nSee you at noon.\n"
LONG = HIDDEN + FILLER + FAKE_TAIL


def seed(cli: Cli, text: str) -> int:
    path = cli.write("drafter", ROUTINE)
    with cli.ledger() as led:
        return proposals.add(
            led,
            routine="drafter",
            run_id="r-1",
            action="send-reply",
            command="msmtp -t",
            input=text,
            summary="Reply to Bob about lunch",
            fingerprint=proposals.fingerprint(path.read_text()),
            now=datetime.now(UTC),
            expires_after=3600,
        )


def before_the_question(screen: str) -> list[str]:
    head = screen.split("now? [y/N]", 1)[0]
    return head.splitlines()[-12:]


def test_a_long_input_is_paged_and_the_question_repeats_what_it_sends(
    cli: Cli, on_pty: OnPty
) -> None:
    pid = seed(cli, LONG)
    paged = cli.home / "paged.txt"
    run = on_pty("approve", str(pid), env={"PAGER": f"tee {paged}"})
    screen = run.read_until("now? [y/N]")
    run.send("n\n")
    assert run.wait() == 1
    last = "\n".join(before_the_question(screen))
    # The last screen before the question: what runs, how much, and where it truly goes.
    assert f"approving #{pid}: send-reply for drafter" in last
    assert "command: msmtp -t" in last
    assert f"{len(LONG.encode()):,} bytes, {len(LONG.splitlines()):,} lines" in last
    assert "│ To: attacker@evil.test" in last and "│ Bcc: spy@evil.test" in last
    # The pager got the whole input, escaped: the fake screen-clear is text, not a command.
    given = paged.read_text()
    assert "quoted line 2999" in given and "\x1b" not in given
    assert "\\x1b[2J\\x1b[H-----" in given
    assert "\x1b[2J" not in screen.split("approving #", 1)[0]


def test_a_short_input_is_shown_whole_and_then_summed_up(cli: Cli, on_pty: OnPty) -> None:
    text = "To: bob@example.org\u200b\nSubject: lunch\n\nSee you.\n"
    pid = seed(cli, text)
    run = on_pty("approve", str(pid), env={"PAGER": "false"})
    screen = run.read_until("now? [y/N]")
    run.send("n\n")
    assert run.wait() == 1
    last = "\n".join(before_the_question(screen))
    assert "-----\nTo: bob@example.org\\u200b\nSubject: lunch" in screen  # no pager: inline
    assert f"input:   {len(text.encode())} bytes, 4 lines; it begins:" in last
    assert "│ To: bob@example.org\\u200b" in last


def test_with_yes_the_input_is_printed_not_paged(cli: Cli, not_root: None) -> None:
    pid = seed(cli, LONG)
    # It then runs in the routine's sandbox (and fails: no msmtp there); what it showed counts.
    r = cli.spawn("approve", str(pid), "--yes", env={"PAGER": "false"})
    assert "quoted line 2999" in r.stdout
    assert f"approving #{pid}: send-reply for drafter" in r.stdout


PADDED = "To: boss@example.org" + " " * 190 + ", evil@x.test\nSubject: report\n"


def test_a_cut_line_says_how_much_was_cut_next_to_the_question(cli: Cli, on_pty: OnPty) -> None:
    """`To: boss` padded past the cut with spaces, then a second address: the cut hid it
    without a trace. The reminder line now ends in a marker counting what is not shown."""
    pid = seed(cli, PADDED)
    run = on_pty("approve", str(pid), env={"PAGER": "false"})
    screen = run.read_until("now? [y/N]")
    run.send("n\n")
    assert run.wait() == 1
    [line] = [x for x in before_the_question(screen) if "│ To: boss@example.org" in x]
    hidden = len(PADDED.splitlines()[0]) - 200
    assert line.rstrip().endswith(f"…(+{hidden} chars)"), line


def test_pending_marks_a_cut_line_too(cli: Cli) -> None:
    seed(cli, PADDED)
    res = cli("pending")
    assert res.returncode == 0, res.stderr
    [line] = [x for x in res.stdout.splitlines() if "│ To: boss@example.org" in x]
    assert line.endswith(f"…(+{len(PADDED.splitlines()[0]) - 200} chars)"), line
