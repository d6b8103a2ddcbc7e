"""The runner: exit codes, output caps, timeouts and the process sweep, fail-closed refusals,
the debug argv, and refusing root. Real bwrap throughout; fresh interpreters where the
per-process probe cache or the logging must start clean."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sandbox import ROOT_REFUSAL, STDERR_CAP, STDOUT_CAP, ShellResult, run_shell
from tests.sandbox.sandbox_testkit import (
    REPO,
    Box,
    processes_with,
    read_back,
    run_python,
    sleep_marker,
)


def test_exit_code_stdout_and_stderr(box: Box) -> None:
    r = box.run("echo out; echo err >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code, r.error) == ("out\n", "err\n", 3, None)
    assert not (r.timed_out or r.stdout_truncated or r.stderr_truncated)
    assert r.duration_sec > 0
    assert box.run("kill -9 $$").exit_code == 128 + 9


@pytest.mark.parametrize(
    "command", ["ls -d /proc/[0-9]*", "cd / && ls -d /proc/[0-9]*", "true; ls -d /proc/[0-9]*"]
)
def test_the_command_runs_in_the_shell_that_set_the_limits(box: Box, command: str) -> None:
    """One bash sets the limits and runs the command as its last line (sandbox/argv.py
    script): a simple command, or the last of a list, replaces that shell as it did under
    `bash -c CMD`, so nothing waits between bwrap's init (pid 1) and it."""
    r = box.run(command)
    assert (r.stdout.split(), r.stderr, r.exit_code) == (["/proc/1", "/proc/2"], "", 0), r


def test_the_command_sees_a_fresh_shell_under_hard_limits(box: Box) -> None:
    """$0 is bash's own path and there are no positional arguments, as in `bash -c CMD`; the
    limits are on before the command is parsed, a backgrounded part of it included."""
    r = box.run('echo "$0" $#; ulimit -Hn & wait; ulimit -Sn; exit 7')
    shell, count, hard, soft = r.stdout.split()
    assert shell.endswith("/bash") and count == "0" and hard == soft == "256", r
    assert r.exit_code == 7 and r.stderr == ""


def test_stdin_is_the_given_bytes_whatever_their_size(box: Box) -> None:
    """An approved action reads its proposal on stdin; larger than a pipe's buffer, and read only
    after the command printed more than its own, it still arrives."""
    data = bytes(range(256)) * 1024  # 256 KB, every byte value
    r = run_shell(
        "head -c 100000 /dev/zero | wc -c; sha256sum", box.policy(), timeout_sec=20, stdin=data
    )
    assert r.exit_code == 0, r
    assert r.stdout.split() == ["100000", hashlib.sha256(data).hexdigest(), "-"]
    assert box.run("wc -c").stdout.strip() == "0"  # without: /dev/null


def test_to_json_is_what_the_model_sees(box: Box) -> None:
    assert box.run("printf hi").to_json() == {
        "exit_code": 0,
        "stdout": "hi",
        "stderr": "",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "timed_out": False,
        "duration_sec": pytest.approx(box.run("true").duration_sec, abs=10),
    }
    refused = ShellResult(error="no").to_json()
    assert refused["error"] == "no" and refused["exit_code"] is None


@pytest.mark.parametrize(("size", "cut"), [(STDOUT_CAP, False), (STDOUT_CAP + 1, True)])
def test_stdout_is_capped_at_32_kb(box: Box, size: int, cut: bool) -> None:
    r = box.run(f"head -c {size} /dev/zero | tr '\\0' a")
    assert r.stdout == "a" * min(size, STDOUT_CAP)
    assert r.stdout_truncated is cut
    # Past the cap the command is ended (None), unless it finished into the pipe first.
    assert r.exit_code in ((None, 0) if cut else (0,))


def test_stderr_is_capped_at_8_kb(box: Box) -> None:
    r = box.run(f"head -c {STDERR_CAP * 4} /dev/zero | tr '\\0' e >&2; echo done")
    assert r.stderr == "e" * STDERR_CAP and r.stderr_truncated
    assert "cap" in r.to_json()["note"]


MEMORY_PROBE = """
import json, resource, sys
sys.path.insert(0, {repo!r})
sys.path.insert(0, {kit!r})
from pathlib import Path
from tests.sandbox.sandbox_testkit import make_box
box = make_box(Path({tmp!r}))
box.run("echo warm-up")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
r = box.run({command!r}, timeout=120)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"before_kb": before, "after_kb": after, "out": len(r.stdout),
    "err": len(r.stderr), "cut": [r.stdout_truncated, r.stderr_truncated],
    "exit": r.exit_code, "timed_out": r.timed_out}}))
"""


