"""Red team: `install http://127.0.0.1:PORT/…` asks nothing of another local user's listener.

Plain http is allowed to this machine (a local gallery, `python -m http.server`), but this
machine has other users: one who binds the person's usual port first would serve the routine
file that is installed (and, with `--enable --yes`, turned on). The real second local user
(scripts/second-user.sh) listens; install is refused before a byte is sent, naming the port
and the user, and nothing is installed."""

from __future__ import annotations

from routines.spec.paths import paths
from tests.cli.cli_helpers import Cli
from tests.dashboard.squatkit import SecondUser


def test_install_asks_nothing_of_another_users_port_on_this_machine(cli: Cli) -> None:
    squat = SecondUser.from_env().listen()
    try:
        for host in ("127.0.0.1", "localhost"):
            url = f"http://{host}:{squat.port}/standup.toml"
            res = cli("install", url, "--enable", "--yes")
            assert res.returncode == 1, res.stdout
            assert f"port {squat.port} of this machine is held by another user's program" in (
                res.stderr
            )
            assert f"uid {squat.uid}" in res.stderr and "Traceback" not in res.stderr
        assert squat.received() == []
        assert not (paths().routines_dir / "standup.toml").exists()
    finally:
        squat.close()
