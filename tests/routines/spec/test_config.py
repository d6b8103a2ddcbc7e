"""config.toml: every key, its defaults, the pricing tables, OLLAMA_HOST, and exact errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from routines.spec.checks import RoutineInvalid
from routines.spec.config import (
    DEFAULT_GALLERY_URL,
    Config,
    ConfigInvalid,
    LedgerSettings,
    NtfySettings,
    SandboxSettings,
    load_config,
)
from routines.spec.paths import paths


@pytest.fixture(autouse=True)
def no_ollama_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)


@pytest.fixture
def cfg(vinos_env: Path) -> Path:
    return paths().config_file


def invalid(path: Path, text: str) -> list[str]:
    path.write_text(text)
    with pytest.raises(ConfigInvalid) as info:
        load_config(path)
    return [str(p) for p in info.value.problems]


def test_missing_file_is_all_defaults(cfg: Path) -> None:
    assert not cfg.exists()
    c = load_config(cfg)
    assert c == Config()
    assert c.max_concurrent == 2
    assert c.ollama_url == "http://127.0.0.1:11434"
    assert c.gallery_url == DEFAULT_GALLERY_URL == "https://vinos.computer/routines/"
    assert c.pricing == {}
    assert c.sandbox == SandboxSettings()
    assert c.sandbox.as_dict() == {
        "never": [],
        "masks": [],
        "max_processes": 256,
        "max_file_size_mb": 64,
        "max_open_files": 256,
        "max_address_space_mb": 2048,
        "max_run_memory_mb": 2048,
        "max_workspace_mb": 256,
        "bwrap": "/usr/bin/bwrap",
        "lan": False,
    }


def test_empty_file_is_all_defaults(cfg: Path) -> None:
    cfg.write_text("# nothing here\n")
    assert load_config(cfg) == Config()


def test_every_key(cfg: Path) -> None:
    cfg.write_text(
        """\
max_concurrent = 4
ollama_url = "http://gpu-box.lan:11434/"
gallery_url = "https://example.org/gallery/"

[pricing."claude-next-5"]
input = 2
output = 10.5

[pricing."llama3.2:3b"]
input = 0.01
output = 0.02

