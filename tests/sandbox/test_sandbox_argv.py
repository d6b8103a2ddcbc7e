"""The bwrap argv, pinned whole (order included) for a Debian-like and an Arch-like host.

Pure: nothing runs here but bash reading a shown argv back. The escape suite
(test_escape_*.py) runs the same builder for real.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from routines.spec.never import never_paths
from sandbox import Limits, ShellPolicy, UnsafeValue, build_argv, routine_policy
from sandbox.argv import argv_line, build_exec_argv, prelude, script
from sandbox.host import Host, MaskTarget, PathKind, SystemDir
from tests.sandbox.sandbox_testkit import read_back

HOME = "/home/ana"
WORKSPACE = "/home/ana/.vinos/routines/workspace/day-brief"
SCRATCH = "/home/ana/.vinos/routines/scratch/day-brief/r1"
CHROMIUM = f"{HOME}/.config/chromium"
# home = ["~/.config", "~/.gitconfig"], the second a dotfiles link.
DECLARED = ((f"{HOME}/.config", f"{HOME}/.config"), (f"{HOME}/dotfiles/git", f"{HOME}/.gitconfig"))
FDS = (8, 9)
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
    network: bool | tuple[str, ...] = False, masks: tuple[str, ...] = (CHROMIUM,), **kw: object
) -> ShellPolicy:
    return ShellPolicy(
        ro_binds=(),
        rw_binds=(WORKSPACE, SCRATCH),
        masks=masks,
        cwd=SCRATCH,
        network=network,
        env=ENV,
        declared=DECLARED,
        dirs=(HOME,),
        **kw,  # type: ignore[arg-type]
    )


def host(system: tuple[SystemDir, ...], *masks: MaskTarget) -> Host:
    return Host(system=system, masks=masks, bwrap="/usr/bin/bwrap", bash="/usr/bin/bash")


SSH = MaskTarget(CHROMIUM, CHROMIUM, PathKind.DIR)

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
    # $HOME: an empty dir on the read-only root, then only the declared paths, read-only.
    *("--dir", HOME),
    *("--ro-bind-try", f"{HOME}/.config", f"{HOME}/.config"),
    *("--ro-bind-try", f"{HOME}/dotfiles/git", f"{HOME}/.gitconfig"),
    # A never-path below a declared one: hidden anyway.
    *("--tmpfs", CHROMIUM),
    # Writable: from O_NOFOLLOW directory fds, never by path.
    *("--bind-fd", "8", WORKSPACE),
    *("--bind-fd", "9", SCRATCH),
    *("--remount-ro", CHROMIUM),
    *("--remount-ro", "/"),
]
# One bash: the limits' line, then the command as the last line of the same -c text.
SCRIPT = "ulimit -c 0 -f 65536 -n 256 -v 2097152 -u 256 || exit 126\ngcalcli agenda today"
TAIL = [
    *("--chdir", SCRATCH),
    *("--seccomp", "7"),
    "--",
    *("/usr/bin/bash", "-c", SCRIPT),
]


def test_debian_like_host_network_off() -> None:
    argv = build_argv(policy(), host(DEBIAN, SSH), 7, "gcalcli agenda today", rw_fds=FDS)
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
    argv = build_argv(policy(), host(ARCH, SSH), 7, "gcalcli agenda today", rw_fds=FDS)
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


def test_masks_dirs_files_missing_outside_the_binds_and_through_a_link() -> None:
    masks = (
        CHROMIUM,
        f"{HOME}/.config/op",
        f"{HOME}/.gone",
        "/opt/secret",
        f"{HOME}/.ssh",
        f"{HOME}/dotfiles/git/creds",
    )
    h = host(
        DEBIAN,
        SSH,
        MaskTarget(f"{HOME}/.config/op", f"{HOME}/.config/op", PathKind.FILE),
        MaskTarget(f"{HOME}/.gone", f"{HOME}/.gone", PathKind.MISSING),
        MaskTarget("/opt/secret", "/opt/secret", PathKind.DIR),  # not visible anyway
        MaskTarget(f"{HOME}/.ssh", f"{HOME}/.ssh", PathKind.DIR),  # not declared: not there
        # Below a declared link: hidden where the sandbox sees it, ~/.gitconfig/creds.
        MaskTarget(f"{HOME}/dotfiles/git/creds", f"{HOME}/dotfiles/git/creds", PathKind.FILE),
    )
    argv = build_argv(policy(masks=masks), h, 7, "true")
    start = argv.index("--dir")
    assert argv[start : argv.index("--chdir")] == [
        *("--dir", HOME),
        *("--ro-bind-try", f"{HOME}/.config", f"{HOME}/.config"),
        *("--ro-bind-try", f"{HOME}/dotfiles/git", f"{HOME}/.gitconfig"),
        *("--tmpfs", CHROMIUM),
        *("--ro-bind", "/dev/null", f"{HOME}/.config/op"),
        *("--ro-bind", "/dev/null", f"{HOME}/.gitconfig/creds"),
        *("--bind", WORKSPACE, WORKSPACE),
        *("--bind", SCRATCH, SCRATCH),
        *("--remount-ro", CHROMIUM),
        *("--remount-ro", "/"),
    ]


def test_an_overlaid_writable_dir_is_bound_from_its_overlay() -> None:
    """sandbox/overlay.py: the workspace shows the overlay the holder mounted (a path in the
    holder's namespace); the scratch dir, not overlaid here, keeps its fd."""
    overlays = {WORKSPACE: "/tmp/vinos-overlay-x/m/0"}
    argv = build_argv(
        policy(), host(DEBIAN, SSH), 7, "gcalcli agenda today", rw_fds=FDS, overlays=overlays
    )
    at = TREE.index("--bind-fd")
    tree = [*TREE[:at], *("--bind", "/tmp/vinos-overlay-x/m/0", WORKSPACE), *TREE[at + 3 :]]
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
        *tree,
        *TAIL,
    ]


