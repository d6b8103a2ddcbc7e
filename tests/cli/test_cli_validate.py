"""`vinos-routine validate` through its entry point (in-process, inprocess.py): OK, every error,
exit codes, --json lines."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from routines.spec.paths import Paths, paths
from sandbox.overlay import quota_in_force
from supervisor.engine.runcgroup import host_limits
from tests.cli.cli_helpers import Cli
from tests.cli.inprocess import run_in_process
from tests.helpers import AGENT as UNSHAPED
from tests.helpers import write

REPO = Path(__file__).resolve().parents[2]
# With the title and summary validate asks a file written by hand for (routines/spec/shape.py).
AGENT = '[routine]\ntitle = "Day brief"\ndescription = "Your morning brief."\n\n' + UNSHAPED


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    # The CLI's entry point in this process (inprocess.py), as `python -m supervisor` runs it.
    return run_in_process(
        args, env=os.environ.copy(), cwd=str(REPO)
    )  # conftest's VINOS_HOME / VINOS_SYSTEM_DIR


@pytest.fixture
def p(vinos_env: Path) -> Paths:
    """The paths, with an Anthropic key on file (AGENT's `auto` route may escalate)."""
    found = paths()
    found.api_key_file.parent.mkdir(parents=True, exist_ok=True)
    found.api_key_file.write_text("sk-ant-test-key\n")
    found.api_key_file.chmod(0o600)
    return found


def test_auto_without_a_premium_key_warns(p: Paths) -> None:
    p.api_key_file.unlink()
    path = write(p.routines_dir, "day-brief", AGENT)
    done = cli("validate", str(path))
    assert done.returncode == 0  # a warning: the local leg still runs
    assert done.stdout.splitlines() == [
        f'{path}: [agent].route: route = "auto" may escalate to claude-sonnet-4-6, but there '
        f"is no premium key (set ANTHROPIC_API_KEY, or write the key to {p.api_key_file} "
        "(chmod 600)); until then a run that wants to escalate keeps the local answer and "
        "needs attention",
        f"{path}: OK",
        *CARD,
    ]
    off = AGENT.replace("[budget]", "[agent.escalation]\nmax_escalations_per_run = 0\n\n[budget]")
    write(p.routines_dir, "day-brief", off)
    # Cannot escalate: no warning.
    assert cli("validate", str(path)).stdout.splitlines() == [f"{path}: OK", *CARD]


# The card of a routine that can do nothing of note: printed all the same, since what a
# routine may do is what a person checks a file for ("OK" alone said nothing of it).
CARD = [
    "  reads        nothing of your files",
    "  network      no: its shell commands cannot reach the network",
    "  environment  HOME, PATH, TERM, LANG only (no secret)",
    "  actions      none",
    f"  limits       {host_limits()[1]}",  # this host's (no daemon runs here)
    f"  disk quota   {quota_in_force()[1]}",  # likewise (sandbox/overlay.py)
]


def test_valid_file_prints_ok_and_the_card_and_exits_0(p: Paths) -> None:
    path = write(p.routines_dir, "day-brief", AGENT)
    done = cli("validate", str(path))
    assert (done.returncode, done.stdout.splitlines(), done.stderr) == (
        0,
        [f"{path}: OK", *CARD],
        "",
    )


def test_invalid_file_prints_every_error_and_exits_1(p: Paths) -> None:
    path = write(
        p.routines_dir,
        "day-brief",
        AGENT.replace("max_dollars_per_day", "max_dolars_per_day").replace(
            "[agent]\n", '[agent]\nroute = "cloud"\n'
        ),
    )
    done = cli("validate", str(path))
    assert done.returncode == 1
    # (No "unlimited spend" warning: whether a route that names a provider is paid is known
    # only from config.toml, and this one names none there.)
    assert done.stdout.splitlines() == [
        f'{path}: [agent].route: expected one of "anthropic" | "ollama" | "auto" or a provider '
        'declared in config.toml [providers.NAME] (none declared), found "cloud" (a string)',
        f"{path}: [budget].max_dolars_per_day: unknown key (did you mean max_dollars_per_day?)",
    ]


def test_warnings_do_not_fail_validation(p: Paths) -> None:
    path = write(p.routines_dir, "day-brief", AGENT.replace("max_dollars_per_day = 0.5\n", ""))
    done = cli("validate", str(path))
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        f"{path}: [budget]: WARN no max_dollars_per_day: this routine's daily spend is unlimited",
        f"{path}: OK",
        *CARD,
    ]


def test_one_bad_file_among_good_ones_exits_1(p: Paths) -> None:
    good = write(p.routines_dir, "day-brief", AGENT)
    bad = write(p.routines_dir, "broken", "[agent\n")
    missing = p.routines_dir / "missing.toml"
    done = cli("validate", str(good), str(bad), str(missing))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{good}: OK",
        *CARD,
        f"{bad}: malformed TOML: Expected ']' at the end of a table declaration "
        "(at line 1, column 7)",
        f"{missing}: cannot read: No such file or directory",
    ]


