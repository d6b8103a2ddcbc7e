"""The read tool: globs, caps, binary files, and symlinks that must never lead outside the
declared patterns, including one swapped in a loop while reads run (real files, real
threads; the read tool runs in the worker, outside bwrap)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox import ReadBudget, read_files
from sandbox.readtool import CALL_CAP, FILE_CAP, MAX_FILES, RUN_CAP

KB = 1024


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    for rel, text in {
        "Notes/a.md": "alpha\n",
        "Notes/b.md": "beta\n",
        "Notes/c.txt": "gamma\n",
        "Notes/.hidden.md": "hidden\n",
        "Notes/sub/c.md": "sub c\n",
        "Notes/sub/deep/d.md": "deep d\n",
        "Notes/.git/e.md": "in a hidden dir\n",
        ".ssh/id_rsa": "PRIVATE-KEY-MARKER\n",
    }.items():
        p = h / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (h / "state/r1").mkdir(parents=True)
    return h


def read(home: Path, pattern: str, *declared: str, budget: ReadBudget | None = None) -> Any:
    return read_files(pattern, declared or (pattern,), home=home, budget=budget or ReadBudget())


def names(result: dict[str, Any]) -> list[str]:
    return [os.path.basename(f["path"]) for f in result["files"]]


def test_an_undeclared_pattern_is_refused(home: Path) -> None:
    r = read(home, "~/.ssh/*", "~/Notes/*.md")
    assert r["files"] == [] and r["error"].startswith("refused: not a declared read pattern")


def test_star_matches_files_in_one_dir_not_hidden_ones(home: Path) -> None:
    r = read(home, "~/Notes/*.md")
    assert names(r) == ["a.md", "b.md"]
    real = os.path.realpath(home)
    assert r["files"][0] == {"path": f"{real}/Notes/a.md", "content": "alpha\n", "truncated": False}
    assert r["skipped"] == []


def test_question_mark_brackets_and_literal_paths(home: Path) -> None:
    assert names(read(home, "~/Notes/?.md")) == ["a.md", "b.md"]
    assert names(read(home, "~/Notes/[ac].*")) == ["a.md", "c.txt"]
    assert names(read(home, "~/Notes/[!a].md")) == ["b.md"]
    assert names(read(home, "~/Notes/sub/c.md")) == ["c.md"]
    real = os.path.realpath(home)
    assert names(read(home, f"{real}/Notes/b.md")) == ["b.md"]  # an absolute pattern


def test_double_star_descends_into_subdirectories_but_not_hidden_ones(home: Path) -> None:
    r = read(home, "~/Notes/**/*.md")
    assert [f["content"] for f in r["files"]] == ["alpha\n", "beta\n", "sub c\n", "deep d\n"]
    assert names(read(home, "~/Notes/**")) == ["a.md", "b.md", "c.txt", "c.md", "d.md"]


def test_directories_are_skipped(home: Path) -> None:
    r = read(home, "~/Notes/*")
    assert names(r) == ["a.md", "b.md", "c.txt"]  # not sub/
    assert r["skipped"] == []


def test_a_missing_file_is_reported(home: Path) -> None:
    r = read(home, "~/Notes/nope.md")
    assert r["files"] == []
    assert r["skipped"][0]["reason"] == "cannot read: No such file or directory"


def test_per_file_cap_256_kb(home: Path) -> None:
    (home / "Notes/big.md").write_text("x" * (FILE_CAP + 10))
    r = read(home, "~/Notes/big.md")
    (f,) = r["files"]
    assert len(f["content"]) == FILE_CAP == 256 * KB and f["truncated"] is True


def test_per_call_cap_500_kb_marks_later_files(home: Path) -> None:
    for n in "pqr":
        (home / f"Notes/{n}.log").write_text(n * (200 * KB))
    r = read(home, "~/Notes/*.log")
    sizes = [(len(f["content"]), f["truncated"]) for f in r["files"]]
    assert sizes == [(200 * KB, False), (200 * KB, False), (CALL_CAP - 400 * KB, True)]
    assert "budget ran out" in r["note"]


def test_per_run_cap_1_mb(home: Path) -> None:
    for n in "pqrstu":
        (home / f"Notes/{n}.log").write_text(n * (250 * KB))
    budget = ReadBudget()
    first = read(home, "~/Notes/[pq].log", budget=budget)
    second = read(home, "~/Notes/[rs].log", budget=budget)
    third = read(home, "~/Notes/[tu].log", budget=budget)
    total = sum(len(f["content"]) for r in (first, second, third) for f in r["files"])
    assert total == RUN_CAP
    assert [f["truncated"] for f in third["files"]] == [True, True]
    assert third["files"][1]["content"] == ""  # listed, but nothing left to show
    assert budget.remaining == 0


def test_binary_and_undecodable_files_are_reported_not_shown(home: Path) -> None:
    (home / "Notes/x.bin").write_bytes(b"\x7fELF\0\0\x01")
    (home / "Notes/y.bin").write_bytes(b"caf\xe9 latin-1")
    r = read(home, "~/Notes/*.bin")
    assert r["files"] == []
    assert [s["reason"] for s in r["skipped"]] == ["binary or not UTF-8 text; not shown"] * 2


def test_a_cut_through_a_multibyte_character_is_clean(home: Path) -> None:
    (home / "Notes/u.md").write_text("é" * FILE_CAP)  # 2 bytes each
    (f,) = read(home, "~/Notes/u.md")["files"]
    assert f["truncated"] and f["content"] == "é" * (FILE_CAP // 2)


def test_a_fifo_does_not_hang_the_read(home: Path) -> None:
    os.mkfifo(home / "Notes/pipe.md")
    r = read(home, "~/Notes/*.md")
    assert names(r) == ["a.md", "b.md"]
    assert {"path": f"{os.path.realpath(home)}/Notes/pipe.md", "reason": "not a regular file"} in r[
        "skipped"
    ]


# --- symlinks: the model can plant them in its writable state dir ---


def test_a_symlink_to_etc_passwd_in_the_state_dir_is_refused(home: Path) -> None:
    (home / "state/r1/out.md").write_text("mine\n")
    (home / "state/r1/passwd.md").symlink_to("/etc/passwd")
    (home / "state/r1/key.md").symlink_to(home / ".ssh/id_rsa")
    r = read(home, "~/state/r1/*")
    assert [f["content"] for f in r["files"]] == ["mine\n"]
    assert sorted((os.path.basename(s["path"]), s["reason"]) for s in r["skipped"]) == [
        ("key.md", "resolves outside the declared read patterns"),
        ("passwd.md", "resolves outside the declared read patterns"),
    ]
    assert "root:" not in str(r) and "PRIVATE-KEY-MARKER" not in str(r)


def test_a_symlink_to_root_is_not_followed(home: Path) -> None:
    (home / "state/r1/root").symlink_to("/")
    (home / "state/r1/up").symlink_to("../..")
    for pattern in ("~/state/r1/*/etc/passwd", "~/state/r1/**/*", "~/state/r1/*/*"):
        r = read(home, pattern)
        assert r["files"] == [], pattern
        assert "root:" not in str(r)


def test_a_symlinked_directory_in_the_pattern_is_not_followed(home: Path) -> None:
    (home / "link").symlink_to(home / "Notes")
    r = read(home, "~/link/*.md")
    assert r["files"] == []
    assert r["skipped"][0]["reason"].startswith("a symlinked directory is not followed")


def test_a_symlink_resolving_into_another_declared_pattern_is_allowed(home: Path) -> None:
    (home / "state/r1/today.md").symlink_to(home / "Notes/a.md")
    r = read(home, "~/state/r1/*.md", "~/state/r1/*.md", "~/Notes/*.md")
    (f,) = r["files"]
    assert f["content"] == "alpha\n"
    assert f["resolved"] == f"{os.path.realpath(home)}/Notes/a.md"


FLIPPER = """
import os, sys
link, tmp, targets = sys.argv[1], sys.argv[2], sys.argv[3:]
i = 0
while True:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    os.symlink(targets[i % len(targets)], tmp)
    os.replace(tmp, link)  # an atomic swap, as an attacker would do it
    i += 1