def test_one_fd_per_writable_bind() -> None:
    with pytest.raises(ValueError, match="one directory fd"):
        build_argv(policy(), host(DEBIAN, SSH), 7, "true", rw_fds=(8,))


def test_a_host_not_probed_for_the_policy_masks_fails_closed() -> None:
    with pytest.raises(ValueError, match="not probed"):
        build_argv(policy(), host(DEBIAN), 7, "true")


@pytest.mark.parametrize("bad", ["/home/ana/a\nb", "/home/ana/a\0b", "relative/x", "/home/../etc"])
def test_a_bad_path_is_refused(bad: str) -> None:
    p = ShellPolicy(ro_binds=(bad,), rw_binds=(SCRATCH,), masks=(), cwd=SCRATCH, env=ENV)
    with pytest.raises(UnsafeValue):
        build_argv(p, host(DEBIAN), 7, "true")
    p = ShellPolicy(ro_binds=(), rw_binds=(SCRATCH,), masks=(), cwd=bad, env=ENV)
    with pytest.raises(UnsafeValue):
        build_argv(p, host(DEBIAN), 7, "true")


@pytest.mark.parametrize("bad", ["true\n", "true\0", "a\rb"])
def test_a_command_with_a_newline_or_nul_is_refused(bad: str) -> None:
    with pytest.raises(UnsafeValue):
        build_argv(policy(), host(DEBIAN, SSH), 7, bad)


def test_without_a_command_the_argv_ends_at_the_separator() -> None:
    argv = build_argv(policy(), host(DEBIAN, SSH), 7)
    assert argv[-3:] == ["--seccomp", "7", "--"]


def test_the_prelude_sets_every_limit_on_a_line_before_the_command() -> None:
    limits = Limits(file_size_mb=1, open_files=2, address_space_mb=3, processes=4)
    assert prelude(limits) == "ulimit -c 0 -f 1024 -n 2 -v 3072 -u 4 || exit 126"
    assert script(limits, "a; b") == f"{prelude(limits)}\na; b"
    with pytest.raises(UnsafeValue):
        script(limits, "true\nulimit -n 4096")  # the command is one line, the last


def test_an_argv_is_shown_on_one_line_bash_reads_back() -> None:
    command = r"""printf '%s\n' "$HOME" \$x `id`; echo 'it''s' && ls"""
    argv = build_argv(policy(), host(DEBIAN, SSH), 7, command, rw_fds=FDS)
    line = argv_line(argv)
    # The command cannot start a line of its own in a log: the text's newline is written \n.
    assert line.endswith(
        r"""/usr/bin/bash -c $'ulimit -c 0 -f 65536 -n 256 -v 2097152 -u 256 || exit 126\n"""
        r"""printf \'%s\\n\' "$HOME" \\$x `id`; echo \'it\'\'s\' && ls'"""
    )
    assert "\n" not in line and read_back(line) == argv
    assert argv_line(["a b", "c"]) == "'a b' c"  # shlex's quoting for every other word


