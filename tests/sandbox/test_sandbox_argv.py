"""The bwrap argv, pinned whole (order included) for a Debian-like and an Arch-like host.

Pure: nothing runs here. The escape suite (test_escape_*.py) runs the same builder for real.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import DEFAULT_MASKS, Limits, ShellPolicy, UnsafeValue, build_argv, routine_policy
from sandbox.argv import prelude
from sandbox.host import Host, MaskTarget, PathKind, SystemDir

HOME = "/home/ana"
STATE = "/home/ana/.vinos/routines/state/day-brief"
SCRATCH = f"{STATE}/.scratch/r1"
ENV = (("HOME", HOME), ("PATH", "/usr/bin:/bin"), ("TERM", "xterm"), ("LANG", "en_US.UTF-8"))

DEBIAN = (
    SystemDir("/bin", PathKind.DIR),
    SystemDir("/sbin", PathKind.DIR),
    SystemDir("/lib", PathKind.DIR),
    SystemDir("/lib64", PathKind.DIR),
)
ARCH = (
    SystemDir("/bin", PathKind.SYMLINK, "usr/bin"),
    SystemDir("/sbin", PathKind.SYMLINK, "usr/bin"),
    SystemDir("/lib", PathKind.SYMLINK, "usr/lib"),
    SystemDir("/lib64", PathKind.SYMLINK, "usr/lib"),
)
NO_LIB64 = (*DEBIAN[:3], SystemDir("/lib64", PathKind.MISSING))


def policy(
    network: bool = False, masks: tuple[str, ...] = (f"{HOME}/.ssh",), **kw: object
) -> ShellPolicy:
    return ShellPolicy(
        ro_binds=(HOME,),
        rw_binds=(STATE, SCRATCH),
        masks=masks,
        cwd=SCRATCH,
        network=network,
        env=ENV,
        **kw,  # type: ignore[arg-type]
    )


def host(system: tuple[SystemDir, ...], *masks: MaskTarget) -> Host:
    return Host(system=system, masks=masks, bwrap="/usr/bin/bwrap", bash="/usr/bin/bash")


SSH = MaskTarget(f"{HOME}/.ssh", f"{HOME}/.ssh", PathKind.DIR)

HEAD = [
    "/usr/bin/bwrap",
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
]
SAFETY = [
    "--disable-userns",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
    "--clearenv",
    *("--setenv", "HOME", HOME),
    *("--setenv", "PATH", "/usr/bin:/bin"),
    *("--setenv", "TERM", "xterm"),
    *("--setenv", "LANG", "en_US.UTF-8"),
]
DEV_PROC_TMP = [
    *("--ro-bind", "/etc", "/etc"),
    *("--proc", "/proc"),
    *("--tmpfs", "/dev"),
    *("--dev-bind", "/dev/null", "/dev/null"),
    *("--dev-bind", "/dev/zero", "/dev/zero"),
    *("--dev-bind", "/dev/urandom", "/dev/urandom"),
    *("--symlink", "/proc/self/fd/0", "/dev/stdin"),
    *("--symlink", "/proc/self/fd/1", "/dev/stdout"),
    *("--symlink", "/proc/self/fd/2", "/dev/stderr"),
    *("--symlink", "/proc/self/fd", "/dev/fd"),
    *("--remount-ro", "/dev"),
    *("--size", str(64 * 1024 * 1024), "--tmpfs", "/tmp"),
]
TREE = [
    *("--ro-bind", HOME, HOME),
    *("--tmpfs", f"{HOME}/.ssh"),
    *("--bind", STATE, STATE),
    *("--bind", SCRATCH, SCRATCH),
    *("--remount-ro", f"{HOME}/.ssh"),
]
PRELUDE = 'ulimit -c 0 -f 65536 -n 256 -v 2097152 -u 256 || exit 126; exec /usr/bin/bash -c "$1"'
TAIL = [
    *("--chdir", SCRATCH),
    *("--seccomp", "7"),
    "--",
    *("/usr/bin/bash", "-c", PRELUDE, "vinos-sandbox", "gcalcli agenda today"),
]


def test_debian_like_host_network_off() -> None:
    argv = build_argv(policy(), host(DEBIAN, SSH), 7, "gcalcli agenda today")
    assert argv == [
        *HEAD,
        "--unshare-net",
        *SAFETY,
        *("--ro-bind", "/usr", "/usr"),
        *("--ro-bind", "/bin", "/bin"),
        *("--ro-bind", "/sbin", "/sbin"),
        *("--ro-bind", "/lib", "/lib"),
        *("--ro-bind", "/lib64", "/lib64"),
        *DEV_PROC_TMP,
        *TREE,
        *TAIL,
    ]


def test_arch_like_host_recreates_the_usr_symlinks() -> None:
    argv = build_argv(policy(), host(ARCH, SSH), 7, "gcalcli agenda today")
    assert argv == [
        *HEAD,
        "--unshare-net",
        *SAFETY,
        *("--ro-bind", "/usr", "/usr"),
        *("--symlink", "usr/bin", "/bin"),
        *("--symlink", "usr/bin", "/sbin"),
        *("--symlink", "usr/lib", "/lib"),
        *("--symlink", "usr/lib", "/lib64"),
        *DEV_PROC_TMP,
        *TREE,
        *TAIL,
    ]


def test_network_on_leaves_the_namespace_to_the_holder_and_adds_only_the_proxy() -> None:
    """Off: bwrap's own network namespace. On (any host, or a host list): bwrap is started
    inside the holder's fresh namespace (sandbox/netns.py), and gains only the proxy variables."""
    off = build_argv(policy(), host(ARCH, SSH), 7, "gcalcli agenda today")
    proxy = [
        arg
        for name in (
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        )
        for arg in ("--setenv", name, "http://127.0.0.1:3128")
    ]
    assert "--unshare-net" in off and "http://127.0.0.1:3128" not in off
    for network in (True, ("api.github.com",)):
        on = build_argv(policy(network=network), host(ARCH, SSH), 7, "gcalcli agenda today")
        at = off.index("--clearenv") + 1 + len(policy().env) * 3
        expected = [a for a in off if a != "--unshare-net"]
        expected[at - 1 : at - 1] = proxy
        assert on == expected


