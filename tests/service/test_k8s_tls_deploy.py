"""mTLS for the extender routes (`serve --tls-cert --tls-key --tls-client-ca`) with real certificates
(the manifests of deploy/ are checked in test_k8s_deploy.py)."""
from __future__ import annotations

import ssl
import subprocess
import sys
import time

import httpx
import orjson
import pytest

pytest.importorskip("starlette")
pytest.importorskip("kubernetes")

from k8s_extender_client import ExtenderClient, ExtenderFailed  # noqa: E402
from pki import certificate, name, new_key, write_pem  # noqa: E402
from service_process import SECTION_10_AGENTS, SECTION_10_TASK, Server  # noqa: E402
from test_k8s_extender import AGENT_NODES, pod  # noqa: E402


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca_key, other_key = new_key(), new_key()
    ca = certificate("a3fast test CA", ca_key, name("a3fast test CA"), ca_key, ca=True)
    other = certificate("another CA", other_key, name("another CA"), other_key, ca=True)
    keys = {k: new_key() for k in ("server", "client", "stranger")}
    files = {"ca": write_pem(d, "ca", ca)[0]}
    files["server"] = write_pem(d, "server", certificate("127.0.0.1", keys["server"], ca.subject, ca_key, server=True),
                                keys["server"])
    files["client"] = write_pem(d, "client", certificate("kube-scheduler", keys["client"], ca.subject, ca_key),
                                keys["client"])
    files["stranger"] = write_pem(d, "stranger", certificate("kube-scheduler", keys["stranger"], other.subject,
                                                             other_key), keys["stranger"])
    token = d / "token"
    token.write_text("s3cret\n")
    files["token"] = str(token)
    return files


@pytest.fixture(scope="module")
def tls_server(pki):
    s = Server("--tls-cert", pki["server"][0], "--tls-key", pki["server"][1], "--tls-client-ca", pki["ca"],
               "--token-file", pki["token"], ready=False)
    s.client = httpx.Client(base_url=s.url, verify=ssl.create_default_context(cafile=pki["ca"]), timeout=10.0)
    s.wait_ready()
    token = {"Authorization": "Bearer s3cret"}
    for a in SECTION_10_AGENTS:
        assert s.client.put(f"/v1/agents/{a['agent']['name']}", json=a, headers=token).status_code == 200
    yield s
    s.stop()


def _client(pki, who: str | None) -> httpx.Client:
    context = ssl.create_default_context(cafile=pki["ca"])
    if who is not None:
        context.load_cert_chain(*pki[who])
    return httpx.Client(verify=context, timeout=10.0)


def test_serve_prints_an_https_url_with_tls(tls_server):
    assert tls_server.url.startswith("https://127.0.0.1:")


def test_k8s_routes_accept_a_verified_client_certificate_without_a_token(tls_server, pki):
    client = ExtenderClient(tls_server.url + "/k8s", node_cache_capable=True, client=_client(pki, "client"))
    passed, _, _ = client.filter(pod(SECTION_10_TASK), AGENT_NODES)
    assert [n["metadata"]["name"] for n in passed] == ["order-analyst"]


def test_k8s_routes_refuse_a_connection_without_a_client_certificate(tls_server, pki):
    client = ExtenderClient(tls_server.url + "/k8s", node_cache_capable=True, client=_client(pki, None))
    with pytest.raises(ExtenderFailed, match="code 401"):
        client.filter(pod(SECTION_10_TASK), AGENT_NODES)
    # a token is no way in to /k8s/* when client certificates are configured
    r = _client(pki, None).post(tls_server.url + "/k8s/filter", headers={"Authorization": "Bearer s3cret"},
                                content=orjson.dumps({"Pod": pod(), "NodeNames": ["x"]}))
    assert r.status_code == 401


def test_a_client_certificate_from_another_ca_fails_the_handshake(tls_server, pki):
    with pytest.raises(httpx.TransportError):
        _client(pki, "stranger").post(tls_server.url + "/k8s/filter",
                                      content=orjson.dumps({"Pod": pod(), "NodeNames": ["x"]}))


