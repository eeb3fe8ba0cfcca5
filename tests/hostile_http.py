"""Raw-socket HTTP servers on 127.0.0.1 that misbehave on purpose: a server that drips its answer a
byte at a time, one that redirects to a scheme no client follows, one that resets the connection,
one that sends a malformed head, one that speaks TLS with a certificate nobody trusts. Each runs
in daemon threads and stops when its `close()` is called (the fixtures do)."""
from __future__ import annotations

import datetime
import socket
import ssl
import struct
import threading
import time
from pathlib import Path
from typing import Callable


class RawServer:
    """Accepts connections on 127.0.0.1 and hands each socket to `answer(conn, server)` in a thread."""

    def __init__(self, answer: Callable[[socket.socket, "RawServer"], None], tls: ssl.SSLContext | None = None):
        self.answer = answer
        self.stopped = threading.Event()
        self.connections = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.tls = tls
        self.port = self.sock.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            conn.settimeout(5)
            self.answer(conn, self)
        except (OSError, ssl.SSLError):
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()


def read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def dripping(conn: socket.socket, server: RawServer) -> None:
    """`HTTP/1.1 200 OK`, then one byte of a header every half second, until stopped (the head is
    never finished, so only a deadline on the whole fetch ends the wait)."""
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    conn.sendall(b"X-Drip: ")
    while not server.stopped.wait(0.5):
        conn.sendall(b"a")


def redirecting_to(location: str) -> Callable[[socket.socket, RawServer], None]:
    def answer(conn: socket.socket, server: RawServer) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: " + location.encode() +
                     b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    return answer


def resetting(conn: socket.socket, server: RawServer) -> None:
    """Reads the request, then closes with RST (SO_LINGER 0) instead of answering."""
    read_request(conn)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def sending(raw: bytes) -> Callable[[socket.socket, RawServer], None]:
    def answer(conn: socket.socket, server: RawServer) -> None:
        read_request(conn)
        conn.sendall(raw)
    return answer


def self_signed_context(directory: Path) -> ssl.SSLContext:
    """A server TLS context with a fresh self-signed certificate for 127.0.0.1 (trusted by no one)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context


def elapsed(fn: Callable[[], object]) -> tuple[float, object]:
    started = time.monotonic()
    try:
        result: object = fn()
    except Exception as exc:  # returned for the caller to assert on
        result = exc
    return time.monotonic() - started, result