def test_json_is_one_object_per_file(p: Paths) -> None:
    good = write(p.routines_dir, "day-brief", AGENT)
    warned = write(p.routines_dir, "no-budget", AGENT.replace("max_dollars_per_day = 0.5\n", ""))
    bad = write(p.routines_dir, "broken", AGENT.replace("0.5", "0"))
    done = cli("validate", "--json", str(good), str(warned), str(bad))
    assert done.returncode == 1
    objects = [json.loads(line) for line in done.stdout.splitlines()]
    unlimited = "[budget]: WARN no max_dollars_per_day: this routine's daily spend is unlimited"
    card = [
        {"label": "reads", "text": "nothing of your files"},
        {"label": "network", "text": "no: its shell commands cannot reach the network"},
        {"label": "environment", "text": "HOME, PATH, TERM, LANG only (no secret)"},
        {"label": "actions", "text": "none"},
        {"label": "limits", "text": host_limits()[1]},
        {"label": "disk quota", "text": quota_in_force()[1]},
    ]
    unsigned = {"signature": "unsigned", "signer": None, "card": card}
    assert objects == [
        {"file": str(good), "ok": True, "errors": [], "warnings": [], **unsigned},
        {
            "file": str(warned),
            "ok": True,
            "errors": [],
            "warnings": [f"{warned}: {unlimited}"],
            **unsigned,
        },
        {
            "file": str(bad),
            "ok": False,
            "errors": [
                f"{bad}: [budget].max_dollars_per_day: expected a positive number, "
                "found 0 (an integer)"
            ],
            "warnings": [],
        },
    ]


def test_without_paths_every_routine_file_is_checked(p: Paths) -> None:
    user = write(p.routines_dir, "day-brief", AGENT)
    shadowed = write(p.system_dir, "day-brief", "[agent\n")  # overridden: not in force
    system = write(p.system_dir, "github-review", AGENT)
    broken = write(p.system_dir, "broken", "[agent\n")
    write(p.routines_dir, "config", "max_concurrent = 2\n")  # not a routine
    done = cli("validate", "--json")
    assert done.returncode == 1
    objects = {
        json.loads(line)["file"]: json.loads(line)["ok"] for line in done.stdout.splitlines()
    }
    assert objects == {str(user): True, str(system): True, str(broken): False}
    assert str(shadowed) not in objects
    broken.unlink()
    done = cli("validate")
    assert (done.returncode, sorted(done.stdout.splitlines())) == (
        0,
        sorted([f"{user}: OK", *CARD, f"{system}: OK", *CARD]),
    )


def test_usage_error_exits_2() -> None:
    done = cli("validate", "--no-such-flag")
    assert done.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in done.stderr


def test_the_daemons_config_toml_is_validated_with_its_sandbox_keys(p: Paths) -> None:
    cfg = p.config_file
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(
        '[sandbox]\nmax_run_memory_mb = 1024\nmax_workspace_mb = 64\nbwrap = "/usr/bin/bwrap"\n'
    )
    done = cli("validate", str(cfg))
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{cfg}: OK\n", "")
    cfg.write_text('[sandbox]\nmax_run_memory_mb = 0\nbwrap = "bwrap"\nmax_workspace = 1\n')
    done = cli("validate", str(cfg))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "config.toml: [sandbox].max_run_memory_mb: expected a positive integer, found 0 "
        "(an integer)",
        'config.toml: [sandbox].bwrap: expected an absolute path such as "/usr/bin/bwrap" '
        '(never looked up on PATH), found "bwrap" (a string)',
        "config.toml: [sandbox].max_workspace: unknown key (did you mean max_workspace_mb?)",
    ]


def test_a_missing_config_toml_is_an_error_not_defaults(p: Paths) -> None:
    done = cli("validate", str(p.config_file))
    assert done.returncode == 1
    assert done.stdout == "config.toml: cannot read: no such file\n"


def test_validate_refuses_a_sandbox_bwrap_that_does_not_exist(cli: Cli) -> None:
    config = cli.routines / "config.toml"
    config.write_text('[sandbox]\nbwrap = "/nonexistent/bwrap"\n')
    res = cli("validate", str(config))
    assert res.returncode == 1
    assert f"{config}: [sandbox].bwrap = '/nonexistent/bwrap': not found" in res.stdout
    assert ": OK" not in res.stdout


def test_a_routine_without_a_title_or_summary_is_warned_not_failed(p: Paths) -> None:
    path = write(p.routines_dir, "day-brief", UNSHAPED)
    done = cli("validate", str(path))
    assert done.returncode == 0
    assert done.stdout.splitlines()[:3] == [
        f"{path}: [routine].title: WARN missing: a short title (at most 60 characters) names "
        "it in lists",
        f"{path}: [routine].description: WARN missing: one plain sentence saying what you get",
        f"{path}: OK",
    ]