@pytest.mark.parametrize(
    "command",
    [
        "yes",  # lines, forever
        "head -c 1G /dev/zero | tr '\\0' x",  # 1 GB with no newline
        "head -c 1G /dev/zero | tr '\\0' x >&2",  # the same on stderr
    ],
)
def test_a_gigabyte_of_output_is_cut_at_the_cap_with_flat_memory(
    box: Box, tmp_path: Path, command: str, no_leftovers: None
) -> None:
    code = textwrap.dedent(MEMORY_PROBE).format(
        repo=str(REPO), kit=str(Path(__file__).parent), tmp=str(tmp_path / "m"), command=command
    )
    (tmp_path / "m").mkdir()
    m = json.loads(run_python(code))
    assert m["exit"] is None and not m["timed_out"]  # ended at the cap, long before 120 s
    assert m["cut"] in ([True, False], [False, True])
    assert m["out"] <= STDOUT_CAP and m["err"] <= STDERR_CAP
    # The runner's peak memory did not grow with the output (ru_maxrss is in KB).
    assert m["after_kb"] - m["before_kb"] < 8 * 1024, m


def test_sleep_is_killed_at_the_timeout(box: Box, no_leftovers: None) -> None:
    marker = sleep_marker(1000)
    r = box.run(f"echo before; sleep {marker}", timeout=1)
    assert r.timed_out and r.exit_code is None
    assert r.stdout == "before\n"  # what it printed before the end is kept
    assert r.to_json()["note"] == "the command was killed at the shell timeout"
    assert processes_with(marker) == []


def test_a_command_ignoring_sigterm_is_killed_too(box: Box, no_leftovers: None) -> None:
    marker = sleep_marker(1000)
    r = box.run(f"trap '' TERM; sleep {marker}; sleep {marker}", timeout=1)
    assert r.timed_out
    assert processes_with(marker) == []


@pytest.mark.parametrize(
    "command",
    [
        "sleep {m} & echo started",  # a backgrounded child
        "setsid nohup sleep {m} >/dev/null 2>&1 & echo started",  # a new session
        "( setsid nohup sleep {m} >/dev/null 2>&1 & ) ; echo started",  # a double fork
        "nohup sleep {m} & disown; echo started",
    ],
)
def test_children_are_gone_when_the_command_exits(
    box: Box, command: str, no_leftovers: None
) -> None:
    marker = sleep_marker(999)
    r = box.run(command.format(m=marker), timeout=30)
    assert r.stdout == "started\n" and r.exit_code == 0 and not r.timed_out
    assert processes_with(marker) == []


def test_a_double_forked_child_is_gone_at_the_timeout(box: Box, no_leftovers: None) -> None:
    marker = sleep_marker(999)
    r = box.run(f"( setsid nohup sleep {marker} >/dev/null 2>&1 & ); sleep {marker}", timeout=1)
    assert r.timed_out
    assert processes_with(marker) == []


@pytest.mark.parametrize("command", ["touch made-it\n", "touch made-it\0", "touch made-it\r"])
def test_a_newline_or_nul_in_the_command_runs_nothing(box: Box, command: str) -> None:
    r = box.run(command)
    assert r.error is not None and r.exit_code is None
    assert not (box.scratch / "made-it").exists()


def test_a_bad_path_in_the_policy_runs_nothing(box: Box) -> None:
    from dataclasses import replace

    from sandbox import run_shell

    policy = replace(box.policy(), rw_binds=(str(box.scratch) + "\nx",))
    r = run_shell("touch made-it", policy, timeout_sec=10)
    assert r.error is not None and "NUL, newline" in r.error
    assert not (box.scratch / "made-it").exists()


def test_debug_prints_the_argv_before_running(
    box: Box, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VINOS_ROUTINE_DEBUG", "1")
    r = box.run("echo 'quoted arg'", network=True)
    assert r.stdout == "quoted arg\n"
    err = capfd.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("vinos-routine: sandbox argv: ")]
    argv = read_back(line.removeprefix("vinos-routine: sandbox argv: "))
    # nsenter joins the namespaces of the overlays (sandbox/overlay.py) and starts the network
    # holder, which starts bwrap (sandbox/netns.py); bwrap binds the overlays where the
    # workspace and the scratch dir show.
    assert argv[0].endswith("/nsenter") and argv[3:5] == ["--preserve-credentials", "--"]
    assert argv[5] == sys.executable and argv[8].endswith("sandbox/netholder.py")
    assert argv[11:13] == ["--", "/usr/bin/bwrap"]
    binds = [argv[i + 1 : i + 3] for i, a in enumerate(argv) if a == "--bind"]
    assert [dest for _, dest in binds] == [str(box.workspace), str(box.scratch)]
    assert all(src.startswith(tempfile.gettempdir() + "/vinos-overlay-") for src, _ in binds)
    assert argv[-1].startswith("ulimit ") and argv[-1].endswith("\necho 'quoted arg'")  # one line
    assert "--seccomp" in argv
    assert box.marker not in err


