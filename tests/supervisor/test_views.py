"""The read commands' views as data: the rows `history`, `list`, `brief`, `status` and `cost`
build from their inputs alone (no ledger, no files, no process), and the text their renderers
make of them. tests/cli pins the same output end to end; here each decision has its own case."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from routines.ledger import RunRow
from routines.ledger.rundays import COUNTERS, DaySummary
from routines.proposals import Proposal, ProposalState
from routines.query.costs import CostRow
from routines.query.runs import Quiet, ThreadRun, fold_quiet
from routines.runs import Outcome, RunStatus, Trigger
from supervisor.cli.views import brief, cost, history

RED, GREEN, YELLOW, RESET = "\033[31m", "\033[32m", "\033[33m", "\033[0m"


def run_row(**kw: Any) -> RunRow:
    base: dict[str, Any] = dict.fromkeys(RunRow.__dataclass_fields__)
    base.update(id=1, routine="news", run_id="r1", started_at="2026-12-03T13:29:05Z")
    base.update(kw)
    return RunRow(**base)


def day(**counts: int) -> DaySummary:
    c = dict.fromkeys(COUNTERS, 0)
    c.update(counts)
    return DaySummary("news", "2026-11-20", "UTC", "", "", c, None, None)


def proposal(**kw: Any) -> Proposal:
    base: dict[str, Any] = dict(
        id=3, routine="news", run_id="r1", action="send-reply", command="true", input="",
        summary="Reply to Bob", fingerprint="", created_at="2026-12-03T13:29:00Z",
        expires_at="", state=ProposalState.WAITING,
    )  # fmt: skip
    base.update(kw)
    return Proposal(**base)


# --- history


def test_a_run_row_shows_tokens_with_local_ones_cost_time_and_a_one_line_detail() -> None:
    r = run_row(
        trigger=Trigger.MANUAL, status=RunStatus.OK, outcome=Outcome.DONE, route="cloud",
        input_tokens=10, output_tokens=5, local_input_tokens=2, local_output_tokens=1,
        dollars=0.01234, duration_sec=2.25, detail="first\nsecond",
    )  # fmt: skip
    h = history.History([r], None, None, [], [])
    assert history.cells(h, False) == [
        [
            "r1", "2026-12-03 13:29:05", "manual", "ok", "done", "cloud", "15 (+3 local)",
            "$0.0123", "2.2s", "first\\nsecond",
        ]
    ]  # fmt: skip


def test_history_colours_strikes_red_and_ok_green_and_leaves_the_rest() -> None:
    rows = [run_row(status=s) for s in (RunStatus.FAILED, RunStatus.OK, RunStatus.SKIPPED)]
    statuses = [
        cells[3] for cells in history.cells(history.History(rows, None, None, [], []), True)
    ]
    assert statuses == [f"{RED}failed{RESET}", f"{GREEN}ok{RESET}", "skipped"]


def test_a_reply_names_the_run_it_answers() -> None:
    r = run_row(parent_run_id="r0", detail="thanks")
    assert history.cells(history.History([r], None, None, [], []), False)[0][-1] == "↩ r0 thanks"


def test_on_a_fleet_the_machine_follows_started_and_a_remote_output_says_where() -> None:
    here = run_row(run_id="a", output_file="/x.md")
    there = run_row(run_id="b", output_file="/y.md", detail="done")
    h = history.History([here, there], ["laptop", "desk"], "laptop", [day(runs=1, ok=1)], [])
    rows = history.cells(h, False)
    assert [r[2] for r in rows] == ["laptop", "desk", ""]
    assert rows[0][-1] == "" and rows[1][-1] == "(output on desk) done"
    assert all(len(r) == len(history.headers(True)) for r in rows)


def test_a_compacted_day_counts_its_problems_and_is_red_with_a_strike() -> None:
    d = day(runs=4, ok=2, failed=1, budget=1, input_tokens=7, nanodollars=2_500_000_000,
            duration_ms=61_000)  # fmt: skip
    cells = history.cells(history.History([], None, None, [d], []), True)[0]
    assert cells == [
        "", "2026-11-20 (day)", "4 runs", f"{RED}2 ok, 1 failed, 1 budget{RESET}", "", "",
        "7", "$2.5000", "61s", "compacted: one line for the day",
    ]  # fmt: skip
    calm = history.cells(history.History([], None, None, [day(runs=1, ok=1)], []), True)[0]
    assert calm[3] == "1 ok"


def test_the_action_line_says_how_each_decision_went() -> None:
    done = proposal(state=ProposalState.DONE, decided_by="cli", exit_status=0)
    cut = proposal(state=ProposalState.DONE, decided_by="cli")
    denied = proposal(state=ProposalState.DENIED, why="not now")
    assert history.action_line(done) == (
        "#3 2026-12-03 13:29 send-reply · done by cli, exit 0 · Reply to Bob"
    )
    assert "done by cli, did not run to the end" in history.action_line(cut)
    assert "denied: not now" in history.action_line(denied)
    assert "waiting: vinos-routine approve 3 | deny 3" in history.action_line(proposal())


def test_history_renders_the_table_then_the_actions_with_their_first_output_line() -> None:
    h = history.History(
        [run_row(status=RunStatus.OK)], None, None, [],
        [proposal(state=ProposalState.DONE, decided_by="cli", exit_status=0, output="\n hi\n")],
    )  # fmt: skip
    text = history.render(h, False).splitlines()
    assert text[0].split() == [
        "RUN", "STARTED", "(UTC)", "TRIGGER", "STATUS", "OUTCOME", "ROUTE", "TOKENS", "COST",
        "TIME", "DETAIL",
    ]  # fmt: skip
    assert text[1].split() == ["r1", "2026-12-03", "13:29:05", "ok", "0", "$0.0000"]
    assert text[2:] == [
        "",
        "Actions proposed (1, newest first):",
        "  #3 2026-12-03 13:29 send-reply · done by cli, exit 0 · Reply to Bob",
        "      output:  hi",
    ]


def test_history_json_puts_the_machine_on_each_run_then_days_then_proposals() -> None:
    h = history.History([run_row()], ["desk"], "laptop", [day(runs=1)], [proposal()])
    values = history.json_values(h)
    assert values[0]["machine"] == "desk" and values[0]["run_id"] == "r1"
    assert values[1]["compacted"] is True
    assert values[2]["kind"] == "proposal" and values[2]["state"] == "waiting"


def test_a_thread_indents_each_reply_under_the_run_it_answers() -> None:
    first = run_row(run_id="r1", trigger=Trigger.SCHEDULE, status=RunStatus.OK)
    reply = run_row(run_id="r2", parent_run_id="r1", trigger=Trigger.REPLY,
                    status=RunStatus.OK, outcome=Outcome.DONE, detail="answered")  # fmt: skip
    items = [ThreadRun(first, 0, ""), ThreadRun(reply, 1, "and\nthen?")]
    assert history.thread_lines(items) == [
        "r1  2026-12-03 13:29:05  schedule  ok",
        "  ↳ r2  2026-12-03 13:29:05  reply  ok · done",
        "      you: and\\nthen?",
        "      answered",
    ]


NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


# --- brief


def item(path: str, **kw: Any) -> brief.Item:
    base: dict[str, Any] = dict(
        routine="news", path=Path(path), day=date(2026, 12, 3), mtime=NOW.timestamp(),
        title="Today", open_on_login=False, seen=True, status="ok", outcome=None, summary="",
        started_at=None,
    )  # fmt: skip
    base.update(kw)
    return brief.Item(**base)


def test_the_brief_heading_names_today_yesterday_or_the_range() -> None:
    today = date(2026, 12, 3)
    assert brief.heading([today], today) == "Brief · Thu 03 Dec 2026 (today)"
    assert brief.heading([today - timedelta(1)], today) == "Brief · Wed 02 Dec 2026 (yesterday)"
    assert brief.heading([date(2026, 11, 1)], today) == "Brief · Sun 01 Nov 2026"
    assert brief.heading([today, date(2026, 12, 1)], today) == (
        "Brief · Tue 01 Dec – Thu 03 Dec 2026"
    )


def test_the_brief_shows_each_output_in_full_under_a_rule_coloured_by_its_outcome() -> None:
    texts = {"/a.md": "# A\nbody \x1b[2J\n", "/b.md": "B"}
    items = [
        item("/a.md", seen=False, outcome=Outcome.NEEDS_ATTENTION),
        item("/b.md", status="failed"),
    ]
    failed = [run_row(status=RunStatus.FAILED, detail="boom\nagain")]
    text = brief.render(items, failed, "Brief", unseen=False, as_list=False, c=True,
                        read=lambda p: texts[str(p)])  # fmt: skip
    at = NOW.astimezone().strftime("%H:%M")
    lines = text.splitlines()
    assert lines[0] == "\033[1mBrief\033[0m · 2 outputs (1 new)"
    assert lines[2] == YELLOW + f"── news · {at} · needs attention · new ".ljust(72, "─") + RESET
    assert lines[3:5] == ["# A", "body \\x1b[2J"]  # a model's escapes show, they do not act
    assert lines[6].startswith(RED + f"── news · {at} · failed ") and lines[7] == "B"
    assert lines[8] == f"{RED}! news failed (started 13:29 UTC): boom\\nagain{RESET}"


def test_the_brief_list_is_a_row_an_output_and_says_which_are_new() -> None:
    rows = brief.list_cells([item("/a.md", seen=False, outcome=Outcome.DONE)], False)
    assert rows == [[NOW.astimezone().strftime("%H:%M"), "news", "done", "Today", "new", "/a.md"]]


def test_an_empty_brief_says_why_it_is_empty() -> None:
    assert (
        brief.render([], [], "B", unseen=True, as_list=False, c=False)
        == "B · 0 outputs\n  nothing new\n"
    )
    assert brief.render([], [], "B", unseen=False, as_list=True, c=False).endswith(
        "  no routine wrote an output on this day\n"
    )


def test_the_pending_text_gives_the_commands_that_decide_each_proposal() -> None:
    assert brief.pending_text([]) == ""
    assert brief.pending_text([proposal()]) == (
        "1 action waits for your decision:\n"
        "  #3 news · send-reply: Reply to Bob\n"
        "      vinos-routine approve 3   ·   vinos-routine deny 3\n\n"
    )


# --- cost


def cost_report(period: str, routines: list[CostRow]) -> cost.Report:
    days = {date(2026, 12, 3) - timedelta(days=n): float(n) for n in range(2, -1, -1)}
    return cost.Report(period, "UTC", NOW, NOW, routines, days)


def spent(routine: str, dollars: float, share: float) -> CostRow:
    return CostRow(
        routine=routine, runs=2, input_tokens=1500, output_tokens=500, local_input_tokens=0,
        local_output_tokens=0, dollars=dollars, share=share,
        cap=1.0 if routine == "news" else None,
    )  # fmt: skip


def test_cost_rows_carry_the_daily_cap_only_for_today() -> None:
    rows = [spent("news", 0.5, 0.5), spent("mail", 0.5, 0.5)]
    headers, cells = cost.cells(cost_report("today", rows))
    assert headers[-1] == "DAILY CAP" and cells[0][-1] == "$1.00" and cells[1][-1] == "—"
    headers, cells = cost.cells(cost_report("week", rows))
    assert "DAILY CAP" not in headers and len(cells[0]) == 6


def test_cost_renders_the_total_the_top_spenders_and_the_chart_with_today_marked() -> None:
    text = cost.render(
        cost_report("week", [spent("news", 0.5, 1.0)]), False, False, date(2026, 12, 3)
    )
    lines = text.splitlines()
    assert lines[0].startswith("Spent the last 7 days: ")
    assert any(line.startswith("top spenders: news ") for line in lines)
    assert lines[-4] == "last 3 days (total $3.00)"
    assert lines[-3] == "  Tue 01  " + "#" * 30 + "     $2.00"  # the top day fills the bar
    assert lines[-1] == "  Thu 03  " + " " * 30 + "     $0.00  today"
    empty = cost.render(cost_report("today", []), False, True, date(2026, 12, 9))
    assert "no runs in this period" in empty
    assert "3 days to 03 Dec (total $3.00)" in empty  # a chart that ends before today


def test_quiet_runs_fold_into_one_line_per_routine() -> None:
    quiet_rows = [
        run_row(routine="inbox", outcome=Outcome.NOTHING_TO_DO, detail="no unread mail",
                started_at="2026-12-03T09:00:00.000000Z"),
        run_row(routine="inbox", outcome=Outcome.NOTHING_TO_DO, detail="still none\nmore",
                started_at="2026-12-03T10:00:00.000000Z"),
        run_row(routine="news", outcome=Outcome.DONE, started_at="2026-12-03T10:00:00.000000Z"),
        run_row(routine="old", outcome=Outcome.NOTHING_TO_DO,
                started_at="2026-12-01T10:00:00.000000Z"),
    ]  # fmt: skip
    quiet = fold_quiet(quiet_rows, lambda at: at.startswith("2026-12-03"))
    assert quiet == [Quiet("inbox", 2, "still none", "2026-12-03T10:00:00.000000Z")]
    kept = [item("/b.md", outcome=Outcome.DONE)]
    text = brief.render(kept, [], "B", unseen=False, as_list=True, c=False, quiet=quiet)
    assert "· inbox: nothing to do (2 runs; last 10:00 UTC: still none)\n" in text


def test_the_walker_menu_is_a_safe_label_a_tab_and_the_file_per_output() -> None:
    hhmm = NOW.astimezone().strftime("%H:%M")
    items = [
        item("/s/news/2026-12-03-0700.md", seen=False, outcome=Outcome.NEEDS_ATTENTION,
             title="Rates\tup \x1b[2J today"),
        item("/s/news/2026-12-03-0600.md", title=""),
        item("/s/evil/a\tb.md"),  # a path that would break the line: left out
    ]  # fmt: skip
    assert brief.menu_lines(items) == [
        f"{hhmm} · news · needs attention · Rates up \\x1b[2J today · new"
        "\t/s/news/2026-12-03-0700.md",
        f"{hhmm} · news · ok · 2026-12-03-0600.md\t/s/news/2026-12-03-0600.md",
    ]
    for line in brief.menu_lines(items):
        label, path = line.split("\t")
        assert label.isprintable() and path.startswith("/s/news/")