def test_an_mcp_server_gets_the_same_limits_then_its_own_argv() -> None:
    p = policy()
    argv = build_exec_argv(p, host(DEBIAN, SSH), 7, ["server", "--flag", "two words"])
    assert argv[: len(argv) - 7] == build_argv(p, host(DEBIAN, SSH), 7)
    assert argv[-7:] == [
        *("/usr/bin/bash", "-c", f'{prelude(p.limits)}; exec "$@"', "vinos-sandbox"),
        *("server", "--flag", "two words"),
    ]


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Limits(processes=0)


# --- routine_policy: the allowlist policy for one routine ---


def _dirs(tmp_path: Path) -> dict[str, Path]:
    home = tmp_path / "home"
    workspace = home / ".vinos/routines/workspace/r1"
    scratch = home / ".vinos/routines/scratch/r1/run"
    return {"home": home, "workspace": workspace, "scratch_dir": scratch}


def test_routine_policy_allowlist_masks_and_environment(tmp_path: Path) -> None:
    kw = _dirs(tmp_path)
    (kw["home"] / ".config/chromium").mkdir(parents=True)
    env = {"PATH": "/usr/bin", "TERM": "xterm", "LANG": "C.UTF-8", "SECRET": "x"}
    real = os.path.realpath(kw["home"])
    never = never_paths(real, real + "/.vinos", ("~/.config/extra",))
    p = routine_policy(
        network=False,
        declared=("~/.config", "~/notes"),
        never=never,
        environ=env,
        **kw,  # type: ignore[arg-type]
    )
    assert p.ro_binds == ()
    assert p.declared == ((f"{real}/.config",) * 2, (f"{real}/notes",) * 2)
    assert p.dirs == (real,)
    assert p.rw_binds == (
        f"{real}/.vinos/routines/workspace/r1",
        f"{real}/.vinos/routines/scratch/r1/run",
    )
    assert p.cwd == p.rw_binds[1]
    # Only the never-paths a declared path could show: those below ~/.config, in the
    # catalog's order, config.toml's addition last.
    below = [n for n in never if n.startswith(f"{real}/.config/")]
    assert f"{real}/.config/gh" in below and below[-1] == f"{real}/.config/extra"
    assert list(p.masks) == below
    assert dict(p.env) == {"HOME": real, "PATH": "/usr/bin", "TERM": "xterm", "LANG": "C.UTF-8"}
    assert not p.network


@pytest.mark.parametrize("entry", ["~/.ssh", "~/.ssh/id_rsa", "~/.vinos/routines/workspace/r2"])
def test_routine_policy_refuses_a_declared_never_path(tmp_path: Path, entry: str) -> None:
    kw = _dirs(tmp_path)
    real = os.path.realpath(kw["home"])
    with pytest.raises(UnsafeValue, match="never-list"):
        routine_policy(
            network=False,
            declared=(entry,),
            never=never_paths(real, real + "/.vinos"),
            **kw,  # type: ignore[arg-type]
        )


