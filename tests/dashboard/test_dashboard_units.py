"""The dashboard's pure parts: the gate's decision, link sanitising, Markdown, SVG charts."""

from __future__ import annotations

import re
import stat
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from dashboard.app import home_relative
from dashboard.charts import Layer, Line, stacked_bars
from dashboard.render import markdown, safe_url
from dashboard.security import AccessVerdict, Secrets, check, cookie_values, new_token

LAUNCH = "l" * 43
SESSION = "s" * 43
BASE = "/s/" + "b" * 24
PORT = 8742


def verdict(
    method: str = "GET", path: str = "/", query: str = "", launch: str = LAUNCH, **headers: str
) -> AccessVerdict:
    h = {"host": f"127.0.0.1:{PORT}", **{k.replace("_", "-"): v for k, v in headers.items()}}
    return check(
        launch=launch,
        session=SESSION,
        base=BASE,
        port=PORT,
        method=method,
        path=path if path.startswith(("/s/", "/?")) or "token" in query else BASE + path,
        query=query,
        headers=h,
    )


def test_gate_decisions() -> None:
    cookie = f"vinos_dashboard={SESSION}"
    assert verdict(cookie=cookie).allow
    assert not verdict().allow
    assert not verdict(cookie="vinos_dashboard=" + "x" * 43).allow
    assert not verdict(cookie=cookie, host="localhost:1").allow
    v = verdict(path="/cost", query=f"token={LAUNCH}&a=1")
    assert v.allow and v.set_cookie and v.location == f"{BASE}/cost?a=1"
    # Outside the base path the cookie opens nothing; inside, the base itself is a page.
    assert not verdict(path="/s/other/", cookie=cookie).allow
    assert not verdict(path=BASE + "x", cookie=cookie).allow
    assert verdict(path=BASE, cookie=cookie).allow
    # The token in a POST's URL is not a way in (a form on another site could carry it).
    assert not verdict("POST", query=f"token={LAUNCH}").allow
    assert verdict("POST", cookie=cookie, origin=f"http://localhost:{PORT}").allow
    assert not verdict("POST", cookie=cookie, origin="http://127.0.0.1:9").allow
    assert not verdict("POST", cookie=cookie, sec_fetch_site="same-site").allow


def test_the_three_secrets_are_apart() -> None:
    # The launch token is not a cookie, the cookie is not a token, and neither is the CSRF.
    assert not verdict(cookie=f"vinos_dashboard={LAUNCH}").allow
    assert not verdict(query=f"token={SESSION}").allow
    # Once exchanged (launch ""), no token opens anything, not even the one just used.
    assert not verdict(query=f"token={LAUNCH}", launch="").allow
    assert not verdict(query="token=", launch="").allow
    a, b = Secrets.new(), Secrets.new()
    assert len({a.session, a.csrf, b.session, b.csrf}) == 4  # random, per start, unrelated
    assert a.base != b.base and a.base.startswith("/s/") and "/" not in a.base[3:]


def test_a_post_must_say_it_comes_from_this_origin() -> None:
    cookie = f"vinos_dashboard={SESSION}"
    refused = verdict("POST", cookie=cookie)
    assert not refused.allow and "Origin" in refused.reason
    assert verdict("POST", cookie=cookie, sec_fetch_site="same-origin").allow
    assert not verdict("POST", cookie=cookie, sec_fetch_site="none").allow
    assert verdict("POST", cookie=cookie, origin=f"http://127.0.0.1:{PORT}").allow
    both = {"origin": f"http://127.0.0.1:{PORT}", "sec_fetch_site": "same-site"}
    assert not verdict("POST", cookie=cookie, **both).allow


def test_a_cookie_another_port_tossed_does_not_hide_ours() -> None:
    header = f"vinos_dashboard=tossed; other=1; vinos_dashboard={SESSION}"
    assert cookie_values(header) == ["tossed", SESSION]
    assert verdict(cookie=header).allow


