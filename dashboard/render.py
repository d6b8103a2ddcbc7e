"""Markdown for untrusted text (routine outputs, model text, command output): raw HTML off,
links and images limited to safe schemes, so a `<script>` or a `javascript:` link in an
output is shown as text, never run. markdown-it-py escapes everything it does not render."""

from __future__ import annotations

from functools import lru_cache
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

__all__ = ["SAFE_SCHEMES", "markdown", "safe_url"]

SAFE_SCHEMES = ("http:", "https:", "mailto:")


def safe_url(url: str) -> bool:
    """A link target that cannot run code: http(s), mailto, or relative (no scheme at all)."""
    # Browsers ignore ASCII whitespace and control characters inside a scheme ("java\tscript:").
    squeezed = "".join(ch for ch in url if ord(ch) > 0x20 and ord(ch) != 0x7F).lower()
    head = squeezed.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if ":" not in head:
        return True
    return squeezed.startswith(SAFE_SCHEMES)


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