[sandbox]
never = ["~/.config/hub"]
masks = ["~/.config/rclone", "~/.kube"]
max_processes = 64
max_file_size_mb = 8
max_open_files = 128
max_address_space_mb = 1024
max_run_memory_mb = 4096
max_workspace_mb = 512
bwrap = "/opt/bubblewrap/bin/bwrap"
lan = true
"""
    )
    c = load_config(cfg)
    assert c.max_concurrent == 4
    assert c.ollama_url == "http://gpu-box.lan:11434"  # trailing slash dropped
    assert c.gallery_url == "https://example.org/gallery/"
    assert c.pricing == {"claude-next-5": (2.0, 10.5), "llama3.2:3b": (0.01, 0.02)}
    assert all(isinstance(v, float) for p in c.pricing.values() for v in p)
    assert c.sandbox.as_dict() == {
        "never": ["~/.config/hub"],
        "masks": ["~/.config/rclone", "~/.kube"],
        "max_processes": 64,
        "max_file_size_mb": 8,
        "max_open_files": 128,
        "max_address_space_mb": 1024,
        "max_run_memory_mb": 4096,
        "max_workspace_mb": 512,
        "bwrap": "/opt/bubblewrap/bin/bwrap",
        "lan": True,
    }


def test_config_errors_are_routine_invalid_errors(cfg: Path) -> None:
    cfg.write_text("max_concurrent = 0\n")
    with pytest.raises(RoutineInvalid):
        load_config(cfg)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_concurent = 3\n", "max_concurent: unknown key (did you mean max_concurrent?)"),
        ("[sandbx]\nmasks = []\n", "sandbx: unknown key (did you mean sandbox?)"),
        ("[sandbox]\nmask = []\n", "[sandbox].mask: unknown key (did you mean masks?)"),
        (
            '[sandbox]\nlan = "yes"\n',
            '[sandbox].lan: expected true or false, found "yes" (a string)',
        ),
        (
            "max_concurrent = 0\n",
            "max_concurrent: expected a positive integer, found 0 (an integer)",
        ),
        (
            'max_concurrent = "2"\n',
            'max_concurrent: expected a positive integer, found "2" (a string)',
        ),
        (
            'ollama_url = "127.0.0.1:11434"\n',
            'ollama_url: expected an http:// or https:// URL, found "127.0.0.1:11434" (a string)',
        ),
        ('gallery_url = ""\n', 'gallery_url: expected a non-empty string, found "" (a string)'),
        ("sandbox = 3\n", "sandbox: expected a table, found 3 (an integer)"),
        (
            '[sandbox]\nmasks = "~/.kube"\n',
            '[sandbox].masks: expected an array of strings, found "~/.kube" (a string)',
        ),
        (
            "[sandbox]\nmax_processes = -1\n",
            "[sandbox].max_processes: expected a positive integer, found -1 (an integer)",
        ),
        (
            "[sandbox]\nmax_run_memory_mb = 0\n",
            "[sandbox].max_run_memory_mb: expected a positive integer, found 0 (an integer)",
        ),
        (
            '[sandbox]\nmax_workspace_mb = "1G"\n',
            '[sandbox].max_workspace_mb: expected a positive integer, found "1G" (a string)',
        ),
        (
            '[sandbox]\nbwrap = "bwrap"\n',
            '[sandbox].bwrap: expected an absolute path such as "/usr/bin/bwrap" (never looked '
            'up on PATH), found "bwrap" (a string)',
        ),
        (
            "[sandbox]\nmax_workspace = 3\n",
            "[sandbox].max_workspace: unknown key (did you mean max_workspace_mb?)",
        ),
    ],
)
def test_bad_key(cfg: Path, text: str, message: str) -> None:
    assert invalid(cfg, text) == [f"config.toml: {message}"]


def test_malformed_toml_names_line_and_column(cfg: Path) -> None:
    assert invalid(cfg, "max_concurrent = 2\nollama_url = \n") == [
        "config.toml: malformed TOML: Invalid value (at line 2, column 14)"
    ]
    assert invalid(cfg, "[sandbox]\nmasks = [") == [
        "config.toml: malformed TOML: Invalid value (at end of document, line 2, column 10)"
    ]


def test_unreadable_file(cfg: Path) -> None:
    cfg.write_bytes(b'gallery_url = "https://caf\xe9"\n')
    with pytest.raises(ConfigInvalid) as info:
        load_config(cfg)
    (problem,) = info.value.problems
    assert str(problem).startswith("config.toml: cannot read: 'utf-8' codec can't decode byte")


# -- pricing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "messages"),
    [
        (
            '[pricing."claude-next-5"]\ninput = 2\n',
            ['[pricing."claude-next-5"]: expected both input and output ($ per MTok)'],
        ),
        (
            '[pricing."claude-next-5"]\ninput = -2\noutput = 10\n',
            ['[pricing."claude-next-5"].input: expected a positive number, found -2 (an integer)'],
        ),
        (
            '[pricing."claude-next-5"]\ninput = 0\noutput = 0\n',
            [
                '[pricing."claude-next-5"].input: expected a positive number, found 0 (an integer)',
                '[pricing."claude-next-5"].output: expected a positive number, '
                "found 0 (an integer)",
            ],
        ),
        (
            '[pricing."claude-next-5"]\ninput = 2\noutput = 10\ncache_read = 0.2\n',
            ['[pricing."claude-next-5"].cache_read: unknown key (known keys: input, output)'],
        ),
        (
            '[pricing]\n"claude-next-5" = 3\n',
            ['[pricing."claude-next-5"]: expected a table, found 3 (an integer)'],
        ),
        ("pricing = 3\n", ["pricing: expected a table, found 3 (an integer)"]),
        (
            '[pricing."llama3.2:3b"]\noutput = "free"\ninput = 1\n',
            ['[pricing."llama3.2:3b"].output: expected a positive number, found "free" (a string)'],
        ),
    ],
)
def test_bad_pricing_names_the_model(cfg: Path, text: str, messages: list[str]) -> None:
    assert invalid(cfg, text) == [f"config.toml: {m}" for m in messages]


# -- the Ollama URL ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("http://10.1.2.3:8080", "http://10.1.2.3:8080"),
        ("https://ollama.example.org/", "https://ollama.example.org"),
        ("http://ollama.lan", "http://ollama.lan"),  # an explicit scheme keeps its default port
        ("10.1.2.3:8080", "http://10.1.2.3:8080"),
        # No scheme and no port: Ollama's own default port, as `ollama` itself reads it.
        ("0.0.0.0", "http://0.0.0.0:11434"),
        ("gpu-box", "http://gpu-box:11434"),
        ("[::1]", "http://[::1]:11434"),
        ('"127.0.0.1:11500"', "http://127.0.0.1:11500"),
        ("  ", "http://127.0.0.1:11434"),
    ],
)
def test_ollama_host_is_used_when_config_sets_no_url(
    cfg: Path, monkeypatch: pytest.MonkeyPatch, host: str, url: str
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", host)
    assert load_config(cfg).ollama_url == url


@pytest.mark.parametrize(
    ("value", "url"),
    [
        ("[::1]:11434", "http://[::1]:11434"),
        ("[::1]", "http://[::1]:11434"),
        ("[fe80::1]:8080/ollama/", "http://[fe80::1]:8080/ollama"),
        ("gpu-box:8080", "http://gpu-box:8080"),
        ("gpu-box/ollama", "http://gpu-box:11434/ollama"),
        ("http://gpu-box", "http://gpu-box"),
        ("https://ollama.example.org/", "https://ollama.example.org"),
        ("gpu-box", "http://gpu-box:11434"),
        ("", None),
    ],
)
def test_ollama_host_url_reads_ollama_host_as_ollama_does(value: str, url: str | None) -> None:
    """The one reading of OLLAMA_HOST, used by the supervisor's config and the worker alike
    (the worker's own copy once turned "[::1]" into "http://[::1]", port 80)."""
    from routines.spec.config import ollama_host_url

    assert ollama_host_url(value) == url


def test_config_ollama_url_wins_over_ollama_host(
    cfg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "10.9.9.9:1234")
    cfg.write_text('ollama_url = "http://127.0.0.1:22222"\n')
    assert load_config(cfg).ollama_url == "http://127.0.0.1:22222"


@pytest.mark.parametrize("entry", ["~", "/", "relative/dir", "~/"])
def test_sandbox_never_entries_must_be_paths_below_home_or_root(tmp_path: Path, entry: str) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[sandbox]\nnever = ["~/.config/hub", "{entry}"]\n')
    with pytest.raises(ConfigInvalid, match=r"\[sandbox\].never\[1\]: expected a path"):
        load_config(cfg)


def test_ledger_retention_keys(cfg: Path) -> None:
    assert load_config(cfg).ledger == LedgerSettings(keep_runs_days=90, keep_outputs_days=90)
    cfg.write_text("[ledger]\nkeep_runs_days = 400\nkeep_outputs_days = 30\n")
    assert load_config(cfg).ledger == LedgerSettings(keep_runs_days=400, keep_outputs_days=30)
    assert invalid(cfg, "[ledger]\nkeep_runs_days = 1\nkeep_output_days = 3\n") == [
        "config.toml: [ledger].keep_runs_days: expected a number of days, at least 2, found 1 "
        "(an integer)",
        "config.toml: [ledger].keep_output_days: unknown key (did you mean keep_outputs_days?)",
    ]
    cfg.write_text("")
    assert load_config(cfg).ledger.keep_runs_max == 30_000
    cfg.write_text("[ledger]\nkeep_runs_max = 1000000\n")
    assert load_config(cfg).ledger.keep_runs_max == 1_000_000
    assert invalid(cfg, "[ledger]\nkeep_runs_max = 100\n") == [
        "config.toml: [ledger].keep_runs_max: expected a number of runs, at least 5000, "
        "found 100 (an integer)",
    ]


def test_notify_ntfy_takes_a_topic_url_and_a_dashboard_url(cfg: Path) -> None:
    assert load_config(cfg).ntfy is None  # no table: no push
    cfg.write_text(
        '[notify.ntfy]\nurl = "https://ntfy.example.lan/vinos-alerts/"\n'
        'dashboard_url = "https://laptop.tailnet.example:8742"\n'
    )
    assert load_config(cfg).ntfy == NtfySettings(
        "https://ntfy.example.lan/vinos-alerts", "https://laptop.tailnet.example:8742"
    )
    cfg.write_text('[notify.ntfy]\nurl = "http://192.168.1.5:8080/t"\n')
    assert load_config(cfg).ntfy == NtfySettings("http://192.168.1.5:8080/t")


TOPIC = 'expected a topic URL such as "https://ntfy.sh/my-topic"'
WITH_TOKEN = f"{TOPIC} (the token goes in ~/.vinos/secrets/ntfy-token)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[notify.ntfy]\nurl = "ntfy.sh/t"\n', f'{WITH_TOKEN}, found "ntfy.sh/t" (a string)'),
        ('[notify.ntfy]\nurl = "https://ntfy.sh/"\n', f'{WITH_TOKEN}, found "https://ntfy.sh/"'),
        (
            '[notify.ntfy]\nurl = "https://ntfy.sh/t?auth=x"\n',
            f'{WITH_TOKEN}, found "https://ntfy.sh/t?auth=x"',
        ),
        ('[notify.ntfy]\nurl = "https://u:p@ntfy.sh/t"\n', f"{WITH_TOKEN}, found"),
        ('[notify.ntfy]\nurl = "https://ntfy.sh:99999/t"\n', f"{WITH_TOKEN}, found"),
        ("[notify.ntfy]\nurl = 3\n", f"{TOPIC}, found 3 (an integer)"),
        ('[notify.ntfy]\ndashboard_url = "https://a.example"\n', TOPIC),
        ('[notify.ntfy]\nurl = "https://ntfy.sh/t"\ntoken = "x"\n', "unknown key"),
        ('[notify.ntfy]\nurl = "https://ntfy.sh/t"\ndashboard_url = "x"\n', "an http:// or"),
        ("[notify]\nntfy = 1\n", "expected a table, found 1"),
        ('[notify]\nslack = "x"\n', "unknown key (known keys: ntfy)"),
    ],
)
def test_a_bad_notify_ntfy_is_refused_naming_the_key(cfg: Path, text: str, message: str) -> None:
    [problem] = invalid(cfg, text)
    assert problem.startswith("config.toml: [notify"), problem
    assert message in problem, problem