def _fresh(code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = run_python(textwrap.dedent(code), env=env)
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


FAIL_CLOSED = """
import json, logging, sys
{setup}
import sandbox
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.name, record.getMessage()))
logging.getLogger("vinos.sandbox").addHandler(Keep())
policy = sandbox.ShellPolicy(ro_binds=(), rw_binds=(), masks=(), cwd="/"{policy_kw})
results = [sandbox.run_shell("touch {made}", policy, timeout_sec=5) for _ in range(3)]
print(json.dumps({{"errors": [r.error for r in results], "codes": [r.exit_code for r in results],
    "records": records}}))
"""


def _fail_closed(
    tmp_path: Path, setup: str, env: dict[str, str] | None = None, policy_kw: str = ""
) -> dict[str, Any]:
    made = tmp_path / "made-it"
    code = FAIL_CLOSED.format(setup=setup, made=str(made), policy_kw=policy_kw)
    out = _fresh(code, env)
    assert not made.exists()  # nothing ran, sandboxed or not
    assert out["codes"] == [None, None, None]
    return out


def test_no_bwrap_fails_closed_with_one_warning(tmp_path: Path, not_root: None) -> None:
    missing = tmp_path / "bwrap"  # [sandbox].bwrap pointing where there is none
    out = _fail_closed(tmp_path, "", policy_kw=f", bwrap={str(missing)!r}")
    errors = out["errors"]
    assert all(e and f"[sandbox].bwrap = '{missing}': not found" in e for e in errors)
    (record,) = out["records"]
    level, name, message = record
    assert (level, name) == ("WARNING", "vinos.sandbox")
    assert "not found" in message and "apt install bubblewrap" in message


def test_no_libseccomp_fails_closed(tmp_path: Path, not_root: None) -> None:
    # A library cannot be uninstalled for one unprivileged test, so the binding's import
    # fails instead, exactly as pyseccomp's does when it cannot find libseccomp.so.2.
    out = _fail_closed(tmp_path, "sys.modules['pyseccomp'] = None")
    errors = out["errors"]
    assert all(e and "libseccomp" in e for e in errors)
    (record,) = out["records"]
    assert "apt install libseccomp2" in record[2]


NESTED_PROBE = """
import sys
sys.path[:0] = [{repo!r}, {site!r}]
import sandbox, sandbox.host
# Inside a sandbox the host's root is unmapped, so root's files show as uid 65534 and the
# ownership check (tests/sandbox/test_run_limits.py's) would refuse bwrap first; it is
# stubbed here so the probe reaches what this test is about: no user namespaces.
sandbox.host.check_binary = lambda path, key="": path
p = sandbox.probe()
print(p.ok, "|", p.reason, "|", p.fix)
"""


def test_a_host_without_user_namespaces_fails_closed(box: Box) -> None:
    """Run the probe where user namespaces are off for real: inside our own sandbox."""
    from dataclasses import replace

    import pyseccomp

    from sandbox import run_shell
    from tests.sandbox.sandbox_testkit import python_in_sandbox

    site = str(Path(pyseccomp.__file__).parent)
    policy = box.policy()
    policy = replace(policy, ro_binds=(*policy.ro_binds, str(REPO), site))
    code = NESTED_PROBE.format(repo=str(REPO), site=site)
    r = run_shell(python_in_sandbox(code), policy, timeout_sec=60)
    assert r.exit_code == 0, r.stderr
    ok, reason, fix = (s.strip() for s in r.stdout.split("|"))
    assert ok == "False"
    assert "cannot create user namespaces" in reason
    assert "user namespaces" in fix


ROOT_PROBE = """
import json, os, sys
sys.path.insert(0, {repo!r})
import sandbox
policy = sandbox.ShellPolicy(ro_binds=(), rw_binds=(), masks=(), cwd="/")
r = sandbox.run_shell("touch {made}", policy, timeout_sec=5)
print(json.dumps({{"uid": os.geteuid(), "error": r.error, "refuse": sandbox.refuse_if_root(),
    "probe": [sandbox.probe().ok, sandbox.probe().fix]}}))
"""


def test_running_as_root_is_refused(tmp_path: Path, not_root: None) -> None:
    """uid 0 for real, in a user namespace (`unshare -r`), as an unprivileged user can."""
    made = tmp_path / "made-it"
    code = ROOT_PROBE.format(repo=str(REPO), made=str(made))
    proc = subprocess.run(
        ["unshare", "-r", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["uid"] == 0
    assert out["error"] == ROOT_REFUSAL == out["refuse"]
    assert out["probe"] == [False, ROOT_REFUSAL]
    assert not made.exists()
