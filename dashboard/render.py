"""Markdown for untrusted text (routine outputs, model text, command output): raw HTML off,
links limited to public http(s) hosts, mailto and this server's own paths (`safe_url`), so a
`<script>`, a `javascript:` link or a link to another port of 127.0.0.1 in an output is shown
as text, never run or followed. markdown-it-py escapes everything it does not render."""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

__all__ = ["SAFE_SCHEMES", "link_host", "markdown", "public_host", "safe_url"]

SAFE_SCHEMES = ("http:", "https:", "mailto:")
# Names that mean this machine or the local network, whatever DNS says.
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa", ".localdomain")
# Full stops browsers map to "." in a host (UTS 46): "127。0。0。1" is 127.0.0.1.
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


def safe_url(url: str) -> bool:
    """A link target an output may carry (pure): a relative path of this page's own server,
    mailto, or http(s) to a public host. Refused: other schemes (`javascript:`), a
    protocol-relative `//host` (and `/\\host`, which browsers read the same), and hosts that
    are loopback, private, link-local, CGNAT or otherwise not global, however spelled
    (`127.1`, `0x7f000001`, `[::1]`, `localhost.`, full-width digits). The dashboard's cookie
    is per host, not per port: a link to another port of 127.0.0.1 would hand it to whoever
    listens there."""
    # Browsers drop ASCII tab and newline anywhere, and leading/trailing controls and spaces.
    squeezed = "".join(ch for ch in url if ch not in "\t\n\r").strip("\x00- ")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in squeezed):
        return False
    lowered = squeezed.lower()
    head = lowered.split("/", 1)[0].split("\\", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if ":" not in head:
        # Relative: a path of this server, never `//host` or `\\host` (nor encoded as %5C).
        from urllib.parse import unquote

        return not unquote(lowered).startswith(("//", "/\\", "\\"))
    if lowered.startswith("mailto:"):
        return True
    if not lowered.startswith(("http:", "https:")):
        return False
    host = link_host(squeezed.split(":", 1)[1])
    return host is not None and public_host(host)


def link_host(rest: str) -> str | None:
    """The host of an http(s) URL after its scheme's colon, as a browser finds it: any run of
    slashes and backslashes, then the authority up to the next / \\ ? #, without userinfo
    and port (pure). None when there is none."""
    authority = rest.lstrip("/\\")
    for stop in "/\\?#":
        authority = authority.split(stop, 1)[0]
    authority = authority.rpartition("@")[2]
    if authority.startswith("["):
        end = authority.find("]")
        return authority[: end + 1] if end > 0 else None
    host = authority.split(":", 1)[0]
    return host or None


def public_host(host: str) -> bool:
    """Whether `host` (from a URL) names a host on the internet, not this machine or its
    network (pure). It is read as the browser would: percent-decoded, mapped as IDNA does
    (NFKC, case folded), trailing dots dropped, numbers in any IPv4 form."""
    import unicodedata
    from urllib.parse import unquote

    if host.startswith("["):
        try:
            address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv6Address(
                host[1:-1].split("%", 1)[0]
            )
        except ValueError:
            return False
        return _global(address)
    # markdown-it hands over hosts in punycode: decoded first, so a label that spells a
    # full-width "１２７" is read as the digits IDNA would map it to.
    labels = [_unpuny(label) for label in unquote(host).split(".")]
    name = unicodedata.normalize("NFKC", ".".join(labels)).casefold().translate(_DOTS)
    name = name.rstrip(".")
    if not name or any(ch in name for ch in " %/\\@[]") or ".." in name:
        return False
    number = _ipv4(name)
    if number is not None:
        return number >= 0 and _global(ipaddress.IPv4Address(number))
    # A single label ("router") is a name on the local network.
    return "." in name and name != "localhost" and not name.endswith(_LOCAL_SUFFIXES)


def _unpuny(label: str) -> str:
    if label[:4].lower() != "xn--":
        return label
    try:
        return label[4:].encode("ascii").decode("punycode")
    except (UnicodeError, ValueError):
        return label


def _ipv4(name: str) -> int | None:
    """The WHATWG URL standard's IPv4 parser: a host whose last label is a number is an
    address, each part decimal, 0x-hex or 0-octal, the last filling the remaining bytes
    (`127.1`, `0x7f000001`, `2130706433`, `0177.0.0.1`). None when the host is a name; -1
    when it looks like an address but is not a valid one (a browser refuses it too)."""
    labels = name.split(".")
    if not _number(labels[-1]) and not (labels[-1] == "" and len(labels) > 1):
        return None
    if labels[-1] == "":
        labels = labels[:-1]
    if len(labels) > 4 or not all(_number(p) for p in labels):
        return -1 if _number(labels[-1]) else None
    parts = [_value(p) for p in labels]
    if any(p > 255 for p in parts[:-1]) or parts[-1] >= 256 ** (5 - len(parts)):
        return -1
    total = parts[-1]
    for i, p in enumerate(parts[:-1]):
        total += p << (8 * (3 - i))
    return total


def _number(label: str) -> bool:
    if label[:2] in ("0x", "0X"):
        return all(c in "0123456789abcdefABCDEF" for c in label[2:])
    return label.isascii() and label.isdigit()


def _value(label: str) -> int:
    if label[:2] in ("0x", "0X"):
        return int(label[2:] or "0", 16)
    if len(label) > 1 and label.startswith("0"):
        return int(label, 8) if all(c in "01234567" for c in label) else 1 << 40
    return int(label)


def _global(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A unicast address on the internet: not loopback, private, link-local, CGNAT
    (100.64/10), unspecified, reserved or multicast; an IPv6 form of an IPv4 address (mapped,
    compatible, NAT64 64:ff9b::/96, 6to4) is judged by that address."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and int(address) >> 32 == 0 and int(address) > 1:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)  # ::a.b.c.d (compatible)
        if inner is None and address in ipaddress.IPv6Network("64:ff9b::/96"):
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None:
            return _global(inner)
    return address.is_global and not address.is_multicast


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable("table")
    md.enable("strikethrough")
    md.validateLink = safe_url  # type: ignore[method-assign]

    def link_open(renderer, tokens, idx, options, env):  # type: ignore[no-untyped-def]
        # Outputs are written by a model: a link leaves this page without a referrer.
        tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
        return renderer.renderToken(tokens, idx, options, env)

    md.add_render_rule("link_open", link_open)

    def image(renderer, tokens, idx, options, env):  # type: ignore[no-untyped-def]
        # No images from anywhere (the CSP forbids them too): the alt text and the address.
        token = tokens[idx]
        alt = escape(token.content or "image")
        src = escape(str(token.attrGet("src") or ""))
        return f'<span class="image-ref">[{alt}: {src}]</span>'

    md.add_render_rule("image", image)
    return md


def markdown(text: str) -> str:
    """HTML for `text`; anything that is not Markdown is escaped, never passed through."""
    html: str = _parser().render(text)
    return html
