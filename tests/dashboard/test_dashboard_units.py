"""The dashboard's pure parts: the gate's decision, link sanitising, Markdown, SVG charts."""

from __future__ import annotations

import re
import stat
from datetime import date, timedelta
from pathlib import Path

import pytest

from dashboard.charts import Layer, Line, stacked_bars
from dashboard.render import markdown, safe_url
from dashboard.security import AccessVerdict, check, csrf_token, load_or_create_token

SECRET = "s" * 43
PORT = 8742


def verdict(method: str = "GET", path: str = "/", query: str = "", **headers: str) -> AccessVerdict:
    h = {"host": f"127.0.0.1:{PORT}", **{k.replace("_", "-"): v for k, v in headers.items()}}
    return check(secret=SECRET, port=PORT, method=method, path=path, query=query, headers=h)


def test_gate_decisions() -> None:
    cookie = f"vinos_dashboard={SECRET}"
    assert verdict(cookie=cookie).allow
    assert not verdict().allow
    assert not verdict(cookie="vinos_dashboard=" + "x" * 43).allow
    assert not verdict(cookie=cookie, host="localhost:1").allow
    v = verdict(path="/cost", query=f"token={SECRET}&a=1")
    assert v.allow and v.set_cookie and v.location == "/cost?a=1"
    # The token in a POST's URL is not a way in (a form on another site could carry it).
    assert not verdict("POST", query=f"token={SECRET}").allow
    assert verdict("POST", cookie=cookie, origin=f"http://localhost:{PORT}").allow
    assert not verdict("POST", cookie=cookie, origin="http://127.0.0.1:9").allow
    assert not verdict("POST", cookie=cookie, sec_fetch_site="same-site").allow


def test_csrf_token_is_derived_from_the_secret() -> None:
    assert csrf_token(SECRET) == csrf_token(SECRET)
    assert csrf_token(SECRET) != csrf_token("t" * 43)
    assert SECRET not in csrf_token(SECRET)


@pytest.mark.parametrize(
    ("url", "safe"),
    [
        ("https://example.org/a?b#c", True),
        ("http://x", True),
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


def test_token_file_is_kept_only_while_private(tmp_path: Path) -> None:
    path = tmp_path / "rt" / "dashboard.token"
    first = load_or_create_token(path)
    assert len(first) >= 43 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_token(path) == first  # the service and the command agree
    path.chmod(0o644)  # readable by others: no longer a secret
    second = load_or_create_token(path)
    assert second != first and stat.S_IMODE(path.stat().st_mode) == 0o600
    path.unlink()
    (tmp_path / "elsewhere").write_text("A" * 43)
    path.symlink_to(tmp_path / "elsewhere")  # never followed
    third = load_or_create_token(path)
    assert third != "A" * 43 and not path.is_symlink()