"""


def test_a_symlink_swapped_in_a_loop_never_leaks(home: Path) -> None:
    """Another process flips state/r1/x.md between an allowed file and secrets as fast as it
    can; every read returns the allowed file or refuses, never a secret."""
    link = home / "state/r1/x.md"
    allowed = home / "state/r1/ok.txt"
    allowed.write_text("harmless\n")
    link.symlink_to(allowed)
    targets = [str(allowed), str(home / ".ssh/id_rsa"), "/etc/passwd"]
    flipper = subprocess.Popen(
        [sys.executable, "-c", FLIPPER, str(link), str(home / "state/r1/.x.tmp"), *targets]
    )
    seen = {"content": 0, "refused": 0}
    # At least 300 reads, and on until both sides of the race were seen: on a loaded machine
    # the flipper may not have started swapping before the first few hundred reads end.
    deadline = time.monotonic() + 60
    reads = 0
    try:
        while reads < 300 or (
            (seen["content"] == 0 or seen["refused"] == 0) and time.monotonic() < deadline
        ):
            reads += 1
            r = read(home, "~/state/r1/x.md", "~/state/r1/x.md", "~/state/r1/*.txt")
            text = str(r)
            assert "PRIVATE-KEY-MARKER" not in text and "root:" not in text
            if r["files"]:
                assert r["files"][0]["content"] == "harmless\n"
                seen["content"] += 1
            elif r["skipped"]:
                seen["refused"] += 1
    finally:
        flipper.kill()
        flipper.wait()
    assert seen["content"] > 0 and seen["refused"] > 0, seen  # the race really was run


def test_patterns_with_dot_dot_or_relative_are_errors(home: Path) -> None:
    assert "not allowed" in read(home, "~/Notes/../.ssh/*")["error"]
    assert "start with" in read(home, "Notes/*.md")["error"]


def test_a_huge_match_is_listed_only_up_to_the_limit(home: Path) -> None:
    many = home / "many"
    many.mkdir()
    for i in range(MAX_FILES + 5):
        (many / f"{i:04}.txt").write_text("")
    r = read(home, "~/many/*.txt")
    assert len(r["files"]) == MAX_FILES
    assert "rest are not listed" in r["note"]


def test_a_file_resolving_under_a_never_path_is_refused_at_run_time(home: Path) -> None:
    """Even when a pattern would allow it (the loader refuses such a routine, but config's
    [sandbox].never can grow after it was validated), a real path under the never-list is
    refused; the routine's own workspace stays readable."""
    (home / "Notes/key.md").symlink_to(home / ".ssh/id_rsa")
    real = os.path.realpath(home)
    declared = ("~/Notes/*.md", "~/.ssh/id_rsa")
    kw: dict[str, Any] = {"home": home, "budget": ReadBudget()}
    open_ = read_files("~/Notes/*.md", declared, **kw)
    assert "PRIVATE-KEY-MARKER" in str(open_)  # without the never-list: the test means it
    shut = read_files("~/Notes/*.md", declared, never=(f"{real}/.ssh",), **kw)
    assert "PRIVATE-KEY-MARKER" not in str(shut)
    assert {
        "path": f"{real}/Notes/key.md",
        "reason": f"resolves to {real}/.ssh, which is on the never-list: no routine may read it",
    } in shut["skipped"]
    assert names(shut) == ["a.md", "b.md"]
    (home / "ws").mkdir()
    (home / "ws/kept.md").write_text("kept\n")
    mine = read_files("~/ws/*.md", ("~/ws/*.md",), never=(real,), own=(f"{real}/ws",), **kw)
    assert names(mine) == ["kept.md"]


