"""`gh api /notifications` from a command routine through a credential grant, against a fake
GitHub on a test host, and nothing else reached.

The real GitHub CLI (Debian's gh) runs in the real sandbox built by the worker's own policy
(worker/shellpolicy.py) from a routine the real loader read. The grant binds ~/.config/gh
read-only and narrows the sandbox's network to the grant's hosts; gh reaches them through the
egress proxy (HTTPS_PROXY, a CONNECT tunnel whose TLS ClientHello must name the host), TLS
end to end. GitHub is github_ns.py: an HTTPS server at 192.0.2.10 in a network namespace this
test makes, behind a veth link from a "host" namespace where the egress proxy runs (the
runner's `proxy_prefix`, as test_egress_internet.py does: the workplace lets no test reach a
real internet address); it holds a certificate for api.github.com signed by a CA this test
made, and gh trusts that CA through SSL_CERT_FILE set in the command.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a network namespace and a Go binary: make test-fast skips it

HERE = Path(__file__).resolve().parent

SETUP = """set -e
ip link set lo up
mount --bind "$1" /etc/hosts
shift
exec "$@"
"""


@dataclass
class GitHub:
    prefix: tuple[str, ...]  # runs the egress proxy in the "host" namespace
    seen_file: Path

    def seen(self) -> list[object]:
        """Each connection GitHub accepted ("connect") and each request (a dict), in order."""
        if not self.seen_file.exists():
            return []
        lines = self.seen_file.read_text().splitlines()
        return [line if line == "connect" else json.loads(line) for line in lines]


def _certificates(where: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for api.github.com and github.com it signed (openssl)."""
    names = ("ca.key", "ca.crt", "gh.key", "gh.csr", "gh.crt")
    ca_key, ca, key, csr, cert = (where / n for n in names)
    ext = where / "san.ext"
    ext.write_text("subjectAltName = DNS:api.github.com, DNS:github.com\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
            "-out", str(ca), "-days", "2", "-subj", "/CN=vinos test CA")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
            "-subj", "/CN=api.github.com")  # fmt: skip
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
            "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key


@pytest.fixture
def github(tmp_path: Path, not_root: None) -> Iterator[tuple[GitHub, Path, str]]:
    for tool in ("ip", "openssl", "gh", "nsenter"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is needed: run scripts/system-deps.sh as root")
    certs = tmp_path / "certs"
    certs.mkdir()
    ca, cert, key = _certificates(certs)
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n192.0.2.10 api.github.com github.com elsewhere.test\n")
    token = "gho_" + secrets.token_hex(16)
    seen = tmp_path / "seen"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [
            "unshare", "--user", "--map-root-user", "--net", "--mount",
            "sh", "-c", SETUP, "setup", str(hosts), sys.executable,
            str(HERE / "github_ns.py"), str(theirs.fileno()), str(cert), str(key), token,
            str(seen),
        ],
        pass_fds=[theirs.fileno()],
        # github_ns.py imports its kit by its one name (tests.sandbox.internet_ns): from the repo.
        env={**os.environ, "PYTHONPATH": str(HERE.parents[1])},
    )  # fmt: skip
    theirs.close()
    ours.settimeout(60)
    try:
        assert ours.recv(100) == b"ready\n", "the fake GitHub's namespaces did not start"
        prefix = ("nsenter", f"--target={proc.pid}", "--user", "--net", "--mount",
                  "--preserve-credentials")  # fmt: skip
        yield GitHub(prefix, seen), ca, token
    finally:
        ours.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


ROUTINE = """\
[routine]
kind = "command"
[schedule]
cron = "0 9 * * 1-5"
[command]
run = "{run}"
[[command.credentials]]
path = "~/.config/gh"
hosts = ["api.github.com", "github.com"]
"""


def test_gh_api_notifications_through_a_grant_reaches_github_and_nothing_else(
    github: tuple[GitHub, Path, str],
    tmp_path: Path,
    vinos_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sandbox
    from routines.spec.config import SandboxSettings
    from routines.spec.loader import load_file
    from routines.spec.paths import paths
    from worker.shellpolicy import shell_policy_for

    hub, ca, token = github
    home = tmp_path / "home"
    (home / ".config/gh").mkdir(parents=True)
    (home / ".config/gh/hosts.yml").write_text(
        f"github.com:\n    oauth_token: {token}\n    user: octo\n    git_protocol: https\n"
    )
    (home / ".config/gcloud").mkdir()
    (home / ".config/gcloud/credentials.db").write_text("not granted\n")
    monkeypatch.setenv("HOME", str(home))  # Path.home(), as the worker sees it
    p = paths()
    workspace = p.workspace("notifications")
    workspace.mkdir(parents=True)
    shutil.copy(ca, workspace / "test-ca.crt")  # a CA, no secret: where gh can read it
    run = (
        f"export SSL_CERT_FILE={workspace}/test-ca.crt GH_NO_UPDATE_NOTIFIER=1; "
        "gh api /notifications; e=$?; echo; echo exit=$e; "
        "gh api --hostname elsewhere.test /notifications; echo exit=$?; "
        "curl -sS -m 20 https://elsewhere.test/; "
        "ls ~/.config; cat ~/.config/gcloud/credentials.db"
    )
    source = p.routines_dir / "notifications.toml"
    source.write_text(ROUTINE.format(run=run))
    routine = load_file(source)
    assert routine.egress == ("api.github.com", "github.com")
    scratch = tmp_path / "scratch"
    policy = shell_policy_for(routine, paths=p, scratch_dir=scratch, settings=SandboxSettings())
    assert routine.command is not None
    r = sandbox.run_shell(routine.command.run, policy, timeout_sec=90, proxy_prefix=hub.prefix)
    assert r.error is None, r.error
    # gh read its login from the grant and got GitHub's answer, TLS verified against the CA.
    assert '"title": "Review requested: #42"' in r.stdout, r.stdout + r.stderr
    assert r.stdout.count("exit=0") == 1 and "exit=1" in r.stdout, r.stdout + r.stderr
    # Any other host is refused by the proxy (403 to CONNECT), never dialled.
    assert 'Get "https://elsewhere.test/api/v3/notifications": Forbidden' in r.stderr
    assert "CONNECT tunnel failed, response 403" in r.stderr
    assert r.stdout.splitlines()[-1] == "gh", r.stdout  # only the grant is in ~/.config
    assert "not granted" not in r.stdout
    # GitHub saw one connection and one request, with the token; nothing else was dialled.
    assert hub.seen() == [
        "connect",
        {"host": "api.github.com", "path": "/notifications", "token": True},
    ]
    assert token not in r.stdout + r.stderr
