"""The report page's Content Security Policy: the page may run its own inline scripts and styles,
named by their SHA-256 hashes, and nothing else — no other script (an injected one does not run),
no `eval` (Vega's expressions run in its CSP-safe interpreter), no connection, no frame parent when
served over HTTP.

The hashes are taken from the page as rendered: every `<script>` element that is run (not the
`application/json` data element) and every `<style>` element, their text as the browser reads it
(raw text, line breaks normalised), hashed as UTF-8.
"""
from __future__ import annotations

import base64
import hashlib
from html.parser import HTMLParser

__all__ = ["PLACEHOLDER", "source_hash", "inline_sources", "page_policy", "with_policy", "policy_of",
           "HTTP_HEADERS", "HTTP_ONLY"]

#: Where the template puts the policy; replaced by `with_policy` once the page's sources are known.
PLACEHOLDER = "a3fast-content-security-policy"
_META = '<meta http-equiv="Content-Security-Policy" content="'
#: What a page served over HTTP adds to its policy, which only a header can carry.
HTTP_ONLY = "frame-ancestors 'none'"
#: Headers sent with the page over HTTP besides the policy.
HTTP_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def source_hash(text: str) -> str:
    """The CSP source expression allowing an inline element whose text is `text`."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


class _Inline(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.style_attributes = False
        self._open: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.style_attributes = self.style_attributes or any(name == "style" for name, _ in attrs)
        if tag == "script":
            kind = (dict(attrs).get("type") or "").strip().lower()
            runs = kind in ("", "text/javascript", "module", "application/javascript")
            self._open = self.scripts if runs else None
        elif tag == "style":
            self._open = self.styles
        self._text: list[str] = []

    def handle_data(self, data):
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag in ("script", "style") and self._open is not None:
            self._open.append("".join(self._text))
        self._open = None


def inline_sources(html: str) -> tuple[list[str], list[str]]:
    """The text of each inline script that runs, and of each style element, in page order."""
    parser = _parsed(html)
    return parser.scripts, parser.styles


def _parsed(html: str) -> _Inline:
    parser = _Inline()
    parser.feed(html)
    parser.close()
    return parser


def page_policy(scripts: list[str], styles: list[str], *, connect_self: bool = False,
                style_attributes: bool = False) -> str:
    """The policy allowing exactly these inline scripts and styles, images from data: URLs, and
    (for the live page) requests to its own origin. `style_attributes` allows `style="..."`
    attributes (a page drawing bars by width): they can carry no script, and with every fetch
    forbidden no CSS in them can send anything anywhere."""
    script_src = " ".join(dict.fromkeys(source_hash(s) for s in scripts)) or "'none'"
    style_src = " ".join(dict.fromkeys(source_hash(s) for s in styles)) or "'none'"
    parts = ["default-src 'none'", f"script-src {script_src}", f"style-src {style_src}", "img-src data:"]
    if style_attributes:
        parts.insert(3, "style-src-attr 'unsafe-inline'")
    if connect_self:
        parts.append("connect-src 'self'")
    return "; ".join(parts)


def with_policy(html: str, *, connect_self: bool = False) -> str:
    """The page with its policy (in place of the template's placeholder, or of the policy it holds)
    computed from the inline scripts, styles and style attributes it now has."""
    parsed = _parsed(html)
    policy = page_policy(parsed.scripts, parsed.styles, connect_self=connect_self,
                         style_attributes=parsed.style_attributes)
    start = html.find(_META)
    if start < 0:
        raise ValueError("the page has no Content-Security-Policy meta element")
    start += len(_META)
    end = html.index('"', start)
    return html[:start] + policy + html[end:]


def policy_of(html: str) -> str:
    """The policy a page's meta element holds."""
    start = html.find(_META)
    if start < 0:
        raise ValueError("the page has no Content-Security-Policy meta element")
    start += len(_META)
    return html[start:html.index('"', start)]