def test_a_missing_system_dir_is_skipped() -> None:
    argv = build_argv(policy(), host(NO_LIB64, SSH), 7, "true")
    assert "/lib64" not in argv
    assert argv.count("/lib") == 2


def test_extra_masks_dirs_files_missing_and_outside_the_binds() -> None:
    masks = (f"{HOME}/.ssh", f"{HOME}/.netrc", f"{HOME}/.gone", "/opt/secret", f"{HOME}/link")
    h = host(
        DEBIAN,
        SSH,
        MaskTarget(f"{HOME}/.netrc", f"{HOME}/.netrc", PathKind.FILE),
        MaskTarget(f"{HOME}/.gone", f"{HOME}/.gone", PathKind.MISSING),
        MaskTarget("/opt/secret", "/opt/secret", PathKind.DIR),  # not visible anyway
        # A symlinked mask hides its real target.
        MaskTarget(f"{HOME}/link", f"{HOME}/dotfiles/secret", PathKind.DIR),
    )
    argv = build_argv(policy(masks=masks), h, 7, "true")
    start = argv.index("--ro-bind", argv.index("/tmp"))
    assert argv[start : argv.index("--chdir")] == [
        *("--ro-bind", HOME, HOME),
        *("--tmpfs", f"{HOME}/.ssh"),
        *("--ro-bind", "/dev/null", f"{HOME}/.netrc"),
        *("--tmpfs", f"{HOME}/dotfiles/secret"),
        *("--bind", STATE, STATE),
        *("--bind", SCRATCH, SCRATCH),
        *("--remount-ro", f"{HOME}/.ssh"),
        *("--remount-ro", f"{HOME}/dotfiles/secret"),
    ]


def test_a_mask_above_a_writable_dir_is_mounted_first() -> None:
    """Hiding the other routines' state dirs must not hide this routine's own."""
    root = f"{HOME}/.vinos/routines/state"
    h = host(DEBIAN, MaskTarget(root, root, PathKind.DIR))
    argv = build_argv(policy(masks=(root,)), h, 7, "true")
    tree = argv[argv.index("/tmp") + 1 : argv.index("--chdir")]
    assert tree == [
        *("--ro-bind", HOME, HOME),
        *("--tmpfs", root),
        *("--bind", STATE, STATE),
        *("--bind", SCRATCH, SCRATCH),
        *("--remount-ro", root),
    ]


def test_a_host_not_probed_for_the_policy_masks_fails_closed() -> None:
    with pytest.raises(ValueError, match="not probed"):
        build_argv(policy(), host(DEBIAN), 7, "true")


@pytest.mark.parametrize("bad", ["/home/ana/a\nb", "/home/ana/a\0b", "relative/x", "/home/../etc"])
def test_a_bad_path_is_refused(bad: str) -> None:
    p = ShellPolicy(ro_binds=(bad,), rw_binds=(SCRATCH,), masks=(), cwd=SCRATCH, env=ENV)
    with pytest.raises(UnsafeValue):
        build_argv(p, host(DEBIAN), 7, "true")
    p = ShellPolicy(ro_binds=(HOME,), rw_binds=(SCRATCH,), masks=(), cwd=bad, env=ENV)
    with pytest.raises(UnsafeValue):
        build_argv(p, host(DEBIAN), 7, "true")


@pytest.mark.parametrize("bad", ["true\n", "true\0", "a\rb"])
def test_a_command_with_a_newline_or_nul_is_refused(bad: str) -> None:
    with pytest.raises(UnsafeValue):
        build_argv(policy(), host(DEBIAN, SSH), 7, bad)


