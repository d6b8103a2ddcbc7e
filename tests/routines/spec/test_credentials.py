"""Credentials as a routine author meets them (routines/spec/never.py, routines/spec/loader.py):
broad folders cannot be declared, the catalog's places are refused with what they hold, and a
credential is granted only bound to hosts, never beside `network = true`."""

from __future__ import annotations

from pathlib import Path

import pytest

from routines.spec import Credential
from routines.spec.checks import RoutineInvalid
from routines.spec.loader import load_file
from routines.spec.never import (
    BROAD,
    CATALOG,
    credential_problem,
    describe,
    home_problem,
    name_pattern,
    never_paths,
    read_problem,
)
from routines.spec.never import (
    holds as held,
)
from routines.spec.paths import paths

HOME = "/home/ana"
NEVER = never_paths(HOME, f"{HOME}/.vinos")

COMMAND = """\
[routine]
kind = "command"
[schedule]
cron = "0 6 * * *"
[command]
run = "gh api /notifications"
{extra}
"""

AGENT = """\
[routine]
kind = "agent"
[schedule]
cron = "0 6 * * *"
[agent]
route = "ollama"
system = "x"
{extra}
"""


def _load(vinos_env: Path, text: str, name: str = "r1") -> object:
    path = paths().routines_dir / f"{name}.toml"
    path.write_text(text)
    return load_file(path)


def _errors(vinos_env: Path, text: str, name: str = "r1") -> list[str]:
    with pytest.raises(RoutineInvalid) as info:
        _load(vinos_env, text, name)
    return [str(p) for p in info.value.errors]


@pytest.mark.parametrize("entry", BROAD)
@pytest.mark.parametrize("template", [COMMAND, AGENT])
def test_a_broad_container_cannot_be_a_home_entry(
    vinos_env: Path, entry: str, template: str
) -> None:
    errors = _errors(vinos_env, template.format(extra=f'home = ["{entry}"]\nnetwork = true'))
    table = "command" if template is COMMAND else "agent"
    path = paths().routines_dir / "r1.toml"
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{path}: [{table}].home[0]: ")
    assert "name the app's own folder" in errors[0]


@pytest.mark.parametrize("glob", ["~/.config/*.conf", "~/*.txt", "~/.local/share/*.db"])
def test_a_read_glob_rooted_in_a_broad_container_is_refused(vinos_env: Path, glob: str) -> None:
    errors = _errors(vinos_env, AGENT.format(extra=f'tools = ["read:{glob}"]'))
    assert len(errors) == 1 and "[agent].tools[0]: " in errors[0], errors
    assert "name the app's own folder" in errors[0]


@pytest.mark.parametrize(
    ("entry", "holds"),
    [
        ("~/.config/gh", "GitHub CLI login"),
        ("~/.config/gcloud", "Google Cloud CLI credentials"),
        ("~/.azure", "Azure CLI credentials"),
        ("~/.npmrc", "npm registry tokens"),
        ("~/.pypirc", "PyPI upload tokens"),
        ("~/.config/glab-cli/config.yml", "GitLab CLI login"),
        ("~/.cargo/credentials.toml", "crates.io token (cargo)"),
        ("~/.kube", "Kubernetes cluster credentials"),
        ("~/.vault-token", "HashiCorp Vault token"),
        ("~/.config/Bitwarden CLI", "Bitwarden CLI vault"),
    ],
)
def test_what_the_attacker_declared_with_network_on_is_refused_naming_what_it_holds(
    vinos_env: Path, entry: str, holds: str
) -> None:
    errors = _errors(vinos_env, COMMAND.format(extra=f'home = ["{entry}"]\nnetwork = true'))
    assert len(errors) == 1, errors
    assert f'[command].home[0]: "{entry}" is on the never-list' in errors[0]
    assert holds in errors[0] and "[[command.credentials]]" in errors[0]


