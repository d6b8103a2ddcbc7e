"""The connector's decision (worker/connector.py): every address a host name resolved to is
classed, and one of this machine must be served by us, root, `ollama` or a user the setting
names. On /proc/net/tcp(6) text (tests/routines/test_listeners.py's table), a user table, and an
injected resolver: an /etc/hosts alias cannot be written by a test running as vinos-test, so
ALIASES stands for one (the resolver is the seam it takes); numeric short forms (`127.1`,
`0177.0.0.1`) go through the real getaddrinfo, which reads them as inet_aton does. The same
chains against a real second user's listener: tests/worker/test_worker_squatter.py."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from routines.listeners import Listener
from tests.routines.test_listeners import ME, NAMES, OTHER, TABLE
from worker import connector
from worker.connector import Connector, Refused, Trust, Where, decide

OLLAMA = connector.ollama_trust()
ALIASES = {  # what an /etc/hosts or a DNS answer could say
    "localhost": ["127.0.0.1", "::1"],
    "localhost.": ["127.0.0.1", "::1"],
    "ollama-box": ["127.0.0.1"],
    "dual.test": ["::1", "127.0.0.1"],
    "api.example.com": ["93.184.216.34"],
    "printer.lan": ["2001:db8:5::7"],
    "me.lan": ["192.0.2.99"],  # this machine's own LAN address
}
ON_LINK = (ipaddress.ip_network("2001:db8:5::/64"),)


def resolver(host: str, port: int) -> Sequence[str]:
    if host in ALIASES:
        return ALIASES[host]
    if not host[:1].isdigit() and ":" not in host:
        raise OSError(f"{host}: not resolved in this test (no DNS)")
    return connector.resolve(host, port)  # a numeric form: no lookup leaves the machine


def make(table: list[Listener] = TABLE, routes: Sequence[object] = ON_LINK) -> Connector:
    return Connector(
        resolver=resolver,
        listeners=lambda: table,
        name_of=NAMES.get,
        me=ME,
        routes=lambda: routes,  # type: ignore[arg-type,return-value]
        mine=lambda a: a == "192.0.2.99",
    )


def check(url: str, trust: Trust = OLLAMA) -> None:
    make().check(url, trust)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:1000",  # ours
        "http://127.0.0.1:1001/v1",  # root's
        "http://127.0.0.1:11434",  # ollama's, trusted by name
        "http://127.0.0.1:2000",  # nobody listens: the request fails on its own
        "http://127.0.0.1:1005",  # only a connection there
        "http://127.0.0.1:1009",  # ::1 is not 127.0.0.1
        "http://192.0.2.7:1004",  # off this machine: the network decides
        "https://api.example.com/v1",
        "http://ollama-box:1000",  # an alias of loopback, ours
        "http://nowhere.test:1004",  # does not resolve: fails on its own
    ],
)
def test_ours_root_ollama_and_elsewhere_may_be_sent_to(url: str) -> None:
    check(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:1004",
        "http://127.0.0.1:1006",  # bound to 0.0.0.0
        "http://127.0.0.1:1008",  # bound to ::
        "http://[::1]:1009",
        "http://localhost:1004",
        "http://LOCALHOST.:1004",
        "http://0.0.0.0:1004",  # Linux connects 0.0.0.0 to 127.0.0.1
        "http://[::ffff:127.0.0.1]:1004",
        "http://127.0.0.2:1007",
        # The chains that got through: the URL named loopback in a form the old check
        # (on the URL's spelling) did not know. Decided now on what the name resolves to.
        "http://127.1:1004",
        "http://0177.0.0.1:1004",
        "http://2130706433:1004",
        "http://ollama-box:1004",  # an /etc/hosts alias (ALIASES stands for it)
        "http://dual.test:1000",  # ours on 127.0.0.1, theirs on ::1: either may be reached
        "http://me.lan:1006",  # this machine's LAN address: the 0.0.0.0 socket answers
    ],
)
def test_anyone_else_is_refused_naming_url_address_port_and_user(url: str) -> None:
    with pytest.raises(Refused) as caught:
        check(url)
    message = str(caught.value)
    port = url.rsplit(":", 1)[1]
    assert message.startswith(f"Ollama at {url.split('/', maxsplit=1)[0]}//")
    assert f"port {port} of this machine is held by another user's program" in message
    assert f"(uid {OTHER}, user mallory)" in message
    assert "nothing was sent to it" in message
    assert 'add "mallory" to ollama_listener_users in ~/.vinos/routines/config.toml' in message


def test_the_refusal_says_what_the_name_resolved_to() -> None:
    with pytest.raises(Refused, match=r"ollama-box resolves to 127\.0\.0\.1, and port 1004"):
        check("http://ollama-box:1004/api")
    with pytest.raises(Refused, match=r"127\.1 resolves to 127\.0\.0\.1, and port 1004"):
        check("http://127.1:1004")
    with pytest.raises(
        Refused, match=r"at http://127\.0\.0\.1:1004/…: 127\.0\.0\.1 is this machine"
    ):
        check("http://127.0.0.1:1004/v1?key=secret")


def test_a_user_named_in_config_is_trusted_and_no_one_else() -> None:
    with pytest.raises(Refused, match="user friend"):
        check("http://127.0.0.1:1003")
    check("http://127.0.0.1:1003", connector.ollama_trust(["friend"]))
    with pytest.raises(Refused, match="user mallory"):
        check("http://127.0.0.1:1004", connector.ollama_trust(["friend"]))


def test_anthropic_and_webhooks_have_no_setting_the_refusal_says_run_it_as_yourself() -> None:
    for trust, what in ((connector.ANTHROPIC, "Anthropic"), (connector.WEBHOOK, "webhook")):
        with pytest.raises(Refused) as caught:
            check("http://127.1:1004/hook/T0KEN", trust)
        message = str(caught.value)
        assert message.startswith(f"{what} at http://127.1:1004/…: 127.1 resolves to 127.0.0.1")
        assert "T0KEN" not in message  # a webhook's path is its token: never shown
        assert "If that server is yours, run it as your own user" in message


def test_a_uid_without_a_name_is_never_trusted() -> None:
    c = Connector(
        resolver=resolver,
        listeners=lambda: TABLE,
        name_of=lambda _: None,
        me=ME,
        mine=lambda _: False,
    )
    with pytest.raises(Refused, match=r"uid 1002, no user name.*give uid 1002 a user name"):
        c.check("http://127.0.0.1:1004", connector.ollama_trust(["mallory"]))


def test_the_table_and_routes_are_read_only_for_what_needs_them() -> None:
    def no_read() -> list[Listener]:
        raise AssertionError("read the socket tables for an address off this machine")

    def no_routes() -> Sequence[ipaddress.IPv4Network]:
        raise AssertionError("read the routes for a loopback address")

    Connector(resolver=resolver, listeners=no_read, mine=lambda _: False).check(
        "https://api.example.com/v1", OLLAMA
    )
    Connector(resolver=resolver, listeners=lambda: TABLE, routes=no_routes, me=ME).check(
        "http://127.0.0.1:1000", OLLAMA
    )


def test_each_address_is_classed_and_returned_in_the_resolvers_order() -> None:
    def classes(addresses: list[str], port: int = 1000) -> list[tuple[str, Where]]:
        got = decide(
            "http://x",
            "x",
            port,
            addresses,
            OLLAMA,
            listeners=lambda: TABLE,
            name_of=NAMES.get,
            me=ME,
            on_link=lambda: ON_LINK,
            mine=lambda a: a == "192.0.2.99",
        )
        return list(got)

    assert classes(["127.0.0.1", "::ffff:127.0.0.1", "0.0.0.0"]) == [
        ("127.0.0.1", Where.MACHINE),
        ("::ffff:127.0.0.1", Where.MACHINE),
        ("0.0.0.0", Where.MACHINE),
    ]
    assert classes(["192.0.2.99", "169.254.169.254", "fe80::1", "10.0.0.5", "fd00::5"]) == [
        ("192.0.2.99", Where.MACHINE),
        ("169.254.169.254", Where.LINK),
        ("fe80::1", Where.LINK),
        ("10.0.0.5", Where.LAN),
        ("fd00::5", Where.LAN),
    ]
    # A global IPv6 address inside an on-link prefix is the LAN; outside it, the internet.
    assert classes(["2001:db8:5::7", "2001:db8:6::7", "93.184.216.34"]) == [
        ("2001:db8:5::7", Where.LAN),
        ("2001:db8:6::7", Where.INTERNET),
        ("93.184.216.34", Where.INTERNET),
    ]


def test_a_loopback_alias_is_never_sent_through_a_proxy() -> None:
    # An alias of loopback that HTTP(S)_PROXY does not exempt would go to the proxy, which
    # connects on to it where no check of ours reaches.
    with pytest.raises(Refused, match=r"would go through the proxy at proxy\.corp:3128"):
        make().not_proxied(
            "http://ollama-box:1000/x", "ollama-box", 1000, "proxy.corp", 3128, OLLAMA
        )
    make().not_proxied(
        "https://api.example.com/", "api.example.com", 443, "proxy.corp", 3128, OLLAMA
    )
    make().not_proxied("https://nowhere.test/", "nowhere.test", 443, "proxy.corp", 3128, OLLAMA)
