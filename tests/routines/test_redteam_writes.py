"""Red-team findings on write folders (docs/redteam.md, 39 to 42): a never-list entry below a
write folder moved out of its mask by a rename (real bwrap), a write folder where the
person's own programs start from, names that are not plain text, and a repository the
model's shell makes or changes in a write folder (real bwrap, real git)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import sandbox
from routines.spec import Routine
from routines.spec.checks import RoutineInvalid
from routines.spec.config import SandboxSettings
from routines.spec.loader import load_file
from routines.spec.paths import paths
from sandbox import UnsafeValue, overlay
from sandbox.copyback import Guard
from tests.helpers import AGENT, write
from worker.shellpolicy import shell_policy_for
from worker.writetool import Target, target

HOLDS = "vinos-routine's own secrets and state"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / "notes/private").mkdir(parents=True)
    (home / "notes/private/diary.md").write_text("the secret diary\n")
    monkeypatch.setenv("HOME", str(home))
    return home


def _text(write_entry: str, permissions: str = "files") -> str:
    text = AGENT.replace(
        'system = "Write the brief."\n',
        f'system = "Write the brief."\nwrite = ["{write_entry}"]\n',
    )
    return f'[routine]\npermissions = "{permissions}"\n\n' + text


def _routine(write_entry: str) -> Routine:
    return load_file(write(paths().routines_dir, "writer", _text(write_entry)))


def _problems(write_entry: str) -> list[str]:
    with pytest.raises(RoutineInvalid) as info:
        _routine(write_entry)
    return [str(p) for p in info.value.problems]


def test_a_never_entry_below_a_write_folder_is_moved_out_of_its_mask(
    home: Path, not_root: None
) -> None:
    """Finding 39 (the model, under "files"). config.toml's `never` hides
    ~/notes/private/diary.md by its path, masked where it is; with ~/notes writable, `mv
    ~/notes/private ~/notes/p2` moves the mask's mountpoint along with its folder, and the
    next shell call (the next run) finds the diary at a path no entry names. Such a folder
    is refused when the sandbox is built."""
    routine = _routine("~/notes")  # the loader knows the catalog only, not config.toml
    p = paths()
    settings = SandboxSettings(never=("~/notes/private/diary.md",))
    scratch = p.run_scratch(routine.name, "r1")
    try:
        policy = shell_policy_for(routine, paths=p, scratch_dir=scratch, settings=settings)
    except UnsafeValue as exc:
        refused = str(exc)
    else:  # the hole: what the model's two shell calls get
        moved = sandbox.run_shell("mv ~/notes/private ~/notes/p2", policy, timeout_sec=30)
        again = shell_policy_for(routine, paths=p, scratch_dir=scratch, settings=settings)
        read = sandbox.run_shell("cat ~/notes/p2/diary.md", again, timeout_sec=30)
        refused = f"built; mv: {moved.exit_code}, then cat: {read.stdout!r}"
    assert "holds" in refused and "never-list" in refused, refused
    assert (home / "notes/private/diary.md").read_text() == "the secret diary\n"


def test_a_write_folder_holding_vinos_home_is_refused_at_load(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader's half of finding 39: a folder holding a never-list entry it knows
    (VINOS_HOME, with the routines and the state a model could schedule itself with, or a
    catalog entry) is refused by `validate`, with what it holds."""
    vinos = home / "apps/vinos"
    (vinos / "routines").mkdir(parents=True)
    monkeypatch.setenv("VINOS_HOME", str(vinos))
    [problem] = _problems("~/apps")
    assert "[agent].write[0]" in problem and f"holds ~/apps/vinos ({HOLDS})" in problem


