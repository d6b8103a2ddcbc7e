"""Escape suite, files: a whitelisted command must reach nothing the routine was not given.

Real bwrap, as the unprivileged user. Each test also shows that the way in works (a positive
control), so a sandbox that ran nothing at all would fail them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sandbox.sandbox_testkit import Box, python_in_sandbox


def test_planted_secrets_are_unreadable(box: Box) -> None:
    r = box.run(
        "cat ~/.ssh/id_rsa ~/.aws/credentials ~/.vinos/secrets/anthropic-key ~/.netrc"
        " ~/.gnupg/private-keys-v1.d/key.key ~/.config/rclone/rclone.conf;"
        " cat /proc/1/root$HOME/.ssh/id_rsa /proc/self/root$HOME/.aws/credentials;"
        " grep -rs VINOS-SECRET ~ /tmp; find ~ -name 'id_rsa*' -o -name credentials;"
        " cat ~/notes.txt"
    )
    everything = r.stdout + r.stderr
    assert box.marker not in everything
    assert "ordinary notes" in r.stdout  # a declared file is readable
    assert "/.ssh/id_rsa: No such file" in r.stderr  # not declared: not there at all
    assert "/.netrc: No such file" in r.stderr


def test_home_is_an_allowlist(box: Box) -> None:
    """Only what the routine declares shows in $HOME; a never-path below a declared
    directory (~/.config/rclone, ~/.config/gh under ~/.config) is hidden anyway."""
    (box.home / "undeclared").mkdir()
    (box.home / "undeclared/data.txt").write_text(box.marker)
    (box.home / ".config/gh").mkdir(parents=True)
    (box.home / ".config/gh/hosts.yml").write_text(f"oauth_token: {box.marker}\n")
    (box.home / ".config/myapp").mkdir(parents=True)
    (box.home / ".config/myapp/settings.toml").write_text("declared-setting\n")
    # $HOME: the declared paths, and .vinos holding the workspace and scratch mount points.
    assert box.run("ls -A ~").stdout.split() == [".config", ".vinos", "notes.txt"]
    r = box.run(
        "ls -A ~/.config; ls -A ~/.config/gh; cat ~/.config/myapp/settings.toml; "
        "cat ~/undeclared/data.txt"
    )
    assert r.stdout.split() == ["gh", "myapp", "rclone", "declared-setting"]
    assert box.marker not in r.stdout + r.stderr
    r = box.run("ls -A ~/.config/rclone; ls -A ~/.vinos/routines")
    assert r.stdout.split() == ["scratch", "workspace"]  # rclone: an empty tmpfs


def test_an_undeclared_credential_file_is_unreadable_and_a_declared_one_readable(
    box: Box,
) -> None:
    (box.home / ".config/gh").mkdir(parents=True)
    (box.home / ".config/gh/hosts.yml").write_text(f"oauth_token: {box.marker}\n")
    (box.home / ".git-credentials").write_text(f"https://u:{box.marker}@example.com\n")
    command = "cat ~/.config/gh/hosts.yml ~/.git-credentials"
    hidden = box.run(command, declared=("~/notes.txt",))
    assert box.marker not in hidden.stdout + hidden.stderr
    assert "hosts.yml: No such file" in hidden.stderr
    shown = box.run(command, declared=(), credentials=("~/.config/gh",))
    assert f"oauth_token: {box.marker}" in shown.stdout
    assert ".git-credentials: No such file" in shown.stderr


def test_declaring_a_never_path_is_refused() -> None:
    import sandbox

    with pytest.raises(sandbox.UnsafeValue, match="never-list"):
        sandbox.routine_policy(
            home=Path("/home/ana"),
            workspace=Path("/home/ana/.vinos/routines/workspace/r1"),
            scratch_dir=Path("/home/ana/.vinos/routines/scratch/r1/x"),
            network=False,
            declared=("~/.ssh",),
            never=("/home/ana/.ssh",),
        )


def test_state_memory_logs_and_other_routines_are_out_of_sight(box: Box) -> None:
    (box.state / "runs").mkdir()
    (box.state / "runs/run-0.jsonl").write_text("{}\n")
    (box.state / "last-run.json").write_text("{}\n")
    r = box.run(
        f"ls -A {box.state.parent}; cat {box.other_state}/memory.md;"
        f" echo INJECTED >> {box.state}/memory.md; echo x > {box.state}/runs/run-0.jsonl;"
        f" echo x > {box.state}/last-run.json; ls -A ~/.vinos ~/.vinos/routines"
    )
    assert box.marker not in r.stdout + r.stderr
    assert (box.state / "memory.md").read_text() == "r1's memory\n"
    assert (box.state / "runs/run-0.jsonl").read_text() == "{}\n"
    assert (box.state / "last-run.json").read_text() == "{}\n"
    # ~/.vinos holds only the mount points of the routine's own workspace and scratch dir.
    assert "state" not in r.stdout.split() and "secrets" not in r.stdout.split()


@pytest.mark.parametrize(
    "target",
    [
        "~/pwned",
        "~/.ssh/pwned",
        "/usr/pwned",
        "/etc/pwned",
        "{other}/pwned",
        "~/notes.txt",
        "/pwned",
        "~/.vinos/routines/state/r1/memory.md",
    ],
)
def test_writes_outside_the_workspace_and_scratch_dirs_fail(box: Box, target: str) -> None:
    path = target.replace("{other}", str(box.other_state))
    r = box.run(f"echo pwned >> {path} && echo WROTE")
    host_path = Path(path.replace("~", str(box.home)))
    assert not host_path.exists() or "pwned" not in host_path.read_text()
    if target == "~/pwned" and os.path.realpath(box.home).startswith("/tmp/"):
        return  # the test's home lies under /tmp: in the sandbox, its private tmpfs
    assert "WROTE" not in r.stdout
    assert r.exit_code != 0


def test_the_workspace_and_scratch_dirs_are_writable(box: Box) -> None:
    r = box.run(f"echo s > {box.workspace}/kept.md && echo w > here.txt && pwd")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == os.path.realpath(box.scratch)
    assert (box.workspace / "kept.md").read_text() == "s\n"
    assert (box.scratch / "here.txt").read_text() == "w\n"


def test_a_symlink_put_where_the_workspace_was_is_not_bound(box: Box, tmp_path: Path) -> None:
    """The workspace is bound from an fd opened with O_NOFOLLOW: a link in its place (left by
    anyone) makes the call fail rather than bind the link's target read-write."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    box.workspace.rmdir()
    box.workspace.symlink_to(target)
    r = box.run("echo pwned > kept.txt; echo pwned > " + str(box.workspace) + "/x")
    assert r.error is not None and "refused" in r.error
    assert list(target.iterdir()) == []