@pytest.mark.parametrize(
    ("url", "safe"),
    [
        ("https://example.org/a?b#c", True),
        ("http://x.example", True),
        ("http://x", False),  # one label: a name on the local network
        ("mailto:me@example.org", True),
        ("/run/abc", True),
        ("relative/path", True),
        ("#anchor", True),
        ("javascript:alert(1)", False),
        ("JavaScript:alert(1)", False),
        ("java\tscript:alert(1)", False),
        ("java\nscript:alert(1)", False),
        (" javascript:alert(1)", False),
        ("\x01javascript:alert(1)", False),
        ("vbscript:msgbox", False),
        ("data:text/html;base64,PHNjcmlwdD4=", False),
        ("file:///etc/passwd", False),
    ],
)
def test_safe_url(url: str, safe: bool) -> None:
    assert safe_url(url) is safe


def test_markdown_escapes_html_and_drops_unsafe_links() -> None:
    html = markdown(
        "# T\n<script>x()</script>\n\n[a](javascript:x()) [b](https://ok.example/) "
        '<a href="javascript:x()">c</a> ![i](https://t.example/p.png)'
    )
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'href="javascript' not in html
    assert '<a href="https://ok.example/" rel="noopener noreferrer nofollow">b</a>' in html
    assert "<img" not in html and "[i: https://t.example/p.png]" in html
    assert "<h1>T</h1>" in html


# Every spelling of this machine or its network a browser accepts: each would carry the
# dashboard's cookie (per host, not per port) or reach the LAN.
LOCAL_LINKS = [
    "http://127.0.0.1:9999/",
    "//127.0.0.1:9999/",
    "/\\127.0.0.1:9999/",
    "\\\\127.0.0.1:9999/",
    " //127.0.0.1:9999/",
    "/\t/127.0.0.1:9999/",
    "http:127.0.0.1:9999/",
    "http:\\\\127.0.0.1:9999/",
    "https:///127.0.0.1:9999/",
    "http://user@127.0.0.1:9999/",
    "http://127.1/",
    "http://127.0.1/",
    "http://0x7f000001/",
    "http://0x7f.0.0.1/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://017700000001/",
    "http://0/",
    "http://0.0.0.0:9999/",
    "http://127.0.0.1.:9999/",
    "http://%31%32%37.0.0.1/",
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/",  # full-width digits
    "http://127\u30020\u30020\u30021/",  # ideographic full stops
    "http://[::1]:9999/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::127.0.0.1]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[2002:7f00:1::]/",
    "http://[::]/",
    "http://[fe80::1%25eth0]/",
    "http://[fd00::1]/",
    "http://localhost:9999/",
    "http://LOCALHOST/",
    "http://localhost./",
    "http://localhost../",
    "http://evil.localhost/",
    "http://\u24dbocalhost/",  # circled l: IDNA maps it to "l"
    "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/",  # full-width letters
    "http://10.0.0.1/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",
    "http://169.254.169.254/",
    "http://224.0.0.1/",
    "http://router/",
    "http://printer.local/",
    "http://nas.home.arpa/",
    "http://256.0.0.1/",
]


@pytest.mark.parametrize("url", LOCAL_LINKS)
def test_a_link_to_this_machine_or_its_network_is_refused(url: str) -> None:
    assert safe_url(url) is False
    html = markdown(f"[x]({url}) and <{url}>")
    assert "<a " not in html


@pytest.mark.parametrize(
    "url",
    ["https://example.org/", "http://8.8.8.8/", "http://[2606:4700::1111]/", "https://bücher.de/"],
)
def test_a_link_to_a_public_host_stays_a_link(url: str) -> None:
    assert safe_url(url) is True
    assert "<a href=" in markdown(f"[x]({url})")


def test_a_refused_link_is_shown_as_its_text() -> None:
    html = markdown("see [the report](http://127.0.0.1:9999/steal)")
    assert "<a " not in html
    assert "[the report](http://127.0.0.1:9999/steal)" in html