def test_without_a_command_the_argv_ends_at_the_separator() -> None:
    argv = build_argv(policy(), host(DEBIAN, SSH), 7)
    assert argv[-3:] == ["--seccomp", "7", "--"]


def test_the_prelude_sets_every_limit_then_execs_the_command_as_an_argument() -> None:
    text = prelude(Limits(file_size_mb=1, open_files=2, address_space_mb=3, processes=4), "/b")
    assert text == 'ulimit -c 0 -f 1024 -n 2 -v 3072 -u 4 || exit 126; exec /b -c "$1"'


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Limits(processes=0)


# --- routine_policy: DESIGN.md's policy for one routine ---


def test_routine_policy_binds_masks_and_environment(tmp_path: Path) -> None:
    home = tmp_path / "home"
    state = home / ".vinos/routines/state/r1"
    scratch = state / ".scratch/run"
    scratch.mkdir(parents=True)
    env = {"PATH": "/usr/bin", "TERM": "xterm", "LANG": "C.UTF-8", "SECRET": "x"}
    p = routine_policy(
        home=home,
        state_dir=state,
        scratch_dir=scratch,
        network=False,
        extra_masks=("~/.config/rclone", "/opt/other"),
        environ=env,
    )
    real = os.path.realpath(home)
    assert p.ro_binds == (real,)
    assert p.rw_binds == (os.path.realpath(state), os.path.realpath(scratch))
    assert p.cwd == os.path.realpath(scratch)
    expected = [real + m[1:] for m in DEFAULT_MASKS]
    expected += [f"{real}/.config/rclone", "/opt/other", os.path.realpath(state.parent)]
    assert list(p.masks) == expected
    assert dict(p.env) == {"HOME": real, "PATH": "/usr/bin", "TERM": "xterm", "LANG": "C.UTF-8"}
    assert not p.network


def test_routine_policy_never_passes_a_secret_even_with_network(tmp_path: Path) -> None:
    kw = {"home": tmp_path, "state_dir": tmp_path / "s", "scratch_dir": tmp_path / "s/x"}
    environ = {"ANTHROPIC_API_KEY": "sk-ant-1", "AWS_SECRET_ACCESS_KEY": "x"}
    on = routine_policy(network=True, environ=environ, **kw)  # type: ignore[arg-type]
    assert [name for name, _ in on.env] == ["HOME", "PATH", "TERM", "LANG"]
    assert dict(on.env)["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    argv = build_argv(on, Host.probe(on), 7, "true")
    assert not any("sk-ant-1" in a for a in argv)


def test_routine_policy_resolves_a_symlinked_home(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    p = routine_policy(
        home=tmp_path / "link",
        state_dir=tmp_path / "link/s",
        scratch_dir=tmp_path / "link/s/x",
        network=False,
    )
    real = os.path.realpath(tmp_path / "real")
    assert p.ro_binds == (real,)
    assert f"{real}/.ssh" in p.masks


def test_routine_policy_refuses_a_writable_dir_holding_home_or_system_dirs(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    for state in (tmp_path, Path("/"), Path("/usr"), home):
        with pytest.raises(UnsafeValue, match="cannot be writable"):
            routine_policy(home=home, state_dir=state, scratch_dir=home / "s", network=False)
    with pytest.raises(UnsafeValue, match="HOME is /"):
        routine_policy(home=Path("/"), state_dir=home, scratch_dir=home, network=False)


@pytest.mark.parametrize("mask", ["~", "relative/dir", "/a\nb"])
def test_routine_policy_refuses_bad_masks(tmp_path: Path, mask: str) -> None:
    with pytest.raises(UnsafeValue):
        routine_policy(
            home=tmp_path,
            state_dir=tmp_path / "s",
            scratch_dir=tmp_path / "s/x",
            network=False,
            extra_masks=(mask,),
        )


def test_host_probe_reads_this_machine(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    p = ShellPolicy(
        ro_binds=(str(tmp_path),),
        rw_binds=(),
        masks=tuple(str(tmp_path / n) for n in ("dir", "file", "link", "gone")),
        cwd="/",
    )
    h = Host.probe(p)
    real = os.path.realpath(tmp_path)
    assert [(m.real, m.kind) for m in h.masks] == [
        (f"{real}/dir", PathKind.DIR),
        (f"{real}/file", PathKind.FILE),
        (f"{real}/dir", PathKind.DIR),
        (f"{real}/gone", PathKind.MISSING),
    ]
    for d in h.system:
        expected = (
            PathKind.SYMLINK
            if os.path.islink(d.path)
            else PathKind.DIR
            if os.path.isdir(d.path)
            else PathKind.MISSING
        )
        assert d.kind is expected
        if d.kind is PathKind.SYMLINK:
            assert d.target == os.readlink(d.path)