def test_cargo_itself_may_be_declared_its_credentials_stay_masked(vinos_env: Path) -> None:
    """~/.cargo holds the registry cache a build needs; only its credentials files are on
    the catalog (masked below it: test_escape_creds.py runs that in bwrap)."""
    routine = _load(vinos_env, COMMAND.format(extra='home = ["~/.cargo"]'))
    assert routine.home == ("~/.cargo",)  # type: ignore[attr-defined]
    assert f"{HOME}/.cargo/credentials.toml" in NEVER and f"{HOME}/.cargo" not in NEVER


def test_the_catalog_names_every_store_of_the_brief_with_what_it_holds() -> None:
    paths_ = [e.path for e in CATALOG]
    assert len(paths_) == len(set(paths_))
    assert all(e.path.startswith("~/") and e.holds for e in CATALOG)
    for path in (
        "~/.config/gh",
        "~/.config/glab-cli",
        "~/.config/hub",
        "~/.config/gcloud",
        "~/.azure",
        "~/.npmrc",
        "~/.yarnrc",
        "~/.yarnrc.yml",
        "~/.pypirc",
        "~/.cargo/credentials",
        "~/.cargo/credentials.toml",
        "~/.gem/credentials",
        "~/.local/share/gem/credentials",
        "~/.docker",
        "~/.kube",
        "~/.config/helm",
        "~/.terraform.d/credentials.tfrc.json",
        "~/.terraformrc",
        "~/.aws",
        "~/.oci",
        "~/.config/doctl",
        "~/.fly",
        "~/.vault-token",
        "~/.local/share/kwalletd",
        "~/.config/Bitwarden",
        "~/.config/Bitwarden CLI",
        "~/.ssh",
        "~/.netrc",
    ):
        assert path in paths_, path
    assert describe("~/.config/gh", HOME) == "GitHub CLI login"
    assert describe("~/.ssh/id_ed25519", HOME) == "SSH keys"
    assert describe("~/notes", HOME) is None
    assert describe("~/apps/api_token", HOME) == "a token file"


def test_the_catalog_names_database_build_agent_browser_and_chat_logins() -> None:
    """Stores a routine author could still declare after the first catalog: database
    passwords, build-tool repository logins, container registry auth, coding agents' logins,
    the other Chromium browsers' profiles, and chat apps' sessions."""
    found = {e.path: e.holds for e in CATALOG}
    for path in (
        "~/.pgpass",
        "~/.my.cnf",
        "~/.m2/settings.xml",
        "~/.gradle/gradle.properties",
        "~/.config/composer/auth.json",
        "~/.composer/auth.json",
        "~/.config/containers/auth.json",
        "~/.codex",
        "~/.claude",
        "~/.claude.json",
        "~/.config/microsoft-edge",
        "~/.config/vivaldi",
        "~/.config/opera",
        "~/.config/BraveSoftware",
        "~/.config/Slack",
        "~/.config/discord",
    ):
        assert found.get(path), path
    assert "~/.local/state" in BROAD
    problem = home_problem("~/.local/state", HOME, NEVER)
    assert problem is not None and "name the app's own folder" in problem
    for entry in ("~/.pgpass", "~/.claude/x", "~/.config/Slack"):
        problem = home_problem(entry, HOME, NEVER)
        assert problem is not None and "is on the never-list" in problem, entry


