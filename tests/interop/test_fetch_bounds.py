"""Every card fetch is bounded as a whole and every failure of the HTTP client is a FetchError: real
hostile servers on 127.0.0.1 (tests/hostile_http.py), the library call and `a3fast import a2a URL`
(exit 2, the failure named, no traceback)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from a3fast.interop.fetch import FetchError, Limits, fetch_card

from hostile_http import (RawServer, dripping, elapsed, read_request, redirecting_to, resetting,
                          self_signed_context, sending)


@pytest.fixture
def serve():
    servers: list[RawServer] = []

    def start(answer, tls=None) -> RawServer:
        servers.append(server := RawServer(answer, tls))
        return server
    yield start
    for server in servers:
        server.close()


def _import_a2a(url: str, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "a3fast", "import", "a2a", url, "--namespace", "n", *args],
                          capture_output=True, text=True, timeout=60, env=os.environ.copy())
    return time.monotonic() - started, done


@pytest.mark.slow  # 2 s or more: a deadline waited out, a subprocess, or a page rendered
def test_rule_one_deadline_bounds_a_server_dripping_its_response_head(serve):
    import httpx  # noqa: F401  (imported before the clock starts)

    server = serve(dripping)
    took, result = elapsed(lambda: fetch_card(server.url, Limits(timeout=1, deadline=2)))
    assert isinstance(result, FetchError), result
    assert "no complete card within 2 s" in result.message and "deadline" in result.message
    assert took < 2 + 1.0, took


@pytest.mark.slow  # 2 s or more: a deadline waited out, a subprocess, or a page rendered
def test_rule_import_a2a_is_cut_off_at_the_deadline_of_its_timeout_and_exits_2(serve):
    server = serve(dripping)
    refused = serve(lambda conn, srv: None)
    refused.close()   # nothing listens there now: the same command failing at once, for its start-up time
    baseline, _ = _import_a2a(refused.url, "--timeout", "1")
    took, done = _import_a2a(server.url, "--timeout", "1")
    # --timeout 1 gives the whole fetch 3 s
    assert done.returncode == 2, done.stderr
    assert "no complete card within 3 s" in done.stderr and "Traceback" not in done.stderr
    assert took < baseline + 3 + 1.5, (took, baseline)


@pytest.mark.parametrize("location", ["javascript:alert(1)", "mailto:someone@example.com",
                                      "data:text/html,<script>alert(1)</script>"])
def test_rule_a_redirect_to_a_scheme_no_client_follows_is_a_fetch_error(serve, location):
    server = serve(redirecting_to(location))
    with pytest.raises(FetchError) as caught:
        fetch_card(server.url, Limits(timeout=1, deadline=3))
    assert server.url in caught.value.message and "not fetched" in caught.value.message
    took, done = _import_a2a(server.url, "--timeout", "1")
    assert done.returncode == 2 and "internal error" not in done.stderr, done.stderr
    assert "a URL the client cannot follow" in done.stderr


def test_a_redirect_with_an_unescaped_space_is_followed_as_a_browser_follows_it(serve):
    card = _card("spaced")
    asked = []

    def answer(conn, server):
        request = read_request(conn)
        asked.append(request.split(b" ")[1])
        if b"/a%20b/" in request.split(b"\r\n")[0]:
            conn.sendall(_answer("200 OK", [(b"Content-Type", b"application/json")], card))
        else:
            conn.sendall(_answer("302 Found", [(b"Location", b"/a b/card.json")]))

    server = serve(answer)
    fetched = fetch_card(server.url + "/card.json", Limits(timeout=2, deadline=5))
    assert fetched.body == card and asked == [b"/card.json", b"/a%20b/card.json"]


def test_rule_a_redirect_to_a_port_past_65535_is_named_as_no_url_to_follow(serve):
    server = serve(redirecting_to("http://127.0.0.1:99999/x"))
    with pytest.raises(FetchError) as caught:
        fetch_card(server.url, Limits(timeout=1, deadline=3))
    assert "redirects to 'http://127.0.0.1:99999/x', which is no URL to follow: its port '99999' is no number " \
           "from 0 to 65535" in caught.value.message, caught.value.message


@pytest.mark.parametrize("answer, message", [
    (resetting, "the connection failed"),
    (sending(b"HTTP/1.1 200 OK\r\nBad Header Line\r\n\r\n"), "not a valid HTTP answer"),
    (sending(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"), "not a valid HTTP answer"),
    (sending(b"HTTP/1.1 302 Found\r\nLocation: http://[::1\r\nContent-Length: 0\r\n\r\n"), "not a valid HTTP answer"),
    (sending(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{"), "not a valid HTTP answer"),
])
def test_rule_every_client_exception_is_a_fetch_error(serve, answer, message):
    server = serve(answer)
    with pytest.raises(FetchError) as caught:
        fetch_card(server.url, Limits(timeout=1, deadline=3))
    assert message in caught.value.message, caught.value.message


@pytest.mark.slow  # 2 s or more: a deadline waited out, a subprocess, or a page rendered
def test_rule_a_certificate_nobody_trusts_is_a_fetch_error(serve, tmp_path):
    server = serve(sending(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"), tls=self_signed_context(tmp_path))
    with pytest.raises(FetchError) as caught:
        fetch_card(server.url, Limits(timeout=1, deadline=3))
    assert "TLS failed" in caught.value.message and "CERTIFICATE_VERIFY_FAILED" in caught.value.message
    took, done = _import_a2a(server.url, "--timeout", "1")
    assert done.returncode == 2 and "TLS failed" in done.stderr, done.stderr



def test_fetch_card_works_where_an_event_loop_already_runs(serve):
    import asyncio

    card = b'{"name": "planner", "skills": [{"id": "plan-trip"}]}'
    server = serve(sending(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                           % (len(card), card)))

    async def in_a_notebook():
        return fetch_card(server.url, Limits(timeout=2, deadline=5))

    fetched = asyncio.run(in_a_notebook())
    assert fetched.body == card and fetched.url == f"{server.url}/.well-known/agent-card.json"


@pytest.mark.parametrize("url, why", [
    ("localhost:8080", "it has no scheme (write http:// or https:// before the host)"),
    ("localhost:8080?x=1", "it has no scheme"),
    ("localhost:", "it has no scheme"),
    ("//example.org/agent", "it has no scheme"),
    ("ftp://example.org/agent", "its scheme is 'ftp'"),
    (" ftp://example.org/agent", "it holds ' ' (a URL holds no space"),   # urlsplit strips it unsaid
    ("http://example.org/a\nb", "it holds '\\n' (a URL holds no space or control character"),
    ("http://example.org/\u2028", "it holds '\\u2028'"),
    ("javascript:alert(1)", "its scheme is 'javascript'"),
    ("http://::1:8080/", "its host and port '::1:8080' hold more than one ':' (an IPv6 address goes in brackets"),
    ("http://host:80:80/", "its host and port 'host:80:80' hold more than one ':'"),
    ("http://host:99999/", "its port '99999' is no number from 0 to 65535"),
    ("http://user:secret@host:x/", "its port 'x' is no number"),
    ("http://[::1]:7x/", "its port '7x' is no number"),
    ("http://[::1/", "its IPv6 address has an unbalanced bracket"),
    ("http:/agent", "it names no host"),
])
def test_a_url_no_client_can_reach_is_refused_saying_what_is_wrong_with_it(url, why):
    from a3fast.interop.fetch import card_locations, http_url

    with pytest.raises(ValueError) as refused:
        http_url(url)
    assert str(refused.value).startswith(why)
    with pytest.raises(FetchError) as refused_card:
        card_locations(url)
    assert refused_card.value.message.endswith(str(refused.value))


@pytest.mark.parametrize("url", ["http://[::1]:8080/agent", "HTTPS://user@example.org:443/a", "http://h:/",
                                 # format characters are no control characters: a ZWNJ in an IDN,
                                 # a ZWJ in an emoji sequence
                                 "https://\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645.ir/",
                                 "https://x.org/\U0001f468\u200d\U0001f469"])
def test_a_url_a_client_can_reach_is_taken(url):
    from a3fast.interop.fetch import http_url

    assert http_url(url).hostname


@pytest.mark.parametrize("text, shown", [
    ("https://user:secret@host/a", "https://host/a"),
    ("https://token@host:8443/a?b=c@d", "https://host:8443/a?b=c@d"),   # an @ past the authority stays
    ("https://u:p@ss@host/", "https://host/"),                          # up to the authority's last @
    ("http://host/a@b", "http://host/a@b"),
    ("mail me at a@b.example", "mail me at a@b.example"),
    ("redirect loop: http://u:p@a/ -> https://v:q@b/x -> http://u:p@a/",
     "redirect loop: http://a/ -> https://b/x -> http://a/"),
])
def test_rule_credentials_of_a_url_are_never_shown(text, shown):
    from a3fast.interop.fetch import FetchError, without_credentials

    assert without_credentials(text) == shown
    error = FetchError(text, f"{text} answered 404")
    assert "secret" not in str(error) and ":p@" not in str(error) and error.url == shown


@pytest.mark.parametrize("url, why", [
    ("https://user:secret@agents.example/a2a", "it holds a user name or password"),
    ("file:///etc/passwd", "its scheme is 'file'"),
    ("javascript:alert(document.domain)", "its scheme is 'javascript'"),
    ("https://a.example/\x1b[31m", "it holds '\\x1b'"),
])
def test_rule_an_endpoint_is_an_http_url_with_a_host_and_no_credentials(url, why):
    from a3fast.interop.fetch import endpoint_problem

    assert endpoint_problem(url).startswith(why)
    assert endpoint_problem("https://agents.example/a2a") is None
    assert endpoint_problem("http://127.0.0.1:8080/") is None


def _card(name: str) -> bytes:
    return b'{"name": "%s", "url": "https://%s.example/", "skills": [{"id": "case.review"}]}' % (name.encode(),
                                                                                               name.encode())


def _answer(status: str, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> bytes:
    head = b"".join(k + b": " + v + b"\r\n" for k, v in headers)
    return (b"HTTP/1.1 " + status.encode() + b"\r\n" + head + b"Content-Length: %d\r\nConnection: close\r\n\r\n"
            % len(body) + body)


def test_a_304_from_where_no_condition_was_sent_is_no_revalidation(serve):
    # the cached card is kept for its first location: a redirect target answering 304, never asked
    # whether anything changed, must not hand that card out under its own host
    from a3fast.interop.fetch import EtagCache

    asked_twice = {"n": 0}
    elsewhere = serve(sending(_answer("304 Not Modified", [(b"ETag", b'"zzz"')])))

    def first(conn, server):
        from hostile_http import read_request

        read_request(conn)
        asked_twice["n"] += 1
        if asked_twice["n"] == 1:
            conn.sendall(_answer("200 OK", [(b"Content-Type", b"application/json"), (b"ETag", b'"v1"')],
                                 _card("alpha")))
        else:
            conn.sendall(_answer("302 Found", [(b"Location",
                                                 elsewhere.url.encode() + b"/.well-known/agent-card.json")]))
    origin = serve(first)
    cache = EtagCache(None)
    assert fetch_card(origin.url, Limits(timeout=5), cache).etag == '"v1"'
    try:
        moved = fetch_card(origin.url, Limits(timeout=5), cache)
    except FetchError as exc:
        assert "answered HTTP 304" in exc.message
    else:
        raise AssertionError(f"a 304 nobody asked for revalidated {moved}")


def test_an_etag_that_cannot_go_back_in_a_header_is_not_kept(serve):
    from a3fast.interop.fetch import EtagCache

    server = serve(sending(_answer("200 OK", [(b"Content-Type", b"application/json"),
                                               (b"ETag", '"café"'.encode())], _card("beta"))))
    cache = EtagCache(None)
    for _ in range(3):          # every fetch succeeds: no If-None-Match the client cannot encode
        assert fetch_card(server.url, Limits(timeout=5), cache).body is not None