def test_tmp_is_private_and_fresh(box: Box, tmp_path: Path) -> None:
    marker = tmp_path.name + "-tmp-marker"
    # The test's home lives under the host's /tmp: its bind shows as the one entry there.
    real = Path(os.path.realpath(box.home))
    bound = {real.parts[2]} if real.parts[1] == "tmp" else set()
    r = box.run(f"touch /tmp/{marker} && ls -A /tmp")
    assert r.exit_code == 0 and set(r.stdout.split()) == {marker, *bound}
    assert not Path("/tmp", marker).exists()
    assert set(box.run("ls -A /tmp").stdout.split()) == bound


def test_remounting_usr_read_write_or_unmounting_fails(box: Box) -> None:
    r = box.run(
        "mount -o remount,rw /usr; mount -o remount,rw,bind /usr; umount ~/.ssh;"
        " umount -l /tmp; umount /proc; mount -t tmpfs none ~/.ssh;"
        " touch /usr/pwned && echo USR-WRITABLE; cat ~/.ssh/id_rsa; ls /tmp >/dev/null && echo OK"
    )
    assert "USR-WRITABLE" not in r.stdout
    assert box.marker not in r.stdout + r.stderr
    assert r.stdout.strip() == "OK"  # /tmp still mounted: the umount did nothing
    assert "Operation not permitted" in r.stderr or "must be superuser" in r.stderr


def test_mount_syscalls_are_denied_by_seccomp(box: Box) -> None:
    """The arguments are bad on purpose: without the filter the kernel would answer EFAULT or
    EINVAL, so EPERM/ENOSYS shows the seccomp filter is loaded, not only the missing caps."""
    code = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def err(r):
    return "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]