def test_v1_keeps_the_token_and_probes_need_neither(tls_server, pki):
    plain = _client(pki, None)
    assert plain.get(tls_server.url + "/v1/agents").status_code == 401
    assert plain.get(tls_server.url + "/v1/agents", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert plain.get(tls_server.url + "/healthz").status_code == 200
    assert plain.get(tls_server.url + "/readyz").status_code == 200


@pytest.mark.parametrize("client_ca", [True, False], ids=["client certificates", "server certificate only"])
def test_a_tls_server_stops_at_once_while_idle_clients_keep_their_connections(pki, client_ca):
    # an idle TLS peer never sends close_notify: the stop must not wait for it (30 s by default)
    args = ["--tls-cert", pki["server"][0], "--tls-key", pki["server"][1]]
    if client_ca:
        args += ["--tls-client-ca", pki["ca"]]
    s = Server(*args, ready=False)
    s.client = httpx.Client(base_url=s.url, verify=ssl.create_default_context(cafile=pki["ca"]), timeout=10.0)
    s.wait_ready()
    idle = [_client(pki, "client" if client_ca else None) for _ in range(3)]
    for c in idle:
        assert c.get(s.url + "/healthz").status_code == 200
    started = time.monotonic()
    assert s.stop() == 0
    assert time.monotonic() - started < 10
    for c in idle:
        c.close()


def test_tls_flags_that_do_not_fit_are_exit_2(pki, tmp_path):
    cases = [["--tls-cert", pki["server"][0]],
             ["--tls-client-ca", pki["ca"]],
             ["--tls-cert", pki["server"][0], "--tls-key", str(tmp_path / "missing.key")],
             ["--tls-cert", pki["server"][0], "--tls-key", pki["client"][1]]]
    for args in cases:
        r = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", *args],
                           capture_output=True, timeout=60)
        assert r.returncode == 2, args
        assert b"--tls" in r.stderr and b"Traceback" not in r.stderr


