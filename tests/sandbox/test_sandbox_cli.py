"""`vinos-routine sandbox NAME [--argv] -- CMD`, end to end through the real console script:
supervisor/cli/commands/sandbox.py execs worker.sandboxcli, which runs CMD in NAME's sandbox."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import ROOT_REFUSAL
from tests.sandbox.sandbox_testkit import REPO, make_box, read_back

AGENT = """
[routine]
description = "debugging a whitelist"
[schedule]
cron = "0 9 * * *"
[agent]
system = "be brief"
route = "ollama"
tools = ["shell:df -h"]
shell_timeout_sec = 2
"""


@pytest.fixture
def env(tmp_path: Path, vinos_env: Path, not_root: None) -> dict[str, str]:
    """HOME is a planted home; VINOS_HOME (from tests/conftest.py) holds routine `brief`."""
    box = make_box(tmp_path / "h")
    (vinos_env / "routines" / "brief.toml").write_text(AGENT)
    e = dict(os.environ, HOME=str(box.home), PYTHONPATH=str(REPO))
    e["VINOS_TEST_MARKER"] = box.marker
    return e


def cli(
    env: dict[str, str], *args: str, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "supervisor.cli", "sandbox", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_runs_the_command_and_passes_its_status_through(
    env: dict[str, str], vinos_env: Path
) -> None:
    p = cli(env, "brief", "--", "echo out; echo err >&2; pwd; exit 7")
    assert p.returncode == 7
    out, cwd = p.stdout.splitlines()
    assert out == "out" and p.stderr == "err\n"
    scratch_root = vinos_env / "routines/scratch/brief"
    assert Path(cwd).parent == scratch_root.resolve()
    assert list(scratch_root.iterdir()) == []  # an empty scratch dir is removed
    assert not (vinos_env / "routines/state/brief").exists()  # no sandbox touches state/


def test_words_are_joined_and_the_routine_policy_applies(env: dict[str, str]) -> None:
    p = cli(env, "brief", "--", "cat", "~/.ssh/id_rsa;", "echo", "$ANTHROPIC_API_KEY-x")
    assert env["VINOS_TEST_MARKER"] not in p.stdout + p.stderr
    assert "id_rsa: No such file" in p.stderr
    assert p.stdout == "-x\n"


def test_files_left_in_scratch_are_kept_and_named(env: dict[str, str]) -> None:
    p = cli(env, "brief", "--", "echo data > result.txt")
    assert p.returncode == 0
    kept = Path(p.stderr.split("are in ")[1].strip())
    assert (kept / "result.txt").read_text() == "data\n"


def test_the_shell_timeout_applies(env: dict[str, str]) -> None:
    p = cli(env, "brief", "--", "sleep 30")
    assert p.returncode == 124
    assert "killed at the 2 s timeout" in p.stderr


def test_argv_prints_the_bwrap_argv_without_running(env: dict[str, str], vinos_env: Path) -> None:
    p = cli(env, "brief", "--argv", "--", "touch made-it")
    assert p.returncode == 0, p.stderr
    (line,) = p.stdout.splitlines()  # one line, the `bash -c` text's newline written \n
    argv = read_back(line)
    assert os.path.basename(argv[0]) == "bwrap" and argv[-1].endswith("\ntouch made-it")
    workspace = str((vinos_env / "routines/workspace/brief").resolve())
    at = argv.index(workspace)
    assert ["--bind", workspace, workspace] == argv[at - 1 : at + 2]
    assert str(vinos_env / "routines/state") not in p.stdout
    assert "--unshare-net" in argv
    assert any(argv[i : i + 2] == ["--remount-ro", "/"] for i in range(len(argv)))
    assert "seccomp" in p.stderr
    assert not list((vinos_env / "routines").rglob("made-it"))


def test_debug_prints_the_argv_then_runs(env: dict[str, str]) -> None:
    p = cli({**env, "VINOS_ROUTINE_DEBUG": "1"}, "brief", "--", "echo ran")
    assert p.stdout == "ran\n"
    assert "vinos-routine: sandbox argv: " in p.stderr and "bwrap" in p.stderr


def test_an_unknown_routine_is_an_error(env: dict[str, str]) -> None:
    p = cli(env, "nope", "--", "true")
    assert p.returncode == 1 and "no routine named 'nope'" in p.stderr


def test_no_command_is_a_usage_error(env: dict[str, str]) -> None:
    p = cli(env, "brief", "--")
    assert p.returncode == 2


def test_root_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    """uid 0 in a user namespace (`unshare -r`) is root as far as the command can tell."""
    p = cli(env, "brief", "--", f"touch {tmp_path}/made-it", prefix=("unshare", "-r"))
    assert p.returncode == 1
    assert ROOT_REFUSAL in p.stderr
    assert not (tmp_path / "made-it").exists()


def test_the_console_script_execs_the_sandbox_before_building_its_parser(
    env: dict[str, str],
) -> None:
    """`vinos-routine sandbox NAME -- CMD` through the console script's entry (the thin
    client) reaches worker.sandboxcli without importing argparse or the command modules
    first (supervisor/cli/sandboxexec.py): every interpreter's imports are on stderr here.
    The command gets the umask every command gets (077) whatever the caller's."""
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "sandbox", "brief", "--", "umask"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
        timeout=60,
        check=False,
        preexec_fn=lambda: os.umask(0o022),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0077\n"
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "worker.shellpolicy" in imported  # worker.sandboxcli runs as __main__
    assert "argparse" not in imported
    assert not {m for m in imported if m.startswith("supervisor.cli.commands")}