def test_chart_has_one_bar_per_day_and_the_cap_line() -> None:
    days = [date(2026, 11, 4) + timedelta(days=n) for n in range(30)]
    svg = stacked_bars(
        days,
        [Layer("a", "s0", {days[0]: 0.1, days[5]: 0.2}), Layer("b<x>", "s1", {days[5]: 0.05})],
        [Line("daily cap", 0.3)],
        fmt=lambda v: f"${v:.2f}",
        title="spend",
    )
    assert len(re.findall(r'<g class="bar"', svg)) == 30
    assert re.findall(r'data-day="([\d-]+)"', svg) == [d.isoformat() for d in days]
    assert 'data-day="2026-11-09" data-total="0.25"' in svg
    assert svg.count('class="seg ') == 3  # zero days draw no segment
    assert "daily cap $0.30" in svg
    assert "b&lt;x&gt;" in svg and "b<x>" not in svg  # names are escaped


def test_chart_of_nothing_still_has_its_days() -> None:
    days = [date(2026, 1, 1) + timedelta(days=n) for n in range(7)]
    svg = stacked_bars(days, [], title="none")
    assert svg.count('<g class="bar"') == 7
    assert 'class="seg' not in svg


def test_a_new_token_replaces_the_file_and_never_follows_a_link(tmp_path: Path) -> None:
    path = tmp_path / "rt" / "dashboard.token"
    first = new_token(path)
    assert len(first) >= 43 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == first
    second = new_token(path)
    assert second != first and path.read_text().strip() == second
    path.unlink()
    (tmp_path / "elsewhere").write_text("A" * 43)
    path.symlink_to(tmp_path / "elsewhere")
    third = new_token(path)
    assert not path.is_symlink() and path.read_text().strip() == third
    assert (tmp_path / "elsewhere").read_text() == "A" * 43


def test_the_overview_shows_each_routines_spending_today_in_its_own_zone(tmp_path: Path) -> None:
    """The overview's and a routine page's today column, from spent_today_many: a routine in
    Auckland and one in UTC, the same run times, each summed by its own calendar day."""

    from dashboard import views
    from routines.ledger import Ledger
    from routines.runs import RunEnd, RunStatus, Trigger
    from routines.spec.paths import Paths
    from routines.spec.registry import scan

    p = Paths(home=tmp_path / "home", system_dir=tmp_path / "system", runtime_dir=tmp_path)
    p.routines_dir.mkdir(parents=True)
    for name, zone in (("kiwi", "Pacific/Auckland"), ("utc", "UTC")):
        (p.routines_dir / f"{name}.toml").write_text(
            '[routine]\nkind = "command"\ndescription = "d"\n\n[schedule]\n'
            f'cron = "0 6 * * *"\ntimezone = "{zone}"\n\n[command]\nrun = "true"\n'
        )
    now = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)  # 01:00 on 2 June in Auckland
    with Ledger(p.ledger) as led:
        for name in ("kiwi", "utc"):
            for minutes, dollars in ((30, 0.5), (720, 0.25)):  # at 12:30 and 01:00 UTC
                run_id = f"{name}-{minutes}"
                started = now - timedelta(minutes=minutes)
                led.record_run(name, run_id=run_id, trigger=Trigger.MANUAL,
                               status=RunStatus.RUNNING, now=started)  # fmt: skip
                led.finish_run(run_id, RunEnd(RunStatus.OK, dollars=dollars), now=now)
        registry = scan(p)
        lines = {ln.name: ln for ln in views.overview(registry, led, None, "", now).routines}
        page = views.routine_page("kiwi", registry, led, now, ZoneInfo("UTC"), {}, 5)
    # Auckland's 2 June began at 12:00 UTC: only the 12:30 run is today there; both in UTC.
    assert (lines["kiwi"].today_dollars, lines["utc"].today_dollars) == (0.5, 0.75)
    assert page is not None and page.line.today_dollars == 0.5


def test_a_path_below_home_is_shown_from_the_tilde() -> None:
    assert home_relative(Path("/home/ana/.vinos/routines/x.toml"), "/home/ana") == (
        "~/.vinos/routines/x.toml"
    )
    assert home_relative("/home/anabel/x.toml", "/home/ana") == "/home/anabel/x.toml"
    assert home_relative("/etc/vinos/routines/x.toml", "/home/ana/") == "/etc/vinos/routines/x.toml"