print("mount", err(libc.syscall(165, 1, 1, 1, 0, 0)))
print("umount2", err(libc.umount2(b"/tmp", 0xFF)))
print("chroot", err(libc.syscall(161, 1)))
print("pivot_root", err(libc.syscall(155, b"/tmp", b"/tmp")))
print("open_tree", err(libc.syscall(428, -100, b"/usr", 0)))
print("fsopen", err(libc.syscall(430, b"tmpfs", 0)))
print("mount_setattr", err(libc.syscall(442, -1, 1, 0, 0, 0)))
"""
    r = box.run(python_in_sandbox(code))
    assert r.exit_code == 0, r.stderr
    assert dict(line.split() for line in r.stdout.splitlines()) == {
        "mount": "EPERM",
        "umount2": "EPERM",
        "chroot": "EPERM",
        "pivot_root": "EPERM",
        "open_tree": "ENOSYS",
        "fsopen": "ENOSYS",
        "mount_setattr": "ENOSYS",
    }


def test_no_nested_user_namespace(box: Box) -> None:
    r = box.run("unshare -Ur id -u; unshare -U true && echo NESTED; unshare -m true && echo MNT")
    assert "NESTED" not in r.stdout and "MNT" not in r.stdout
    assert r.stdout.strip() == ""
    assert "Operation not permitted" in r.stderr


def test_clone_with_namespace_flags_and_x32_syscalls_are_refused(box: Box) -> None:
    code = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def err(r):
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
# clone(CLONE_NEWUSER | SIGCHLD): the filter answers before the kernel would fork.
print("clone-newuser", err(libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)))
print("clone-newnet", err(libc.syscall(56, 0x40000000 | 17, 0, 0, 0, 0)))
print("clone3", err(libc.syscall(435, 0, 0)))
print("unshare", err(libc.unshare(0x10000000)))
print("setns", err(libc.setns(0, 0)))
print("io_uring_setup", err(libc.syscall(425, 1, 0)))
print("keyctl", err(libc.syscall(250, 0, 0, 0, 0, 0)))
print("ptrace-traceme", err(libc.ptrace(0, 0, 0, 0)))
print("perf_event_open", err(libc.syscall(298, 0, 0, -1, -1, 0)))
print("personality", err(libc.personality(0x0008)))
print("socket-packet", err(libc.socket(17, 3, 0)))
print("socket-unix", err(libc.socket(1, 1, 0)))
import sys; sys.stdout.flush(); os._exit(0)  # a child, had clone() worked, must not print
"""
    r = box.run(python_in_sandbox(code))
    assert r.exit_code == 0, r.stderr
    assert dict(line.split() for line in r.stdout.splitlines()) == {
        "clone-newuser": "EPERM",
        "clone-newnet": "EPERM",
        "clone3": "ENOSYS",
        "unshare": "EPERM",
        "setns": "EPERM",
        "io_uring_setup": "ENOSYS",
        "keyctl": "EPERM",
        "ptrace-traceme": "EPERM",
        "perf_event_open": "EPERM",
        "personality": "EPERM",
        "socket-packet": "EAFNOSUPPORT",
        "socket-unix": "EPERM",  # test_escape_memory.py says why
    }
    # The x32 ABI (syscall number | 0x40000000) is not a way around the filter: the
    # thread is killed (SIGSYS) by the bad-arch action, or the kernel lacks x32 (ENOSYS).
    x32 = box.run(
        python_in_sandbox(
            "import ctypes, errno; libc = ctypes.CDLL(None, use_errno=True);"
            " r = libc.syscall(0x40000000 | 272, 0x10000000);"
            " print(r, errno.errorcode.get(ctypes.get_errno()))"
        )
    )
    assert x32.exit_code == 128 + 31 or x32.stdout.split() == ["-1", "ENOSYS"], x32


def test_only_null_zero_and_urandom_devices(box: Box) -> None:
    # stat each entry (find trusts readdir's d_type, which says "file" for a bind mount point).
    r = box.run(
        'for f in /dev/* /dev/.[!.]*; do if [ ! -L "$f" ] && { [ -c "$f" ] || [ -b "$f" ]; };'
        ' then echo "$f"; fi; done;'
        " echo x > /dev/null && head -c 4 /dev/zero | wc -c"
    )
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.split()
    assert sorted(lines[:-1]) == ["/dev/null", "/dev/urandom", "/dev/zero"]
    assert lines[-1] == "4"
    r = box.run("ls /dev/tty /dev/sda /dev/mem /dev/kmsg /dev/shm 2>&1; touch /dev/x")
    assert r.stdout.count("No such file") == 5
    assert "Read-only file system" in r.stderr


def test_userfaultfd_bpf_kcmp_and_file_handles_are_refused(box: Box) -> None:
    """x86-64 numbers. userfaultfd(UFFD_USER_MODE_ONLY) returned an fd before this filter;
    the file-handle calls are how "shocker" opened files outside a container's mounts."""
    code = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def err(r):
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
print("userfaultfd-user-mode", err(libc.syscall(323, 1 | 0o2000000)))
print("userfaultfd", err(libc.syscall(323, 0o2000000)))
print("bpf", err(libc.syscall(321, 0, 0, 0)))
print("kcmp", err(libc.syscall(312, os.getpid(), os.getpid(), 0, 0, 0)))
buf = ctypes.create_string_buffer(136)
ctypes.memmove(buf, (128).to_bytes(4, "little"), 4)
mount_id = ctypes.c_int()
print("name_to_handle_at", err(libc.syscall(303, -100, b"/usr", buf, ctypes.byref(mount_id), 0)))
print("open_by_handle_at", err(libc.syscall(304, -100, buf, 0)))
"""
    r = box.run(python_in_sandbox(code))
    assert r.exit_code == 0, r.stderr
    assert dict(line.split() for line in r.stdout.splitlines()) == {
        "userfaultfd-user-mode": "EPERM",
        "userfaultfd": "EPERM",
        "bpf": "EPERM",
        "kcmp": "EPERM",
        "name_to_handle_at": "EPERM",
        "open_by_handle_at": "EPERM",
    }