def test_each_bad_tls_file_is_named_and_an_encrypted_key_never_prompts(pki, tmp_path):
    # OpenSSL's own pass phrase prompt would wait on a terminal and fail on none
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(new_key().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.BestAvailableEncryption(b"pass phrase")))
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"not a certificate\n")
    server_cert, server_key = pki["server"]
    # a key of another type than the certificate's (RSA for an EC certificate), and a certificate
    # whose key is too small for OpenSSL's default security level: the fault is named where it lies
    rsa_key = tmp_path / "rsa.key"
    rsa_key.write_bytes(rsa.generate_private_key(65537, 2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    small = rsa.generate_private_key(65537, 1024)
    small_cert, small_key = write_pem(tmp_path, "small", certificate("127.0.0.1", small, name("small"), small,
                                                                     server=True), small)
    # a server certificate whose intermediate's key is too small, and a chain written CA first
    leaf_key = new_key()
    intermediate = certificate("small CA", small, name("small"), small, ca=True)
    leaf = certificate("127.0.0.1", leaf_key, intermediate.subject, small, server=True)
    chained, leaf_key_file = write_pem(tmp_path, "leaf", leaf, leaf_key)
    with open(chained, "ab") as f:
        f.write(intermediate.public_bytes(serialization.Encoding.PEM))
    ca_first = tmp_path / "ca-first.crt"
    ca_first.write_bytes(open(pki["ca"], "rb").read() + open(server_cert, "rb").read())
    # a file of a revocation list alone holds no certificate
    ca_key = new_key()
    now = datetime.datetime.now(datetime.timezone.utc)
    crl = (x509.CertificateRevocationListBuilder().issuer_name(name("a CA")).last_update(now)
           .next_update(now + datetime.timedelta(days=1)).sign(ca_key, hashes.SHA256()))
    crl_only = tmp_path / "crl.pem"
    crl_only.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    cases = [
        (["--tls-cert", server_cert, "--tls-key", str(encrypted)], f"--tls-key {encrypted}: the key is encrypted"),
        (["--tls-cert", str(garbage), "--tls-key", server_key], f"--tls-cert {garbage}: cannot use it: no PEM certificate"),
        (["--tls-cert", server_cert, "--tls-key", str(garbage)], f"--tls-key {garbage}: cannot use it: no PEM private key"),
        (["--tls-cert", server_cert, "--tls-key", pki["client"][1]],
         f"--tls-key {pki['client'][1]}: cannot use it: it is not the private key of the first certificate in --tls-cert"),
        (["--tls-cert", server_cert, "--tls-key", str(rsa_key)],
         f"--tls-key {rsa_key}: cannot use it: it is not the private key of the first certificate in --tls-cert"),
        (["--tls-cert", small_cert, "--tls-key", small_key],
         f"--tls-cert {small_cert}: cannot use it: its key is too small for OpenSSL's security level"),
        (["--tls-cert", chained, "--tls-key", leaf_key_file],
         f"--tls-cert {chained}: cannot use it: a certificate of its chain has a key too small"),
        (["--tls-cert", str(ca_first), "--tls-key", server_key],
         f"--tls-key {server_key}: cannot use it: it is not the private key of the first certificate in "
         f"--tls-cert (the server's own certificate goes first in that file, then its chain)"),
        (["--tls-cert", str(crl_only), "--tls-key", server_key],
         f"--tls-cert {crl_only}: cannot use it: no PEM certificate in it (only revocation lists)"),
        (["--tls-cert", server_cert, "--tls-key", server_key, "--tls-client-ca", str(crl_only)],
         f"--tls-client-ca {crl_only}: cannot use it: no PEM certificate in it (only revocation lists)"),
        (["--tls-cert", server_cert, "--tls-key", server_key, "--tls-client-ca", str(garbage)],
         f"--tls-client-ca {garbage}: cannot use it: no PEM certificate"),
    ]
    for args, message in cases:
        r = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", *args],
                           capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        assert r.returncode == 2, args
        assert r.stderr.decode().startswith(f"a3fast: {message}"), r.stderr
        assert b"pass phrase:" not in r.stderr and b"Traceback" not in r.stderr


def _served_certificate(url: str) -> bytes:
    host, port = url.removeprefix("https://").split(":")
    return ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate((host, int(port)), timeout=10))


def _der(pem_file: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(open(pem_file).read())


def _renewed(path, text: bytes) -> None:
    """A file replaced as a Secret's update replaces it: a new file moved over the old name."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_bytes(text)
    fresh.replace(path)


def test_renewed_certificate_files_are_served_without_a_restart(tmp_path):
    # cert-manager renews the files in place; the server kept the certificate it started with and
    # would have served it past its end
    ca_key = new_key()
    ca = certificate("renewing CA", ca_key, name("renewing CA"), ca_key, ca=True)
    made = tmp_path / "made"
    made.mkdir()
    first, second = ({"server": write_pem(made, f"server{i}", certificate("127.0.0.1", k, ca.subject, ca_key,
                                                                         server=True), k)}
                     for i, k in enumerate((new_key(), new_key())))
    client_key = new_key()
    client = write_pem(made, "client", certificate("kube-scheduler", client_key, ca.subject, ca_key), client_key)
    ca_file = write_pem(made, "ca", ca)[0]
    mounted = {n: tmp_path / n for n in ("tls.crt", "tls.key", "ca.crt")}
    mounted["tls.crt"].write_bytes(open(first["server"][0], "rb").read())
    mounted["tls.key"].write_bytes(open(first["server"][1], "rb").read())
    mounted["ca.crt"].write_bytes(open(ca_file, "rb").read())
    s = Server("--tls-cert", str(mounted["tls.crt"]), "--tls-key", str(mounted["tls.key"]),
               "--tls-client-ca", str(mounted["ca.crt"]), ready=False)
    try:
        assert _served_certificate(s.url) == _der(first["server"][0])
        # half a renewal: the new certificate beside the old key loads no context; the old one serves
        _renewed(mounted["tls.crt"], open(second["server"][0], "rb").read())
        time.sleep(1.2)
        assert _served_certificate(s.url) == _der(first["server"][0])
        _renewed(mounted["tls.key"], open(second["server"][1], "rb").read())
        time.sleep(1.2)
        assert _served_certificate(s.url) == _der(second["server"][0])
        # the extender routes still take the scheduler's certificate over the new context
        context = ssl.create_default_context(cafile=ca_file)
        context.load_cert_chain(*client)
        extender = ExtenderClient(s.url + "/k8s", node_cache_capable=True, client=httpx.Client(verify=context))
        passed, _, _ = extender.filter(pod(SECTION_10_TASK), AGENT_NODES)
        assert passed == []                    # answered (no agent declared), not refused
        r = httpx.Client(verify=ssl.create_default_context(cafile=ca_file)).post(
            s.url + "/k8s/filter", content=orjson.dumps({"Pod": pod(), "NodeNames": ["x"]}))
        assert r.status_code == 401            # and still refuse a connection without one
    finally:
        assert s.stop() == 0
    stderr = s.stderr()
    assert stderr.count("the changed certificate files do not load") == 1, stderr
    assert stderr.count("the certificate files changed; new connections get them") == 1, stderr
    assert "Traceback" not in stderr


def test_an_encrypted_key_put_in_place_is_refused_without_a_prompt_and_the_old_one_serves(tmp_path):
    from pathlib import Path

    from cryptography.hazmat.primitives import serialization

    ca_key, key = new_key(), new_key()
    ca = certificate("a CA", ca_key, name("a CA"), ca_key, ca=True)
    cert_file, key_file = write_pem(tmp_path, "server", certificate("127.0.0.1", key, ca.subject, ca_key, server=True),
                                    key)
    # standard input an open pipe, where OpenSSL's own pass phrase prompt would wait with the event
    # loop stopped (as under a terminal)
    s = Server("--tls-cert", cert_file, "--tls-key", key_file, ready=False, stdin=subprocess.PIPE)
    try:
        served = _served_certificate(s.url)
        _renewed(Path(key_file), key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.BestAvailableEncryption(b"pass phrase")))
        time.sleep(1.2)
        assert _served_certificate(s.url) == served      # answered, with the certificate loaded before
    finally:
        assert s.stop() == 0
    stderr = s.stderr()
    assert stderr.count("the changed certificate files do not load (the key is encrypted") == 1, stderr
    assert "a3fast: TLS: " in stderr and "a3fast: a3fast:" not in stderr and "Traceback" not in stderr


def _closed_by_server(sock) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False                    # still open, nothing sent
    except ConnectionResetError:
        return True


def test_over_tls_a_connection_counts_from_its_accept_and_its_handshake_has_the_head_timeout(pki):
    import socket

    # the event loop's TLS would hand the HTTP protocol a connection only once its handshake is done:
    # one that never sends a ClientHello was held a minute and counted nowhere
    s = Server("--tls-cert", pki["server"][0], "--tls-key", pki["server"][1], "--header-timeout", "1",
               "--max-connections", "5", ready=False)
    host, port = s.url.removeprefix("https://").split(":")
    silent = []
    try:
        silent = [socket.create_connection((host, int(port)), timeout=5) for _ in range(20)]
        time.sleep(0.5)
        assert sum(map(_closed_by_server, silent)) == 15             # past the limit: closed on accept
        time.sleep(1.5)
        assert all(map(_closed_by_server, silent))                  # no handshake within the head timeout
        assert _served_certificate(s.url) == _der(pki["server"][0])  # and a client that speaks is served
    finally:
        for sock in silent:
            sock.close()
        assert s.stop() == 0
    assert "Traceback" not in s.stderr()


def _get_over_tls(url: str, context: ssl.SSLContext, session=None) -> tuple:
    """(session, whether it was resumed, the status line or the TLS error) of one GET /k8s/filter."""
    import socket

    host, port = url.removeprefix("https://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=host, session=session) as conn:
                conn.sendall(b"GET /k8s/filter HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                try:
                    while chunk := conn.recv(65536):
                        data += chunk
                except ssl.SSLEOFError:      # the answer read whole, the close not said over TLS
                    pass
                return conn.session, conn.session_reused, data.split(b"\r\n", 1)[0].decode()
        except (ssl.SSLError, ConnectionResetError) as exc:
            return None, False, repr(exc)


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_a_client_ca_taken_out_of_the_file_is_refused_to_a_client_resuming_an_earlier_session(tmp_path, version):
    from pathlib import Path

    made = tmp_path / "made"
    made.mkdir()
    keys = {k: new_key() for k in ("ca", "next", "server", "client")}
    ca = certificate("first CA", keys["ca"], name("first CA"), keys["ca"], ca=True)
    next_ca = certificate("next CA", keys["next"], name("next CA"), keys["next"], ca=True)
    ca_file, next_file = write_pem(made, "ca", ca)[0], write_pem(made, "next", next_ca)[0]
    server = write_pem(made, "server", certificate("127.0.0.1", keys["server"], ca.subject, keys["ca"], server=True),
                       keys["server"])
    client = write_pem(made, "client", certificate("kube-scheduler", keys["client"], ca.subject, keys["ca"]),
                       keys["client"])
    mounted = tmp_path / "ca.crt"
    mounted.write_bytes(Path(ca_file).read_bytes())
    s = Server("--tls-cert", server[0], "--tls-key", server[1], "--tls-client-ca", str(mounted), ready=False)
    try:
        context = ssl.create_default_context(cafile=ca_file)
        context.load_cert_chain(*client)
        context.maximum_version = version
        session, _, line = _get_over_tls(s.url, context)
        assert line.startswith("HTTP/1.1 405"), line          # the certificate verified: past the guard
        assert _get_over_tls(s.url, context, session)[1]       # and its session is resumed
        _renewed(mounted, Path(next_file).read_bytes())        # the first CA taken out
        time.sleep(1.2)
        _get_over_tls(s.url, ssl.create_default_context(cafile=ca_file))    # a connection that loads it
        _, resumed, line = _get_over_tls(s.url, context, session)
        assert not resumed and not line.startswith("HTTP/1.1 405"), line
    finally:
        assert s.stop() == 0


def test_a_tls_server_stops_at_once_though_a_handshake_ends_while_it_stops(pki):
    import os
    import signal
    import socket

    # an idle connection kept longer than the stop's 30 s grace
    s = Server("--tls-cert", pki["server"][0], "--tls-key", pki["server"][1], "--keep-alive", "60", ready=False)
    s.client = httpx.Client(base_url=s.url, verify=ssl.create_default_context(cafile=pki["ca"]), timeout=10.0)
    s.wait_ready()
    host, port = s.url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=pki["ca"])
    body = b'{"requirements": {}}'
    # a request under way when the stop comes (its body half sent), which the stop waits for
    busy = context.wrap_socket(socket.create_connection((host, int(port)), timeout=10), server_hostname=host)
    busy.sendall(b"POST /v1/place HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body[:5]))
    pending = socket.create_connection((host, int(port)), timeout=10)       # its handshake not begun
    time.sleep(0.3)
    os.kill(s.proc.pid, signal.SIGTERM)
    stopping = time.monotonic()
    time.sleep(0.3)
    try:        # the handshake ends while the server stops, and the client would keep its connection
        late = context.wrap_socket(pending, server_hostname=host)
        late.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        late.recv(65536)
    except OSError:             # ssl.SSLError among them: closed by the stopping server
        pass
    busy.sendall(body[5:])
    assert busy.recv(65536).startswith(b"HTTP/1.1 200")                     # the one under way answered
    busy.close()
    try:
        assert s.stop() == 0
        assert time.monotonic() - stopping < 10      # not the 30 s grace it held the stop for
    finally:
        busy.close()
        pending.close()


def test_a_certificate_out_of_its_dates_is_served_with_a_warning_at_the_start_and_at_a_renewal(tmp_path):
    import datetime
    from pathlib import Path

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = new_key(), new_key()
    ca = certificate("a CA", ca_key, name("a CA"), ca_key, ca=True)
    expired = certificate("127.0.0.1", key, ca.subject, ca_key, server=True,
                          valid_from=now - datetime.timedelta(days=2), valid_until=now - datetime.timedelta(days=1))
    early = certificate("127.0.0.1", key, ca.subject, ca_key, server=True,
                        valid_from=now + datetime.timedelta(days=1), valid_until=now + datetime.timedelta(days=2))
    cert_file, key_file = write_pem(tmp_path, "server", expired, key)
    later = write_pem(tmp_path, "later", early)[0]
    s = Server("--tls-cert", cert_file, "--tls-key", key_file, ready=False)
    try:
        assert _served_certificate(s.url) == _der(cert_file)     # served all the same
        _renewed(Path(cert_file), Path(later).read_bytes())      # a renewal that is not valid yet
        time.sleep(1.2)
        assert _served_certificate(s.url) == _der(later)
    finally:
        assert s.stop() == 0
    stderr = s.stderr()
    assert f"a3fast: warning: --tls-cert {cert_file}: its certificate expired at " in stderr, stderr
    assert "a3fast: TLS: its certificate is not valid until " in stderr, stderr
    assert "Traceback" not in stderr
