"""`CertificateReloader` on its own (a3fast.service.tls): when it looks at the files, what it says
of files that do not load, and the context each new connection gets. The served behaviour, with
real certificates over real connections, is in test_k8s_tls_deploy.py."""
from __future__ import annotations

import logging
import os
import ssl

from a3fast.service.tls import RELOAD_CHECK_S, CertificateReloader


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_files_that_go_bad_again_after_coming_back_are_said_to_be_bad_again(tmp_path, caplog):
    good, bad, mounted = tmp_path / "good.pem", tmp_path / "bad.pem", tmp_path / "tls.crt"
    good.write_text("good")
    bad.write_text("bad!")
    os.symlink(good, mounted)            # a Secret's file: a link its update moves

    def make() -> ssl.SSLContext:
        if mounted.read_text() != "good":
            raise ValueError("does not load")
        return ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)

    def point_at(target) -> None:
        link = tmp_path / "next"
        os.symlink(target, link)
        link.replace(mounted)

    clock = Clock()
    reloader = CertificateReloader(make, [str(mounted)], clock=clock)
    first = reloader.context()
    caplog.set_level(logging.WARNING, logger="a3fast")
    for target in (bad, good, bad):
        point_at(target)
        clock.now += RELOAD_CHECK_S
        assert reloader.context() is first            # the context loaded first still serves
    refusals = [r.getMessage() for r in caplog.records if "do not load" in r.getMessage()]
    assert len(refusals) == 2, refusals               # each time the files went bad, once


def test_the_files_are_looked_at_no_more_than_once_a_second(tmp_path):
    cert = tmp_path / "tls.crt"
    cert.write_text("one")
    made: list[str] = []

    def make() -> ssl.SSLContext:
        made.append(cert.read_text())
        return ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)

    clock = Clock()
    reloader = CertificateReloader(make, [str(cert)], clock=clock)
    cert.write_text("two!")
    clock.now += RELOAD_CHECK_S / 2
    reloader.context()
    assert made == ["one"]
    clock.now += RELOAD_CHECK_S / 2
    fresh = reloader.context()
    assert made == ["one", "two!"] and reloader.context() is fresh


def test_a_changed_file_that_is_no_regular_file_is_refused_without_reading_it(tmp_path, caplog):
    # start-up refuses a FIFO for --tls-key (`serve`'s checks); a FIFO swapped in while serving
    # would have been opened by OpenSSL on the event loop, waiting for a writer that never comes
    import threading

    from pki import certificate, name, new_key, write_pem

    from a3fast.service.tls import reload_certificates

    ca_key, server_key = new_key(), new_key()
    ca = certificate("a3fast test CA", ca_key, name("a3fast test CA"), ca_key, ca=True)
    cert, key = write_pem(tmp_path, "server", certificate("127.0.0.1", server_key, ca.subject, ca_key,
                                                          server=True), server_key)
    assert key is not None
    reloader = reload_certificates(cert, key, None)
    first = reloader.current
    os.unlink(key)
    os.mkfifo(key)
    caplog.set_level(logging.WARNING, logger="a3fast")
    answers: list[bool] = []
    looking = threading.Thread(target=lambda: answers.append(reloader.check()), daemon=True)
    looking.start()
    looking.join(timeout=10)
    if looking.is_alive():          # let the stuck read go, so the test ends and says why
        with open(key, "wb"):
            pass
        looking.join(timeout=10)
        raise AssertionError("the reload opened the FIFO and waited on it")
    assert answers == [False] and reloader.current is first
    assert any("not a regular file" in r.getMessage() and key in r.getMessage() for r in caplog.records)
