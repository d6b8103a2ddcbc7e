"""The workspace quota kept by the kernel (sandbox/overlay.py): the writable dirs are overlays
whose upper dirs share a tmpfs of max_workspace_mb, copied back after the call only when the
result is within the quota. Real bwrap, real overlayfs, real tmpfs.

Parallel writers (or one writer, file after file) used to outrun the poll: 32 writers left
244 MB in a 16 MB workspace. Now the kernel stops them at 16 MB and nothing is kept."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from sandbox import Limits
from sandbox.overlay import overlay_unavailable
from tests.sandbox.sandbox_testkit import Box, python_in_sandbox, run_python

MiB = 1024 * 1024
SLACK = MiB  # du's rounding and the folders themselves

pytestmark = pytest.mark.skipif(
    overlay_unavailable() is not None, reason=f"no overlay here: {overlay_unavailable()}"
)


def du(*dirs: Path) -> int:
    total = 0
    for d in dirs:
        for root, folders, files in os.walk(d):
            for name in [*folders, *files]:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def snapshot(d: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under `d`: its mode and content (a symlink's text)."""
    out: dict[str, tuple[int, bytes]] = {}
    for root, folders, files in os.walk(d):
        for name in [*folders, *files]:
            p = Path(root, name)
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                body = os.readlink(p).encode()
            elif stat.S_ISREG(st.st_mode):
                body = p.read_bytes()
            else:
                body = b""
            out[str(p.relative_to(d))] = (st.st_mode, body)
    return out


def test_parallel_writers_stay_within_the_quota(box: Box) -> None:
    """docs/redteam.md's finding A: 32 writers of 17 MB each, a 16 MB quota."""
    cmd = (
        f"cd {box.workspace} && for i in $(seq 1 32); do (head -c 17M /dev/zero > f$i) & done; wait"
    )
    r = box.run(cmd, limits=Limits(workspace_mb=16), timeout=60)
    assert du(box.workspace, box.scratch) <= 16 * MiB + SLACK
    assert r.error is not None and "max_workspace_mb = 16" in r.error, r


def test_one_writer_file_after_file_stays_within_the_quota(box: Box) -> None:
    cmd = f"for i in $(seq 1 40); do head -c 1M /dev/zero > {box.workspace}/f$i; done; echo end"
    r = box.run(cmd, limits=Limits(workspace_mb=16), timeout=60)
    assert du(box.workspace, box.scratch) <= 16 * MiB + SLACK
    assert r.error is not None and "nothing the call wrote there was kept" in r.error, r
    assert "No space left on device" in r.stderr  # the kernel said no, not a poll
    assert not list(box.workspace.iterdir())


def test_a_call_within_the_quota_keeps_files_deletions_and_renames(box: Box) -> None:
    ws = box.workspace
    (ws / "gone").write_text("delete me")
    (ws / "old").write_text("rename me")
    (ws / "keep").write_text("untouched")
    (ws / "tree").mkdir()
    (ws / "tree" / "a").write_text("a")
    (ws / "redo").mkdir()
    (ws / "redo" / "stale").write_text("stale")
    (ws / "edit").write_text("one\n")
    cmd = (
        f"cd {ws} && rm gone && mv old renamed && mv tree moved && echo two >> edit"
        " && rm -r redo && mkdir redo && echo fresh > redo/new && ln -s ../keep lnk"
        " && echo s > suid && chmod 4755 suid && touch \"$(printf 'new\\nline')\""
        " && mkfifo pipe && mkdir -p d/e/f && echo deep > d/e/f/g"
        " && echo locked > locked && chmod 000 locked && echo ok"
    )
    r = box.run(cmd, limits=Limits(workspace_mb=16))
    assert (r.error, r.stdout) == (None, "ok\n"), r
    assert not (ws / "gone").exists() and not (ws / "old").exists()
    assert (ws / "renamed").read_text() == "rename me"
    assert (ws / "keep").read_text() == "untouched"
    assert not (ws / "tree").exists() and (ws / "moved" / "a").read_text() == "a"
    assert (ws / "edit").read_text() == "one\ntwo\n"
    assert sorted(os.listdir(ws / "redo")) == ["new"]  # the old folder's contents are gone
    assert os.readlink(ws / "lnk") == "../keep"
    assert stat.S_IMODE((ws / "suid").stat().st_mode) == 0o755  # no set-uid bit copied
    assert (ws / "new\nline").is_file()
    assert not (ws / "pipe").exists()  # fifos, sockets and devices are not copied back
    assert (ws / "d" / "e" / "f" / "g").read_text() == "deep\n"
    locked = ws / "locked"  # a file the call made unreadable is copied all the same
    assert stat.S_IMODE(locked.stat().st_mode) == 0
    locked.chmod(0o600)
    assert locked.read_text() == "locked\n"
    # The next call sees what this one kept.
    r = box.run(f"cat {ws}/renamed {ws}/redo/new", limits=Limits(workspace_mb=16))
    assert r.stdout == "rename mefresh\n"