@pytest.mark.parametrize(
    "entry",
    [
        "~/.config/systemd/user",
        "~/.config/autostart",
        "~/.local/bin",
        "~/bin",
        "~/.bashrc.d",
        "~/go/bin",  # on PATH
        "~/go",  # holds a folder on PATH
    ],
)
def test_a_write_folder_where_your_programs_start_from_is_refused(
    home: Path, entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 40 (a routine's author, then the model under "files"). `write =
    ["~/.config/systemd/user"]` passed (only ~/.config itself is broad): a unit, an
    autostart entry, a program in ~/.local/bin or a file ~/.bashrc sources runs as the
    person, outside any sandbox, at the next login; one on PATH shadows a command."""
    monkeypatch.setenv("PATH", f"/usr/bin:{home}/go/bin")
    [problem] = _problems(entry)
    assert "where your own programs start from" in problem, problem
    assert "runs as you, outside any sandbox" in problem


def test_a_write_folder_linked_into_a_start_up_place_is_refused(home: Path) -> None:
    (home / ".config/autostart").mkdir(parents=True)
    (home / "inbox").symlink_to(home / ".config/autostart")
    [problem] = _problems("~/inbox")
    assert "where your own programs start from" in problem, problem


@pytest.mark.parametrize(
    ("link", "to"),
    [
        (".bashrc", "dotfiles/bashrc"),  # a dotfiles repository's plain names
        (".config/nvim", "dotfiles/nvim/.config/nvim"),  # GNU stow's layout
        (".config/systemd/user/sync.service", "dotfiles/sync.service"),
    ],
)
def test_a_write_folder_your_start_up_files_link_into_is_refused(
    home: Path, link: str, to: str
) -> None:
    """Finding 40, by a link: ~/dotfiles has no dot-name of its own, but ~/.bashrc leads
    into it, so a file written there runs at the next shell."""
    (home / to).parent.mkdir(parents=True, exist_ok=True)
    (home / to).write_text("")
    (home / link).parent.mkdir(parents=True, exist_ok=True)
    (home / link).symlink_to(home / to)
    [problem] = _problems("~/dotfiles")
    assert f'("~/{link}"' in problem and "runs as you" in problem, problem


def test_a_documents_folder_is_still_a_write_folder(home: Path) -> None:
    assert _routine("~/notes").write == ("~/notes",)


@pytest.mark.parametrize(
    "path",
    [
        "~/notes/.git/hooks/post-commit",  # runs at the person's next commit there
        "~/notes/.git/config",  # core.fsmonitor: runs at any `git status`, a prompt's too
        "~/notes/site/.vscode/tasks.json",
    ],
)
def test_write_file_never_writes_a_dot_name_below_a_folder(home: Path, path: str) -> None:
    """Finding 40, write_file's half: under "ask" the shell cannot write the folder, and the
    request would read "write 80 bytes to ~/notes/.git/config"."""
    found = target(path, ("~/notes",), str(home))
    assert isinstance(found, str) and "where your programs start from" in found, found


@pytest.mark.parametrize("path", ["~/notes/proj/HEAD", "~/notes/bare/config", "~/notes/x/head"])
def test_write_file_never_makes_a_repository(home: Path, path: str) -> None:
    """Finding 42, write_file's half: it makes missing folders, so HEAD, config, objects/x
    and refs/x made a bare repository the person's `git status` acts on; a HEAD, and a
    file in a folder holding one (a bare repository there already), are refused."""
    (home / "notes/bare").mkdir()
    (home / "notes/bare/HEAD").write_text("ref: refs/heads/main\n")
    found = target(path, ("~/notes",), str(home))
    assert isinstance(found, str) and "repository" in found, found
    assert isinstance(target("~/notes/proj/heads-up.md", ("~/notes",), str(home)), Target)


@pytest.mark.parametrize(
    "name",
    [
        "a\x1b[2Jb.md",  # clears the screen in any listing the person runs later
        "x\x9b31m.md",  # the 8-bit CSI
        "\u202edm.exe",  # right-to-left override: shows as "exe.md"
        "zero\u200bwidth.md",
        "\udcff.md",  # surrogate-escaped byte: not UTF-8 on disk
        "\ud800.md",  # a lone surrogate (Python's json keeps one): UnicodeEncodeError here
    ],
)
def test_a_name_that_is_not_plain_text_is_refused(home: Path, name: str) -> None:
    """Finding 41 (the model). Only NUL, newline and CR were refused: a name with escapes
    or invisible characters was written (shown escaped at approval, but as itself in every
    listing after), and a lone surrogate raised UnicodeEncodeError out of the check."""
    found = target(f"~/notes/{name}", ("~/notes",), str(home))
    assert isinstance(found, str) and "plain text" in found, found


def test_a_plain_name_with_spaces_and_accents_is_written(home: Path) -> None:
    found = target("~/notes/Café notes 2026.md", ("~/notes",), str(home))
    assert found == Target(str(home / "notes"), ("Café notes 2026.md",))


def test_a_credential_named_file_below_a_write_folder_stays_masked(
    home: Path, not_root: None
) -> None:
    """Held (the model, under "files"): a `.env` below a write folder is masked by its name,
    so a hard link to it (EXDEV: it is a mount), a rename of it (EBUSY) or of the folder
    holding it (its copy is a credential name, kept out of the folder) shows nothing of it."""
    (home / "notes/proj").mkdir()
    (home / "notes/proj/.env").write_text("KEY=secret\n")
    routine = _routine("~/notes")
    p = paths()
    scratch = p.run_scratch(routine.name, "r1")

    def shell(command: str) -> str:
        policy = shell_policy_for(routine, paths=p, scratch_dir=scratch, settings=SandboxSettings())
        result = sandbox.run_shell(command, policy, timeout_sec=30)
        return result.stdout + result.stderr

    shell("ln ~/notes/proj/.env ~/notes/hard; mv ~/notes/proj/.env ~/notes/moved; true")
    shell("mv ~/notes/proj ~/notes/p2")
    seen = shell("cat ~/notes/hard ~/notes/moved ~/notes/p2/.env 2>&1; true")
    assert "secret" not in seen, seen
    assert not (home / "notes/hard").exists() and not (home / "notes/moved").exists()
    # Not even moved: the copy-back of a write folder never carries a credential name, and
    # a folder holding one is not removed (finding 42).
    assert (home / "notes/proj/.env").read_text() == "KEY=secret\n"
    assert not (home / "notes/p2/.env").exists()


def _files_shell(home: Path) -> Callable[[str], sandbox.ShellResult]:
    """The model's shell calls of an agent routine with `write = ["~/notes"]` under "files"."""
    routine = _routine("~/notes")
    p = paths()
    scratch = p.run_scratch(routine.name, "r1")

    def shell(command: str) -> sandbox.ShellResult:
        policy = shell_policy_for(routine, paths=p, scratch_dir=scratch, settings=SandboxSettings())
        return sandbox.run_shell(command, policy, timeout_sec=60)

    return shell


def _host_git(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git as the person runs it in `where`, outside any sandbox (no config of theirs)."""
    env = {"HOME": str(where), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env |= {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CEILING_DIRECTORIES": str(where.parent)}
    return subprocess.run(
        ["git", *args], cwd=where, env=env, capture_output=True, text=True, check=False
    )


# `{ran}` is where the planted command leaves its mark, on the host.
MADE = {
    "git init": "cd ~/notes && git init -q . && git config core.fsmonitor 'touch {ran}'",
    # No dot-name at all: a bare repository is found by its HEAD, objects/ and refs/, and
    # core.worktree makes `git status` there use the fsmonitor (git 2.39, tried on the host).
    "bare": "cd ~/notes && git init -q --bare proj && git -C proj config core.bare false"
    " && git -C proj config core.worktree . && git -C proj config core.fsmonitor 'touch {ran}'",
}


@pytest.mark.parametrize("how", sorted(MADE))
def test_a_repository_the_shell_makes_in_a_write_folder_runs_nothing_on_the_host(
    home: Path, not_root: None, how: str
) -> None:
    """Finding 42 (the model, under "files"): `git init` and `core.fsmonitor = CMD` in a
    write folder, or a plain-named bare repository there with core.worktree, would have the
    person's next `git status` there run CMD as them. The shell's writes below a write
    folder go through an overlay whose copy-back keeps out every dot-name, every HEAD and
    what is below a folder holding one, and tells the model so."""
    ran = home.parent / "ran-on-the-host"
    made = _files_shell(home)(MADE[how].format(ran=ran) + " && echo made")
    assert "made" in made.stdout, made
    for where in ("notes", "notes/proj"):
        if (home / where).is_dir():
            _host_git(home / where, "status")
    assert not ran.exists()  # the person's `git status` ran nothing of the model's
    assert not (home / "notes/.git").exists()
    assert not (home / "notes/proj/HEAD").exists() and not (home / "notes/proj/config").exists()
    told = made.to_json()["not_copied"]  # the model is told what was kept out, and why
    assert any(".git (a dot-name)" in line or "proj (made a repository" in line for line in told)


def test_an_existing_repository_in_a_write_folder_is_not_changed_by_the_shell(
    home: Path, not_root: None
) -> None:
    """Finding 42: the person's own repository in a write folder (its `.git/config`, a hook, a
    rename or removal of the folder holding it, a hard link or a symlink to its config
    written through) keeps what it held; plain files beside it are written."""
    ran = home.parent / "ran-on-the-host"
    (home / "notes/proj").mkdir()
    assert _host_git(home / "notes/proj", "init", "-q").returncode == 0
    config = home / "notes/proj/.git/config"
    before = config.read_bytes()
    shell = _files_shell(home)
    shell(f"cd ~/notes/proj && git config core.fsmonitor 'touch {ran}'; true")
    shell(f"printf '#!/bin/sh\\ntouch {ran}\\n' > ~/notes/proj/.git/hooks/pre-commit; true")
    monitor = f"printf '[core]\\nfsmonitor = touch {ran}\\n'"
    shell(f"cd ~/notes && ln proj/.git/config hard && {monitor} >> hard; true")
    shell(f"cd ~/notes && ln -s proj/.git/config soft && {monitor} >> soft; true")
    shell("cd ~/notes && mv proj p2 && echo plain > p2/plain.md; true")
    shell("rm -rf ~/notes/p2 ~/notes/proj; true")
    wrote = shell("cd ~/notes && echo 'the brief' > brief.md && mkdir a && echo x > a/b.md")
    if (home / "notes/proj").is_dir():
        _host_git(home / "notes/proj", "status")
    assert not ran.exists()
    assert config.read_bytes() == before
    assert not (home / "notes/proj/.git/hooks/pre-commit").exists()
    assert not (home / "notes/soft").is_symlink()
    assert wrote.exit_code == 0, wrote
    assert (home / "notes/brief.md").read_text() == "the brief\n"
    assert (home / "notes/a/b.md").read_text() == "x\n"
    assert _host_git(home / "notes/proj", "status").returncode == 0


def test_a_bare_repository_in_a_write_folder_is_not_changed_by_the_shell(
    home: Path, not_root: None
) -> None:
    """Finding 42: a bare repository of the person's (`~/notes/backup.git`, every name in it
    plain) runs its hooks when they push to it and its config at `git status`; nothing the
    shell changes in a folder holding a HEAD is copied back."""
    ran = home.parent / "ran-on-the-host"
    bare = home / "notes/backup.git"
    assert _host_git(home / "notes", "init", "-q", "--bare", str(bare)).returncode == 0
    before = (bare / "config").read_bytes()
    made = _files_shell(home)(
        f"cd ~/notes/backup.git && printf '#!/bin/sh\\ntouch {ran}\\n' > hooks/post-receive"
        f" && git config core.fsmonitor 'touch {ran}' && echo changed"
    )
    assert "changed" in made.stdout, made
    assert (bare / "config").read_bytes() == before
    assert not (bare / "hooks/post-receive").exists()
    assert any("backup.git (a repository" in line for line in made.not_copied), made


def test_without_an_overlay_a_write_folder_is_read_only_to_the_shell(
    home: Path, not_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 42 where the kernel cannot build the overlay (Linux < 6.6, the quota then
    polled): nothing could keep the copy-back, so the shell sees the write folder read-only
    (write_file still writes plain names) and no descriptor of it reaches the sandbox."""
    monkeypatch.setitem(overlay._available, sys.executable, "the test asked for the poll")
    ran = home.parent / "ran-on-the-host"
    made = _files_shell(home)(
        f"cd ~/notes && git init -q . ; git config core.fsmonitor 'touch {ran}'; "
        "echo x > plain.md; ls -l /proc/self/fd/ | grep -c notes; true"
    )
    assert not (home / "notes/.git").exists() and not (home / "notes/plain.md").exists()
    assert "Read-only file system" in made.stderr, made
    assert made.stdout.strip() == "0", made  # no fd of the folder in the sandbox
    _host_git(home / "notes", "status")
    assert not ran.exists()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        (".git", "a dot-name"),
        (".envrc", "a dot-name"),
        ("HEAD", "a repository's HEAD"),
        ("head", "a repository's HEAD"),
        ("token.txt", "credential-named"),
        ("notes.md", None),
        ("config", None),
        ("hooks", None),
    ],
)
def test_the_copy_back_guard_keeps_out_dot_names_heads_and_credential_names(
    name: str, why: str | None
) -> None:
    """Finding 42's pure rule, per name (the walk applies it to every component)."""
    assert Guard(("*token*",)).refuses(name) == why