# --- kernel interfaces and credential names: refused whatever a pattern says ---

NAMES = ("credentials*", "*token*", "*.pem")  # routines/spec/never.py NAME_PATTERNS, as the worker


def test_proc_environ_is_never_read(home: Path) -> None:
    """The worker's own environment holds its API key: neither a pattern into /proc nor a
    link to it reads a byte (before, only the decoder's NUL check kept the key out)."""
    r = read(home, "/proc/*/environ")
    assert r["files"] == []
    assert {"path": "/proc", "reason": "never read (kernel or runtime)"} in r["skipped"]
    (home / "Notes/env.md").symlink_to("/proc/self/environ")
    (home / "Notes/status.md").symlink_to("/proc/self/status")
    r = read(home, "~/Notes/*.md")
    assert names(r) == ["a.md", "b.md"]
    reasons = {os.path.basename(s["path"]): s["reason"] for s in r["skipped"]}
    assert reasons["env.md"].startswith("resolves to /proc, a kernel or runtime interface")
    assert reasons["status.md"].startswith("resolves to /proc")


@pytest.mark.parametrize("pattern", ["/sys/kernel/*", "/dev/*", "/run/*", "/proc/self/status"])
def test_sys_dev_and_run_are_never_read(home: Path, pattern: str) -> None:
    r = read(home, pattern)
    assert r["files"] == [] and r["skipped"], r
    assert all("kernel or runtime" in s["reason"] for s in r["skipped"]), r


def test_credential_named_files_are_refused_below_the_declared_folder(home: Path) -> None:
    for rel in ("Notes/api-token.md", "Notes/credentials.md", "Notes/sub/key.pem"):
        (home / rel).write_text("SECRET-MARKER\n")
    r = read_files(
        "~/Notes/**/*", ("~/Notes/**/*",), home=home, budget=ReadBudget(), never_names=NAMES
    )
    assert "SECRET-MARKER" not in str(r["files"])
    refused = sorted(os.path.basename(s["path"]) for s in r["skipped"])
    assert refused == ["api-token.md", "credentials.md", "key.pem"]
    assert all("looks like a credential" in s["reason"] for s in r["skipped"])
    assert "a.md" in names(r)
    # Named literally, it is refused all the same.
    literal = "~/Notes/api-token.md"
    r = read_files(literal, (literal,), home=home, budget=ReadBudget(), never_names=NAMES)
    assert r["files"] == [] and "looks like a credential (*token*)" in r["skipped"][0]["reason"]


def test_a_credential_name_above_the_declared_folder_does_not_count(tmp_path: Path) -> None:
    """`/home/tokenizer/…`: only names below the folder a pattern reads from are checked."""
    folder = tmp_path / "tokenizer-data/Notes"
    folder.mkdir(parents=True)
    (folder / "a.md").write_text("alpha\n")
    pattern = f"{folder}/*.md"
    r = read_files(pattern, (pattern,), home=tmp_path, budget=ReadBudget(), never_names=NAMES)
    assert names(r) == ["a.md"]
