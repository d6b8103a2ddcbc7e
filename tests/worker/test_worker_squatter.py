"""Another local user against every send that carries a secret or a prompt, as the chains
were run: a real second user (vinos-test2, tests/helpers/squatter.py, started by
scripts/second-user.sh) listens on a port of this machine first, and a routine's Ollama URL,
a [providers.NAME] base_url (local or premium), ANTHROPIC_BASE_URL or a webhook points
there, in any spelling that lands on loopback (`127.1`, `0177.0.0.1`, `[::ffff:127.0.0.1]`:
resolved, never read off the URL). The run must fail before a byte goes to it (prompts, file
contents, an API key, a webhook's token), naming the URL, what it resolved to, the owner and
the fix (worker/connector.py). An /etc/hosts alias is the same chain through the resolver;
a test cannot write /etc/hosts, so tests/worker/test_connector.py injects one. The normal case, our
own fake server on 127.0.0.1, is every other worker test (test_worker_openai.py,
test_worker_tools.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from tests.dashboard.squatkit import SecondUser, Squat
from tests.fakes import FakeOllama
from tests.fakes import ollama_replies as O
from tests.worker.worker_harness import WorkerRun, make_job, routine_toml, run_worker, worker_env

SECOND = "vinos-test2"  # scripts/second-user.sh's user
KEY = "sk-squat-test-0a1b2c3d"


def on_ollama(home: Path, url: str, *, env: dict[str, str] | None = None, **job: Any) -> WorkerRun:
    base = make_job(home, routine_toml(route="ollama"), ollama_url=url)
    return run_worker(msgspec.structs.replace(base, **job), env=env or worker_env())


def on_provider(home: Path, base_url: str, **extra: Any) -> WorkerRun:
    key = home / "secrets" / "lmstudio-key"
    key.parent.mkdir(exist_ok=True)
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    table = {"kind": "openai", "base_url": base_url, "local": True, "key_file": str(key)}
    toml = routine_toml(route="lmstudio", extra_agent='model = "m"')
    job = msgspec.structs.replace(make_job(home, toml), providers={"lmstudio": table | extra})
    return run_worker(job, env=worker_env())


def refused(run: WorkerRun, squat: Squat, setting: str | None) -> str:
    error = run.result.error or ""
    assert run.result.status == "failed", error
    assert f"port {squat.port} of this machine is held by another user's program" in error
    assert f"(uid {squat.uid}, user {SECOND})" in error
    assert "nothing was sent to it" in error
    if setting is None:
        assert "If that server is yours, run it as your own user" in error
    else:
        assert f'add "{SECOND}" to {setting}' in error
    return error


def on_paid(home: Path, base_url: str) -> WorkerRun:
    """A premium provider from config.toml (a paid leg: local = false) at `base_url`."""
    key = home / "secrets" / "paid-key"
    key.parent.mkdir(exist_ok=True)
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    table = {
        "kind": "openai",
        "base_url": base_url,
        "local": False,
        "key_file": str(key),
        "prices": {"m": [1.0, 2.0]},
    }
    toml = routine_toml(route="paid", extra_agent='model = "m"')
    job = msgspec.structs.replace(make_job(home, toml), providers={"paid": table})
    return run_worker(job, env=worker_env())


def test_a_squatter_on_anthropic_base_url_gets_neither_key_nor_prompt(
    home: Path, squat: Squat
) -> None:
    # The chain: ANTHROPIC_BASE_URL names a port of this machine (a local gateway, a proxy
    # the person runs); the second user bound it first and received the x-api-key header
    # and every prompt. Every spelling of loopback lands on the same check.
    for host in ("127.0.0.1", "127.1", "2130706433", "[::ffff:127.0.0.1]"):
        url = f"http://{host}:{squat.port}"
        env = worker_env(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY=KEY)
        r = run_worker(make_job(home, routine_toml(route="anthropic")), env=env)
        error = refused(r, squat, None)
        assert error.startswith(f"Anthropic at http://{host}:{squat.port}"), error
        assert r.events_of("model_call") == []
    assert squat.received() == []
    assert KEY not in repr(r.messages) and KEY not in r.stderr


def test_a_squatter_on_a_premium_providers_port_gets_nothing(home: Path, squat: Squat) -> None:
    # A paid provider's base_url in a short form of 127.0.0.1: the old check read the URL's
    # spelling (127.0.0.1, localhost, ::1) and let 2130706433 through with the key.
    r = on_paid(home, f"http://2130706433:{squat.port}/v1")
    error = refused(r, squat, "[providers.paid].listener_users")
    assert f"2130706433 resolves to 127.0.0.1, and port {squat.port}" in error
    assert squat.received() == []
    assert KEY not in repr(r.messages) and KEY not in r.stderr


def test_a_short_form_of_loopback_on_a_local_provider_is_checked(home: Path, squat: Squat) -> None:
    r = on_provider(home, f"http://127.1:{squat.port}/v1")
    refused(r, squat, "[providers.lmstudio].listener_users")
    assert squat.received() == []
    assert KEY not in repr(r.messages) and KEY not in r.stderr


def test_a_squatter_on_a_webhooks_port_gets_neither_output_nor_token(
    home: Path, squat: Squat, ollama: FakeOllama
) -> None:
    # The chain: a webhook output to a local relay (ntfy, n8n) whose port the second user
    # holds: the run's whole output went there, with the token in the URL's path.
    ollama.add(O.text("the brief: payroll figures"))
    url = f"http://127.1:{squat.port}/hook/T0KEN-s3cret"
    toml = routine_toml(route="ollama", output=f'type = "webhook"\nurl = "{url}"\n')
    r = run_worker(make_job(home, toml, ollama_url=ollama.url))
    error = refused(r, squat, None)
    assert error.startswith(f"webhook at http://127.1:{squat.port}"), error
    assert squat.received() == []
    assert "T0KEN" not in repr(r.messages) and "T0KEN" not in r.stderr
    assert r.result.output_file is not None  # the file is kept: only the send is refused


def test_a_squatter_on_the_ollama_port_gets_nothing(home: Path, squat: Squat) -> None:
    # The chain: Ollama stopped, the second user bound its port; the worker used to post the
    # system prompt and the routine's turn to it and run the tool calls it answered.
    r = on_ollama(home, f"http://127.0.0.1:{squat.port}")
    refused(r, squat, "ollama_listener_users")
    assert r.events_of("model_call") == []
    assert squat.received() == []  # not a connection, not a byte


def test_a_squatter_on_a_providers_port_gets_neither_prompt_nor_key(
    home: Path, squat: Squat
) -> None:
    r = on_provider(home, f"http://127.0.0.1:{squat.port}/v1")
    refused(r, squat, "[providers.lmstudio].listener_users")
    assert squat.received() == []
    assert KEY not in repr(r.messages) and KEY not in r.stderr


def test_localhost_and_a_dual_stack_squatter_are_found(home: Path, second_user: SecondUser) -> None:
    squat = second_user.listen(address="::")  # takes 127.0.0.1 and ::1 alike
    try:
        refused(on_ollama(home, f"http://localhost:{squat.port}"), squat, "ollama_listener_users")
        assert squat.received() == []
    finally:
        squat.close()


def test_ollama_host_0000_is_this_machine_too(home: Path, squat: Squat) -> None:
    # OLLAMA_HOST=0.0.0.0 is how servers are often configured; Linux connects it to 127.0.0.1.
    r = on_ollama(home, "", env=worker_env(OLLAMA_HOST=f"0.0.0.0:{squat.port}"))
    refused(r, squat, "ollama_listener_users")
    assert squat.received() == []


def test_a_user_named_in_config_is_trusted(home: Path, squat: Squat) -> None:
    # The person's own server running as another user of theirs: named, it is sent to (the
    # helper answers no chat, so the run still fails, later, on its reply).
    r = on_ollama(home, f"http://127.0.0.1:{squat.port}", ollama_listener_users=[SECOND])
    assert "held by another user" not in (r.result.error or "")
    assert any("POST /api/chat" in got for got in squat.received())
    r = on_provider(home, f"http://127.0.0.1:{squat.port}/v1", listener_users=[SECOND])
    assert "held by another user" not in (r.result.error or "")
    assert any(f"Bearer {KEY}" in got for got in squat.received())