def test_a_call_over_the_quota_changes_nothing(box: Box) -> None:
    ws = box.workspace
    (ws / "a").write_text("a")
    (ws / "d").mkdir()
    (ws / "d" / "b").write_text("b")
    before = snapshot(ws)
    cmd = f"cd {ws} && rm a && echo x >> d/b && echo new > n && head -c 20M /dev/zero > big"
    r = box.run(cmd, limits=Limits(workspace_mb=16))
    assert r.error is not None and "max_workspace_mb = 16" in r.error, r
    assert snapshot(ws) == before


def test_a_file_larger_than_what_is_left_may_be_rewritten(box: Box) -> None:
    """The tmpfs is the whole quota, not what is left: appending to a 10 MB file of a 16 MB
    quota copies it up whole (20 MB in all for a moment) and the result, 10 MB, is kept."""
    (box.workspace / "big").write_bytes(b"x" * (10 * MiB))
    r = box.run(f"echo more >> {box.workspace}/big && echo ok", limits=Limits(workspace_mb=16))
    assert (r.error, r.stdout) == (None, "ok\n"), r
    assert (box.workspace / "big").stat().st_size == 10 * MiB + 5


def test_a_call_over_the_quota_at_its_start_may_still_delete(box: Box) -> None:
    (box.workspace / "big").write_bytes(b"x" * (20 * MiB))
    r = box.run(f"rm {box.workspace}/big; echo ok", limits=Limits(workspace_mb=16))
    assert (r.error, r.stdout) == (None, "ok\n")
    assert not (box.workspace / "big").exists()


def test_links_in_the_workspace_never_write_outside_it(box: Box) -> None:
    """A symlink planted where the call makes a folder, and a hard link to a file outside:
    the copy back replaces both names, never writing through them."""
    ws = box.workspace
    outside = box.home / "outside"
    outside.mkdir()
    target = box.home / "target"
    target.write_text("precious")
    os.symlink(outside, ws / "d")
    os.link(target, ws / "h")
    cmd = f"cd {ws} && rm d && mkdir d && echo pwn > d/f && echo pwn > h && ln -sf {outside} e"
    cmd += " && echo ok"
    r = box.run(cmd, limits=Limits(workspace_mb=16))
    assert (r.error, r.stdout) == (None, "ok\n"), r
    assert list(outside.iterdir()) == []
    assert target.read_text() == "precious"
    assert (ws / "d").is_dir() and not (ws / "d").is_symlink()
    assert (ws / "d" / "f").read_text() == "pwn\n" and (ws / "h").read_text() == "pwn\n"
    assert os.readlink(ws / "e") == str(outside)  # copied as a link, not followed


def test_a_symlink_swapped_in_by_a_sandbox_is_not_followed(box: Box) -> None:
    """The call makes `d` a link to a folder outside and then writes `d/f` (through the link:
    ENOENT in the sandbox, whose view has no such folder)."""
    outside = box.home / "outside"
    outside.mkdir()
    code = f"""
import os
os.mkdir("{box.workspace}/d")
open("{box.workspace}/d/f", "w").write("one")
os.rename("{box.workspace}/d", "{box.workspace}/d2")
os.symlink("{outside}", "{box.workspace}/d")
print("ok")
"""
    r = box.run(python_in_sandbox(code), limits=Limits(workspace_mb=16))
    assert (r.error, r.stdout) == (None, "ok\n"), r
    assert list(outside.iterdir()) == []
    assert (box.workspace / "d2" / "f").read_text() == "one"
    assert os.readlink(box.workspace / "d") == str(outside)


@pytest.mark.slow
def test_many_empty_files_stop_at_the_entries_limit(box: Box) -> None:
    """Files count too: the tmpfs has as many inodes as the quota allows entries."""
    code = f"""
import os
n = 0
try:
    for i in range(300000):
        os.close(os.open("{box.workspace}/%d" % i, os.O_CREAT | os.O_WRONLY, 0o600))
        n += 1
except OSError as exc:
    print(exc.strerror)
print(n)
"""
    r = box.run(python_in_sandbox(code), limits=Limits(workspace_mb=64), timeout=120)
    assert r.stdout.startswith("No space left on device\n"), r
    assert r.error is not None and "nothing the call wrote there was kept" in r.error
    assert not list(box.workspace.iterdir())


def test_the_scratch_dir_and_the_workspace_share_the_quota(box: Box) -> None:
    cmd = f"head -c 10M /dev/zero > f; head -c 10M /dev/zero > {box.workspace}/g; echo end"
    r = box.run(cmd, limits=Limits(workspace_mb=16))
    assert r.stdout == "end\n" and "No space left on device" in r.stderr, r
    assert r.error is not None and "over max_workspace_mb = 16" in r.error
    assert f"{box.workspace} and {box.scratch}" in r.error
    assert du(box.workspace, box.scratch) == 0