@pytest.mark.parametrize(
    ("var", "value", "hidden", "holds"),
    [
        ("XDG_CONFIG_HOME", "/home/ana/cfg", "/home/ana/cfg/gh", "GitHub CLI login"),
        ("XDG_CONFIG_HOME", "/home/ana/cfg", "/home/ana/cfg/gcloud", "Google Cloud CLI"),
        ("XDG_DATA_HOME", "/home/ana/data", "/home/ana/data/keyrings", "GNOME keyring"),
        ("GH_CONFIG_DIR", "/home/ana/gh-login", "/home/ana/gh-login", "GitHub CLI login"),
        ("CARGO_HOME", "/home/ana/rust/cargo", "/home/ana/rust/cargo/credentials.toml", "crates"),
        ("DOCKER_CONFIG", "/home/ana/dock", "/home/ana/dock", "Docker registry logins"),
        ("KUBECONFIG", "/home/ana/k/a.yaml:/home/ana/k/b.yaml", "/home/ana/k/b.yaml", "Kube"),
        ("GNUPGHOME", "/home/ana/gpg", "/home/ana/gpg", "GnuPG keys"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/home/ana/aws.ini", "/home/ana/aws.ini", "AWS"),
    ],
)
def test_the_catalog_follows_the_environment_that_moves_a_store(
    var: str, value: str, hidden: str, holds: str
) -> None:
    """gh writes to $GH_CONFIG_DIR, cargo to $CARGO_HOME: a store moved by its variable is
    hidden where it is, in addition to its default place (which stays hidden too)."""
    env = {var: value}
    never = never_paths(HOME, f"{HOME}/.vinos", environ=env)
    assert hidden in never
    assert f"{HOME}/.config/gh" in never  # the defaults stay
    assert holds in held(hidden, HOME, environ=env)
    assert hidden not in never_paths(HOME, f"{HOME}/.vinos", environ={})


@pytest.mark.parametrize("value", ["", "relative/dir", "/", "/home/ana"])
def test_an_override_that_is_not_one_app_s_place_is_ignored(value: str) -> None:
    """An empty, relative, root or home value would hide nothing useful or everything."""
    never = never_paths(HOME, f"{HOME}/.vinos", environ={"GH_CONFIG_DIR": value})
    assert never == never_paths(HOME, f"{HOME}/.vinos", environ={})


@pytest.mark.parametrize("entry", ["~/proj/.env", "~/proj/deploy_token", "~/certs/server.pem"])
def test_a_credential_named_file_cannot_be_a_home_entry(entry: str) -> None:
    """Below a declared folder such a file is masked; declared itself, it would be shown
    whole to a routine that may have the network on."""
    problem = home_problem(entry, HOME, NEVER)
    assert problem is not None and "[[agent.credentials]]" in problem, problem
    assert "credential-named" in problem


def test_a_moved_config_home_is_as_broad_as_the_default() -> None:
    env = {"XDG_CONFIG_HOME": "/home/ana/cfg"}
    never = never_paths(HOME, f"{HOME}/.vinos", environ=env)
    problem = home_problem("~/cfg", HOME, never, (), environ=env)
    assert problem is not None and "holds many apps' settings" in problem


@pytest.mark.parametrize(
    ("name", "hit"),
    [
        (".env", ".env"),
        (".env.production", ".env.*"),
        (".envrc", ".envrc"),
        ("environment.md", None),
        ("credentials.json", "credentials*"),
        ("CREDENTIALS", "credentials*"),
        (".gh_token", "*token*"),
        ("api-token.txt", "*token*"),
        ("server.pem", "*.pem"),
        ("notes.md", None),
        ("pem", None),
    ],
)
def test_credential_names(name: str, hit: str | None) -> None:
    entry = name_pattern(name)
    assert (entry.path if entry else None) == hit


@pytest.mark.parametrize(
    "glob", ["/proc/*/environ", "/proc/self/environ", "/sys/**", "/dev/*", "/run/user/*/x"]
)
def test_read_globs_into_kernel_interfaces_are_refused(glob: str) -> None:
    problem = read_problem(glob, HOME, NEVER)
    assert problem is not None and "kernel or runtime interface" in problem


def test_read_proc_environ_is_refused_naming_file_and_key(vinos_env: Path) -> None:
    errors = _errors(vinos_env, AGENT.format(extra='tools = ["read:/proc/*/environ"]'))
    path = paths().routines_dir / "r1.toml"
    assert errors == [
        f'{path}: [agent].tools[0]: "/proc/*/environ" can reach /proc, a kernel or runtime '
        "interface (process environments, devices, sockets): the read tool never reads it"
    ]


GRANT = """\
network = ["status.example.org"]
[[command.credentials]]
path = "~/.config/gh"
hosts = ["api.github.com", "github.com"]
[[command.credentials]]
path = "~/.npmrc"
hosts = ["registry.npmjs.org", "API.github.com"]
"""


def test_a_credential_is_a_grant_bound_to_hosts(vinos_env: Path) -> None:
    routine = _load(vinos_env, COMMAND.format(extra=GRANT))
    assert routine.credentials == (  # type: ignore[attr-defined]
        Credential("~/.config/gh", ("api.github.com", "github.com")),
        Credential("~/.npmrc", ("registry.npmjs.org", "api.github.com")),
    )
    # Its calls reach only the union of its own list and its credentials' hosts.
    assert routine.egress == (  # type: ignore[attr-defined]
        "status.example.org",
        "api.github.com",
        "github.com",
        "registry.npmjs.org",
    )


def test_an_agent_grant_without_a_network_key_reaches_only_its_hosts(vinos_env: Path) -> None:
    text = AGENT.format(
        extra='[[agent.credentials]]\npath = "~/.config/gh"\nhosts = ["api.github.com"]'
    )
    routine = _load(vinos_env, text)
    assert routine.network is False  # type: ignore[attr-defined]
    assert routine.egress == ("api.github.com",)  # type: ignore[attr-defined]


@pytest.mark.parametrize("template", [COMMAND, AGENT])
def test_network_true_beside_a_credential_is_refused(vinos_env: Path, template: str) -> None:
    table = "command" if template is COMMAND else "agent"
    extra = f'network = true\n[[{table}.credentials]]\npath = "~/.azure"\nhosts = ["x.example"]'
    errors = _errors(vinos_env, template.format(extra=extra))
    path = paths().routines_dir / "r1.toml"
    assert errors == [
        f"{path}: [{table}].network: network = true cannot go with [[{table}.credentials]]: "
        "true lets every call reach any host, so a credential could be sent anywhere; list "
        'the hosts the routine needs instead, e.g. network = ["api.example.com"] (its '
        "credentials' hosts are added)"
    ]


@pytest.mark.parametrize(
    ("grant", "why"),
    [
        ('path = "~/.config"\nhosts = ["a.example"]', "name the app's own folder"),
        ('path = "~"\nhosts = ["a.example"]', 'expected a path starting with "~/"'),
        ('path = "/etc/shadow"\nhosts = ["a.example"]', 'expected a path starting with "~/"'),
        ('path = "~/.vinos/secrets"\nhosts = ["a.example"]', "never granted"),
        ('path = "~/a/../.ssh"\nhosts = ["a.example"]', "below ~"),
        ('path = "~/.config/gh"', "[command].credentials[0].hosts: required"),
        ('path = "~/.config/gh"\nhosts = true', "expected an array of host names"),
        ('path = "~/.config/gh"\nhosts = []', "found an array of 0"),
        ('path = "~/.config/gh"\nhosts = ["https://x/"]', "not a host name or host:port"),
        ('path = "~/.config/gh"\nhosts = ["a.example"]\nhost = 1', "did you mean hosts?"),
    ],
)
def test_a_bad_grant_is_refused_with_file_key_and_why(
    vinos_env: Path, grant: str, why: str
) -> None:
    errors = _errors(vinos_env, COMMAND.format(extra=f"[[command.credentials]]\n{grant}"))
    path = paths().routines_dir / "r1.toml"
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{path}: [command].credentials[0].") and why in errors[0]


def test_vinos_home_is_never_granted_wherever_it_is() -> None:
    moved = f"{HOME}/state/vinos"
    for entry in ("~/state/vinos/secrets", "~/state", "~/.vinos/secrets/anthropic-key"):
        problem = credential_problem(entry, HOME, moved)
        assert problem is not None and "never granted" in problem, entry
    assert credential_problem("~/state/other", HOME, moved) is None


def test_a_path_granted_twice_is_refused(vinos_env: Path) -> None:
    grant = '[[command.credentials]]\npath = "~/.config/gh"\nhosts = ["a.example"]\n'
    errors = _errors(vinos_env, COMMAND.format(extra=grant + grant))
    assert len(errors) == 1 and "[command].credentials[1].path" in errors[0], errors
