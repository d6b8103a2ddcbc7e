"""Red team, the runtime dir as another local user: where $XDG_RUNTIME_DIR is a place others
can write (a shared /tmp, a dir another user made first), the launch token, the state file
and the opener page went into it as into our own 0700 dir. A file there is 0600, but the dir's
owner (or anyone, in a 0777 dir) can swap the opener page between its write and xdg-open, or
plant the state file the listener check trusts. Each writer now takes only a dir that is ours
and private: one of ours with a looser mode is made 0700 (as the daemon does), one of another
uid is refused."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from dashboard.listener import write_state
from dashboard.security import new_token, private_dir
from dashboard.server import write_opener


def test_a_runtime_dir_of_another_user_is_refused() -> None:
    shared = Path("/tmp")  # root's, mode 1777: the shape of a runtime dir someone else made
    assert os.stat(shared).st_uid != os.getuid()
    token = shared / f"vinos-redteam-{secrets.token_hex(8)}.token"
    try:
        with pytest.raises(PermissionError) as info:
            new_token(token)
        assert f"{shared} belongs to uid {os.stat(shared).st_uid}, not to you" in str(info.value)
        assert not token.exists()
    finally:
        token.unlink(missing_ok=True)


def test_our_runtime_dir_with_a_loose_mode_is_made_private_before_any_write(
    tmp_path: Path,
) -> None:
    for write in (
        lambda d: new_token(d / "dashboard.token"),
        lambda d: write_state(d, os.getpid(), 8742),
        lambda d: write_opener(d, 8742, "t"),
    ):
        runtime = tmp_path / secrets.token_hex(4) / "vinos-routine"
        runtime.mkdir(parents=True)
        runtime.chmod(0o777)
        write(runtime)
        assert runtime.stat().st_mode & 0o777 == 0o700


def test_a_symlinked_runtime_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "vinos-routine"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        private_dir(link)
    assert list((tmp_path / "elsewhere").iterdir()) == []