def test_files_deleted_but_held_open_count_in_the_tmpfs(box: Box) -> None:
    """No walk finds a file unlinked while open; the tmpfs counts its pages all the same."""
    code = f"""
import os
fds = []
try:
    for i in range(60):
        fd = os.open("{box.workspace}/f%d" % i, os.O_CREAT | os.O_WRONLY, 0o600)
        os.unlink("{box.workspace}/f%d" % i)
        os.write(fd, b"x" * (1 << 20))
        fds.append(fd)
except OSError as exc:
    print(exc.strerror, len(fds))
"""
    r = box.run(python_in_sandbox(code), limits=Limits(workspace_mb=16), timeout=60)
    words = r.stdout.split()
    assert r.stdout.startswith("No space left on device "), r
    assert int(words[-1]) <= 16


def test_no_descriptor_of_the_real_dirs_reaches_the_sandbox(box: Box) -> None:
    """bwrap does not close the fds it is given: one on the real workspace would let the call
    write there past the tmpfs. Every inherited fd is tried, then the call goes over."""
    code = f"""
import os
for fd in map(int, os.listdir("/proc/self/fd")):
    try:
        f = os.open("escaped", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd)
        os.write(f, b"x")
        os.close(f)
    except OSError:
        pass
open("{box.workspace}/big", "wb").write(b"x" * (20 << 20))
"""
    r = box.run(python_in_sandbox(code), limits=Limits(workspace_mb=16))
    assert "No space left on device" in r.stderr, r
    assert not (box.workspace / "escaped").exists() and not (box.scratch / "escaped").exists()
    assert not (box.workspace / "big").exists()


def test_a_tree_deeper_than_the_copy_back_walks_is_not_kept(box: Box) -> None:
    """The copy back holds one fd per level and stops at 512: deeper, nothing is kept."""
    deep = "/".join(["d"] * 600)
    r = box.run(f"cd {box.workspace} && mkdir -p {deep} && echo ok > top", timeout=60)
    assert r.error is not None and "more than 512 deep" in r.error, r
    assert not list(box.workspace.iterdir())


def test_the_tmpfs_is_let_go_after_the_call(
    box: Box, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its memory lives as long as a descriptor on it: none is left once the call returns,
    kept or not, and no mount dir is left behind (one per process, reused: each call's tmpfs
    is mounted on it in that call's namespace only). The overlay maker's socket and that dir
    stay, from a process's first overlaid call on, so a first call comes before the count."""
    box.run("true", limits=Limits(workspace_mb=16))
    # The mount dirs are made in a temp dir of this test's own: another test process's calls
    # come and go in the shared one meanwhile.
    tmp = tmp_path / "mnt"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    before = sorted(os.listdir("/proc/self/fd"))
    dirs = {p.name for p in tmp.glob("vinos-overlay-*")}
    box.run(f"head -c 1M /dev/zero > {box.workspace}/kept", limits=Limits(workspace_mb=16))
    box.run(f"head -c 20M /dev/zero > {box.workspace}/over", limits=Limits(workspace_mb=16))
    assert sorted(os.listdir("/proc/self/fd")) == before
    assert {p.name for p in tmp.glob("vinos-overlay-*")} == dirs
    assert (box.workspace / "kept").stat().st_size == MiB


def test_a_process_that_makes_its_overlays_itself_keeps_the_quota_and_leaves_nothing(
    box: Box,
) -> None:
    """`vinos-routine sandbox` builds a call's overlays in a fork of its own process
    (sandbox.make_overlays_in_process), not in a maker interpreter started for one call: the
    kernel still keeps the quota, what fits is copied back, and the fork is reaped, with no
    maker started and no descriptor of ours left open."""
    kit = str(Path(__file__).parent)
    where = [str(p) for p in (box.home, box.state, box.other_state, box.workspace, box.scratch)]
    code = f"""
import os, sys
sys.path.insert(0, {kit!r})
import sandbox
from sandbox import Limits, overlay
from sandbox_testkit import Box
from pathlib import Path
box = Box(*(Path(p) for p in {where!r}), marker={box.marker!r})
sandbox.make_overlays_in_process()
run = lambda cmd: box.run(cmd, limits=Limits(workspace_mb=16))
run("true")
before = sorted(os.listdir("/proc/self/fd"))
kept = run("head -c 1M /dev/zero > {box.workspace}/kept; echo wrote")
over = run("head -c 20M /dev/zero > {box.workspace}/over")
assert kept.stdout == "wrote\\n" and kept.error is None, kept
assert over.error is not None and "max_workspace_mb = 16" in over.error, over
assert "No space left on device" in over.stderr, over
assert overlay._maker.proc is None, "a maker interpreter was started"
assert sorted(os.listdir("/proc/self/fd")) == before
try:
    os.waitpid(-1, os.WNOHANG)
    raise AssertionError("a forked child was left unreaped")
except ChildProcessError:
    pass
print("ok")
"""
    assert run_python(code) == "ok\n"
    assert (box.workspace / "kept").stat().st_size == MiB
    assert not (box.workspace / "over").exists()