def test_routine_policy_refuses_a_declared_link_into_a_never_path(tmp_path: Path) -> None:
    kw = _dirs(tmp_path)
    (kw["home"] / ".ssh").mkdir(parents=True)
    (kw["home"] / "notes").symlink_to(kw["home"] / ".ssh")
    real = os.path.realpath(kw["home"])
    with pytest.raises(UnsafeValue, match="never-list"):
        routine_policy(
            network=False,
            declared=("~/notes",),
            never=never_paths(real, real + "/.vinos"),
            **kw,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize("entry", ["~", "~/a/../.ssh", "/etc", "relative", "~/a\nb"])
def test_routine_policy_refuses_bad_declarations(tmp_path: Path, entry: str) -> None:
    with pytest.raises(UnsafeValue):
        routine_policy(network=False, declared=(entry,), **_dirs(tmp_path))  # type: ignore[arg-type]


def test_routine_policy_never_passes_a_secret_even_with_network(tmp_path: Path) -> None:
    kw = _dirs(tmp_path)
    for d in ("workspace", "scratch_dir"):
        kw[d].mkdir(parents=True)
    environ = {"ANTHROPIC_API_KEY": "sk-ant-1", "AWS_SECRET_ACCESS_KEY": "x"}
    on = routine_policy(network=True, environ=environ, **kw)  # type: ignore[arg-type]
    assert [name for name, _ in on.env] == ["HOME", "PATH", "TERM", "LANG"]
    assert dict(on.env)["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    argv = build_argv(on, Host.probe(on), 7, "true")
    assert not any("sk-ant-1" in a for a in argv)


def test_routine_policy_resolves_a_symlinked_home_but_not_a_linked_workspace(
    tmp_path: Path,
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    p = routine_policy(
        home=tmp_path / "link",
        workspace=tmp_path / "link/w",
        scratch_dir=tmp_path / "link/s",
        network=False,
    )
    real = os.path.realpath(tmp_path / "real")
    assert p.dirs == (real,)
    assert dict(p.env)["HOME"] == real
    # The last component is kept as given: a link there fails the runner's O_NOFOLLOW open.
    (tmp_path / "real/target").mkdir()
    (tmp_path / "real/w2").symlink_to(tmp_path / "real/target")
    p = routine_policy(
        home=tmp_path / "link",
        workspace=tmp_path / "link/w2",
        scratch_dir=tmp_path / "link/s",
        network=False,
    )
    assert p.rw_binds[0] == f"{real}/w2"


def test_routine_policy_refuses_a_writable_dir_holding_home_or_system_dirs(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    for workspace in (tmp_path, Path("/usr"), home):
        with pytest.raises(UnsafeValue, match="cannot be writable"):
            routine_policy(home=home, workspace=workspace, scratch_dir=home / "s", network=False)
    with pytest.raises(UnsafeValue, match="HOME is /"):
        routine_policy(home=Path("/"), workspace=home, scratch_dir=home, network=False)


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


# --- credential grants and credential-named files in the policy ---

NAMES = ("credentials*", "*token*", "*.pem")  # routines/spec/never.py NAME_PATTERNS


def test_a_grant_is_bound_read_only_after_the_declared_paths_and_never_masked(
    tmp_path: Path,
) -> None:
    kw = _dirs(tmp_path)
    for rel in ("proj/a.md", "proj/.gh_token", "proj/sub/credentials.json", "proj/ca.PEM"):
        (kw["home"] / rel).parent.mkdir(parents=True, exist_ok=True)
        (kw["home"] / rel).write_text("x")
    (kw["home"] / "proj/tokens").mkdir()  # a folder is masked whole, not walked into
    (kw["home"] / "proj/tokens/inner.pem").write_text("x")
    real = os.path.realpath(kw["home"])
    never = never_paths(real, real + "/.vinos")
    p = routine_policy(
        network=("api.github.com",),
        declared=("~/proj",),
        never=never,
        credentials=("~/.config/gh", "~/proj/sub/credentials.json"),
        never_names=NAMES,
        **kw,  # type: ignore[arg-type]
    )
    assert p.declared == (
        (f"{real}/proj",) * 2,
        (f"{real}/.config/gh",) * 2,
        (f"{real}/proj/sub/credentials.json",) * 2,
    )
    # The credential-named files below ~/proj, but not the one granted.
    assert p.masks == (f"{real}/proj/.gh_token", f"{real}/proj/ca.PEM", f"{real}/proj/tokens")
    assert p.network == ("api.github.com",)


def test_a_grant_cannot_be_all_of_home_or_climb_out(tmp_path: Path) -> None:
    for entry in ("~", "~/a/../../etc", "/etc/shadow"):
        with pytest.raises(UnsafeValue, match="credential"):
            routine_policy(network=False, credentials=(entry,), **_dirs(tmp_path))  # type: ignore[arg-type]


def test_a_declared_folder_too_big_to_check_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the walk's cap, the policy fails closed: never a folder shown unchecked."""
    import sandbox.policy

    kw = _dirs(tmp_path)
    for i in range(12):
        (kw["home"] / f"big/f{i}").mkdir(parents=True)
    monkeypatch.setattr(sandbox.policy, "MAX_WALK", 10)
    with pytest.raises(UnsafeValue, match="more than 10 files and folders"):
        routine_policy(
            network=False,
            declared=("~/big",),
            never_names=NAMES,
            **kw,  # type: ignore[arg-type]
        )
