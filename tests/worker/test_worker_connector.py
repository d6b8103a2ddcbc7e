"""The connector inside the HTTP clients (worker/webclient.py's network backend), apart from
the check made before a provider is built (worker/context.py): each client decides every
connection as it is made, from one resolution, and connects to what it decided.

The SDKs' own clients are tested built directly, with no pre-check, against a real second
user's listener (tests/helpers/squatter.py): the refusal must come from the transport, with
nothing sent. The rebinding test injects a resolver (the seam a DNS answer would change)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from routines.spec.providers import ProviderKind, ProviderSettings
from tests.dashboard.squatkit import Squat
from tests.fakes import FakeOllama
from tests.fakes import ollama_replies as O
from worker import connector, webclient
from worker.providers.base import Conversation, ProviderError, UserTurn

KEY = "sk-in-transport-9f8e7d"
CONV = Conversation(system="s", turns=[UserTurn("the prompt: quarterly numbers")])


def test_a_connection_goes_to_the_address_decided_from_one_resolution(
    ollama: FakeOllama,
) -> None:
    # DNS rebinding: a name that answers loopback (ours) to the check and elsewhere to a
    # second lookup. There is no second lookup: the resolver is asked once per connection
    # and the connection is made to the address it answered.
    port = int(ollama.url.rsplit(":", 1)[1])
    answers: list[str] = []

    def rebinding(host: str, _: int) -> Sequence[str]:
        answers.append(host)
        return ["127.0.0.1"] if len(answers) == 1 else ["192.0.2.1"]

    web = webclient.WebClient(connector=connector.Connector(resolver=rebinding))
    ollama.add(O.text("one"))
    ollama.add(O.text("two"))
    url = f"http://rebind.test:{port}/api/chat"
    for _ in range(2):  # the second request reuses the kept-alive connection
        resp = web.post_json(url, {"stream": False}, timeout=30, trust=connector.ollama_trust())
        assert resp.status == 200
    web.close()
    assert answers == ["rebind.test"]
    assert len(ollama.requests) == 2


def test_the_anthropic_sdks_client_refuses_in_transport(
    squat: Squat, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.providers.anthropic import AnthropicProvider

    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.1:{squat.port}")
    provider = AnthropicProvider(KEY, max_retries=0)
    with pytest.raises(ProviderError) as caught:
        provider.complete(CONV, [], model="claude-x", max_tokens=10, timeout=30)
    message = str(caught.value)
    assert message.startswith(f"Anthropic at http://127.1:{squat.port}/")
    assert f"127.1 resolves to 127.0.0.1, and port {squat.port} of this machine" in message
    assert squat.received() == []


def test_the_openai_sdks_client_refuses_in_transport(squat: Squat) -> None:
    from worker.providers.openai import OpenAIProvider

    settings = ProviderSettings(
        "gpu", ProviderKind.OPENAI, f"http://2130706433:{squat.port}/v1", local=True
    )
    provider = OpenAIProvider(settings, api_key=KEY, max_retries=0)
    with pytest.raises(ProviderError) as caught:
        provider.complete(CONV, [], model="m", max_tokens=10, timeout=30)
    message = str(caught.value)
    assert message.startswith(f'provider "gpu" at http://2130706433:{squat.port}/')
    assert 'add "vinos-test2" to [providers.gpu].listener_users' in message
    assert squat.received() == []


def test_a_client_with_no_trust_connects_nowhere(ollama: FakeOllama) -> None:
    # WebClient's own client is shared by Ollama and webhooks: each request says whom it
    # may reach; a connection without that is refused, not made.
    http, _ = webclient.deadline_client(None)
    with pytest.raises(connector.Refused, match="nobody said whom it may reach"):
        http.post(ollama.url + "/api/chat", json={})
    http.close()
    assert ollama.requests == []


def test_a_proxy_on_another_users_port_gets_no_plain_request(
    squat: Squat, monkeypatch: pytest.MonkeyPatch
) -> None:
    # HTTP_PROXY at a loopback port the second user holds: a plain-HTTP request would go to
    # it whole (a webhook's body and token). The proxy's owner is checked like any server's.
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{squat.port}")
    web = webclient.WebClient()
    with pytest.raises(connector.Refused) as caught:
        web.post_json(
            "http://192.0.2.1/hook/T0KEN", {"k": KEY}, timeout=10, trust=connector.WEBHOOK
        )
    web.close()
    message = str(caught.value)
    assert message.startswith("webhook at http://192.0.2.1/…: 127.0.0.1 is this machine")
    assert message.endswith("That port is the proxy HTTP(S)_PROXY names")
    assert squat.received() == []


def test_a_tls_tunnel_through_a_proxy_is_not_refused_and_carries_nothing_readable(
    squat: Squat, monkeypatch: pytest.MonkeyPatch
) -> None:
    # HTTPS through a proxy: the proxy sees `CONNECT host:443`, then TLS it cannot read, so
    # a system proxy on loopback (squid as `proxy`, cntlm) is not refused; the second user
    # standing in for it learns the host name and nothing else (it never answers: timeout).
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{squat.port}")
    web = webclient.WebClient()
    with pytest.raises(webclient.HttpError):
        web.post_json(
            "https://api.example.com/v1/x",
            {"k": KEY},
            timeout=3,
            headers={"Authorization": f"Bearer {KEY}"},
            trust=connector.ANTHROPIC,
        )
    web.close()
    received = squat.received()
    assert len(received) == 1 and received[0].startswith("CONNECT api.example.com:443 ")
    assert KEY not in received[0]
