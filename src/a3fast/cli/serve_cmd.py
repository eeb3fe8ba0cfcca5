"""`a3fast serve`: the matcher as a long-running service (HTTP, or JSON Lines on stdio).

Exit codes: 0 after a clean stop (SIGTERM/SIGINT, or end of input with --stdio), 2 bad input
(options, an unreadable token file or fleet, a state directory that cannot be read back exactly, or
HTTP on an install without the 'serve' extra; --stdio needs no extra).
"""
from __future__ import annotations

import asyncio
import errno
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

import click

from ..errors import printable
from ..files import why_not_a_file
from ..streams import status_line
from .common import EXIT_BAD_INPUT, Seconds, say


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8421, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0: any free port; the line printed at start says which).")
@click.option("--state", "state_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="State directory: checkpoint, fleet snapshot, journal generations and trace "
                   "(docs/service.md). Without it nothing survives a restart.")
@click.option("--fleet", "fleet_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Declarations (JSON Lines or a JSON array) to seed a state that holds no agent yet.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the trace (default: STATE/trace.jsonl, or a temporary file).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A file holding the bearer token every request but /healthz, /readyz and /metrics needs.")
@click.option("--engine", type=click.Choice(["native", "pure"]), default=None,
              help="Matching engine (default: a3fast.ENGINE).")
@click.option("--max-body", default=64 * 1024 * 1024, show_default=True, type=click.IntRange(1),
              help="Largest request body of any route (POST /v1/verify's trace) and stdio line, in bytes; "
                   "larger ones get 413. Every other limit is at most this.")
@click.option("--max-request-body", default=1024 * 1024, show_default=True, type=click.IntRange(1),
              help="Largest body of a one-document route (PUT /v1/agents/NAME, /v1/place, /v1/outcomes).")
@click.option("--max-bulk-body", default=1024 * 1024, show_default=True, type=click.IntRange(1),
              help="Largest body of POST /v1/agents (applied in one step: what one request may hold others up for).")
@click.option("--max-k8s-body", default=48 * 1024 * 1024, show_default=True, type=click.IntRange(1),
              help="Largest body of /k8s/* (Nodes mode sends whole Node objects: ~7 KB each).")
@click.option("--header-timeout", default=10.0, show_default=True, type=Seconds(min=0.01),
              help="Seconds a connection may take to send a request's head; then it is closed.")
@click.option("--body-timeout", default=60.0, show_default=True, type=Seconds(min=0.01),
              help="Seconds a request may take to send its whole body; then it is answered 408.")
@click.option("--keep-alive", default=5.0, show_default=True, type=Seconds(min=0.01),
              help="Seconds an idle keep-alive connection is kept open.")
@click.option("--max-connections", default=None, type=click.IntRange(min=1),
              help="Open connections at most; more are closed on accept (default: the open-file limit less 64).")
@click.option("--fsync", type=click.Choice(["group", "always", "never"]), default="group", show_default=True,
              help="group: changes that arrive while an fsync runs share the next one; always: one "
                   "fsync per change; never: no fsync (survives a killed process, not a power loss). "
                   "Every change is acknowledged only after that.")
@click.option("--checkpoint-every", default=50_000, show_default=True, type=click.IntRange(min=1),
              help="Journal entries after which a checkpoint is taken (a fleet snapshot and a new journal "
                   "generation; docs/service.md), besides the one at a clean stop.")
@click.option("--watch-cards", "watch_cards", multiple=True, metavar="URL",
              help="Keep the fleet in step with this agent's Agent Card (repeatable): re-fetched every "
                   "--watch-interval, derived as `a3fast import a2a URL` derives it, applied like a PUT.")
@click.option("--watch-mcp", "watch_mcp", multiple=True, metavar="AGENT=URL",
              help="Keep AGENT's tools in step with the MCP server at URL, streamable HTTP (repeatable): "
                   "listed every --watch-interval, bound as `a3fast import mcp --server-url URL --bind AGENT` "
                   "binds them, applied like a PUT.")
@click.option("--watch-interval", default=30.0, show_default=True, type=Seconds(min=0.05),
              help="Seconds between two checks of a watched card or MCP server (failures back off up to 300 s).")
@click.option("--watch-remove-after", default=3, show_default=True, type=click.IntRange(min=1),
              help="Consecutive misses (404 or 410) after which a watched card's agents are removed.")
@click.option("--shards", type=click.IntRange(min=1), default=None,
              help="Serve a ShardedFleet of N Ray actors (docs/scale.md) instead of one Fleet; needs the "
                   "'ray' extra. The service's journal stays the source of truth (docs/service.md). A sharded "
                   "fleet is not compacted.")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="With --shards: the Ray cluster to run the shards on (auto, HOST:PORT, ray://...; "
                   "default: a local Ray with at most min(N, CPUs) CPUs).")
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The server's certificate (PEM): serve HTTPS. Needs --tls-key.")
@click.option("--tls-key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The private key of --tls-cert (PEM).")
@click.option("--tls-client-ca", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="CA certificates (PEM) whose client certificates /k8s/* accepts, as kube-scheduler's "
                   "Extender tlsConfig presents them; other routes keep --token-file. Needs --tls-cert.")
@click.option("--watch-k8s", is_flag=True,
              help="Serve the agents the cluster declares: list, then watch, the AgentDeclaration objects "
                   "and the Nodes' a3.dev/declaration annotations (docs/kubernetes.md). Not with --state "
                   "or --fleet: the cluster is the source of truth. Needs the 'k8s' extra.")
@click.option("--k8s-namespace", "k8s_namespaces", multiple=True, metavar="NS",
              help="With --watch-k8s: watch the AgentDeclarations of this namespace (repeatable; default: all).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --watch-k8s: the kubeconfig file (default: in-cluster in a pod, else $KUBECONFIG's files, else ~/.kube/config).")
@click.option("--k8s-watch-timeout", default=300.0, show_default=True, type=Seconds(min=1),
              help="With --watch-k8s: a watch request's timeoutSeconds (each draws between this and twice this).")
@click.option("--stdio", is_flag=True, help="Answer JSON requests on standard input instead of HTTP.")
@click.option("--access-log", is_flag=True,
              help="One line on standard error per answered request: client, method and path, status, "
                   "bytes, milliseconds.")
def serve(host, port, state_dir, fleet_path, trace_path, token_file, engine, max_body, max_request_body,
          max_bulk_body, max_k8s_body, header_timeout, body_timeout, keep_alive, max_connections, fsync,
          checkpoint_every,
          watch_cards, watch_mcp, watch_interval, watch_remove_after, shards, ray_address, tls_cert, tls_key,
          tls_client_ca, watch_k8s, k8s_namespaces, kubeconfig, k8s_watch_timeout, stdio, access_log):
    """Serve the fleet: HTTP API under /v1, a Kubernetes scheduler extender under /k8s, or with
    --stdio one JSON request per line (docs/service.md, docs/protocol.md).

    Prints `a3fast: loading; listening on URL` once it listens (/healthz answers, /readyz says 503),
    `a3fast: ready (N agents); serving on URL` once it takes work, and `a3fast: stopped` at a clean
    stop. Exit 0 after a clean stop, 2 bad input or unreadable state.

    A fleet whose agents come and go under new names is compacted after a removal once it holds as
    many names gone as live agents (at least 4,096): a name that comes back after that is a new
    agent, without its earlier outcomes. One whose agents are re-declared with ever new values drops
    the rows of values no agent declares once it holds as many (counted every 4,096 agents put),
    changing nothing else (docs/service.md, "Limits"; not with --shards).
    """
    from ..service.config import ServiceConfig

    if not stdio:
        _need_http_stack()
    else:
        if sys.stdout is None:
            _fail("--stdio: the answers go to standard output, which is closed (>/dev/null discards them)")
        try:
            sys.stdin.buffer.fileno()
        except OSError as exc:      # closed (a stream with no descriptor, as in a test, is read as it is)
            if exc.errno == errno.EBADF:
                _fail(f"--stdio: the requests come on standard input, which cannot be read: {exc.strerror}")
    token = None
    if token_file is not None:
        try:
            token = token_file.read_bytes().decode("utf-8").strip()
        except OSError as exc:
            _fail(f"{token_file}: cannot read: {exc.strerror or exc}")
        except UnicodeDecodeError as exc:
            _fail(f"{token_file}: the token is not UTF-8 text (byte {exc.start})")
        if not token:
            _fail(f"{token_file}: the token file is empty")
        # a client sends it in an Authorization header, which holds no control character
        control = next((i for i, c in enumerate(token) if (ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F), None)
        if control is not None:
            _fail(f"{token_file}: the token holds a control character at character {control} (a line break, "
                  f"NUL, ...), which no client can send in an Authorization header: one line of text")
    if fleet_path is not None and not fleet_path.is_file():
        _fail(f"{fleet_path}: cannot read: {why_not_a_file(fleet_path)}")
    if fleet_path is not None:
        from ..files import InputError, require_kind

        try:
            require_kind(str(fleet_path), "declarations")
        except InputError as exc:
            _fail(str(exc))
    if trace_path is not None:
        _check_trace(trace_path, {"--fleet": fleet_path, "--token-file": token_file, "--tls-cert": tls_cert,
                                  "--tls-key": tls_key, "--tls-client-ca": tls_client_ca,
                                  "--kubeconfig": kubeconfig}, state_dir)
    if watch_cards:
        _check_watch(watch_cards, stdio)
    servers = _watched_servers(watch_mcp, stdio) if watch_mcp else ()
    if ray_address is not None and shards is None:
        _fail("--ray-address: only with --shards N (a plain fleet runs in this process)")
    _check_tls(tls_cert, tls_key, tls_client_ca, stdio)
    _check_k8s(watch_k8s, k8s_namespaces, kubeconfig, state_dir, fleet_path, stdio)
    config = ServiceConfig(host=host, port=port, state=state_dir, fleet=fleet_path, trace=trace_path,
                           token=token, engine=engine, max_body=max_body, max_request_body=max_request_body,
                           max_bulk_body=max_bulk_body, max_k8s_body=max_k8s_body, header_timeout=header_timeout,
                           body_timeout=body_timeout, keep_alive=keep_alive, max_connections=max_connections,
                           fsync=fsync, checkpoint_every=checkpoint_every,
                           watch_cards=tuple(watch_cards), watch_mcp=servers, watch_interval=watch_interval,
                           watch_remove_after=watch_remove_after, shards=shards, ray_address=ray_address,
                           tls_cert=tls_cert, tls_key=tls_key, tls_client_ca=tls_client_ca,
                           watch_k8s=watch_k8s, k8s_namespaces=tuple(k8s_namespaces), kubeconfig=kubeconfig,
                           k8s_watch_timeout=k8s_watch_timeout, access_log=access_log)
    if not stdio:
        _warn_if_open(config)
    code = _run_stdio(config) if stdio else _run_http(config)
    sys.exit(code)


def _need_http_stack() -> None:
    """HTTP needs the 'serve' extra (the stdio protocol does not): exit 2 naming it."""
    for module in ("starlette", "uvicorn", "prometheus_client"):
        try:
            __import__(module)
        except ModuleNotFoundError:
            _fail(f"serving HTTP needs the 'serve' extra: pip install 'a3fast[serve]' ({module} is missing; "
                  "--stdio works without it)")


def _check_trace(trace: Path, inputs: dict[str, Path | None], state: Path | None = None) -> None:
    """--trace is a regular file (or none yet) and none of the files the service reads: it is
    appended to, synced, and cut back to a checkpoint or started afresh, which would destroy the
    --fleet it was about to read, or the state directory's checkpoint, journal or snapshot (any file
    of the directory but its own trace, which is where the trace goes anyway)."""
    if state is not None:
        from ..service.state import TRACE as STATE_TRACE

        # by real paths, the directory made or not: `fresh/journal.00000001`, `s/sub/../checkpoint`
        real = os.path.realpath(trace)
        if os.path.dirname(real) == os.path.realpath(state) and os.path.basename(real) != STATE_TRACE:
            _state_file(trace, state)
        if trace.exists() and state.is_dir():     # a link, hard or symbolic, to one of its files
            for entry in state.iterdir():
                try:
                    same = entry.name != STATE_TRACE and os.path.samefile(trace, entry)
                except OSError:
                    same = False
                if same:
                    _state_file(trace, state)
    if trace.exists() and not trace.is_file():
        _fail(f"--trace {trace}: not a regular file (the trace is appended to, synced and cut back to a "
              f"checkpoint: a device or a pipe cannot be)")
    if not trace.exists():
        return
    for flag, path in inputs.items():
        try:
            same = path is not None and path.exists() and os.path.samefile(trace, path)
        except OSError:
            same = False
        if same:
            _fail(f"--trace {trace}: it is the file of {flag}, which the service reads; the trace would "
                  f"replace it")


def _state_file(trace: Path, state: Path) -> NoReturn:
    from ..service.state import TRACE as STATE_TRACE

    _fail(f"--trace {trace}: a file of the state directory {state}, which holds the service's checkpoint, "
          f"journal and snapshots; the trace goes in {state / STATE_TRACE} unless given elsewhere")


def _check_watch(urls, stdio: bool) -> None:
    if stdio:
        _fail("--watch-cards: the watch runs in the HTTP server; --stdio has no background task")
    try:
        from ..interop.fetch import FetchError, card_locations
        import httpx  # noqa: F401  (the fetches need it)
    except ModuleNotFoundError as exc:
        _fail(f"--watch-cards needs the 'import' extra (pip install 'a3fast[import]'): {exc.name} is missing")
    for url in urls:
        try:
            card_locations(url)
        except FetchError as exc:
            _fail(f"--watch-cards {exc.url}: {exc.message}")      # (without the URL's password)


def _watched_servers(pairs, stdio: bool) -> tuple[tuple[str, str], ...]:
    """--watch-mcp AGENT=URL values as (agent, url) pairs; a malformed one is exit 2."""
    if stdio:
        _fail("--watch-mcp: the watch runs in the HTTP server; --stdio has no background task")
    try:
        import mcp  # noqa: F401  (the listings need the SDK)
    except ModuleNotFoundError as exc:
        _fail(f"--watch-mcp needs the 'import' extra (pip install 'a3fast[import]'): {exc.name} is missing")
    from ..interop.fetch import http_url, without_credentials

    servers = []
    for pair in pairs:
        agent, sep, url = pair.partition("=")
        shown = without_credentials(pair)
        if not sep or not agent.strip():
            _fail(f"--watch-mcp {shown}: expected AGENT=URL, the agent whose tools follow the server")
        try:
            http_url(url)
        except ValueError as exc:
            _fail(f"--watch-mcp {shown}: expected an http:// or https:// URL with a host (a streamable HTTP "
                  f"server): {exc}")
        servers.append((agent.strip(), url))
    return tuple(dict.fromkeys(servers))


def _check_tls(cert, key, client_ca, stdio: bool) -> None:
    """--tls-* files: all readable, and a certificate with its key (exit 2 otherwise)."""
    if cert is None and key is None and client_ca is None:
        return
    if stdio:
        _fail("--tls-cert: TLS is for the HTTP server; --stdio has no connection to secure")
    if cert is None or key is None:
        _fail("--tls-cert and --tls-key go together" + ("" if client_ca is None else
              " (--tls-client-ca needs them: client certificates are asked for in the TLS handshake)"))
    for flag, path in (("--tls-cert", cert), ("--tls-key", key), ("--tls-client-ca", client_ca)):
        if path is not None and not path.is_file():
            _fail(f"{flag} {path}: cannot read: {why_not_a_file(path)}")
    import ssl

    class Encrypted(Exception):
        pass

    def no_pass_phrase() -> bytes:   # never OpenSSL's prompt, which waits on a terminal or fails on none
        raise Encrypted

    # each file on its own first, so the line names the one at fault
    for flag, path in (("--tls-cert", cert), ("--tls-client-ca", client_ca)):
        if path is None:
            continue
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            context.load_verify_locations(cafile=path)
        except (ssl.SSLError, OSError) as exc:
            _fail(f"{flag} {path}: cannot use it: no PEM certificate in it ({exc.strerror or exc})")
        if context.cert_store_stats()["x509"] == 0:     # a file of CRLs alone loads without one
            _fail(f"{flag} {path}: cannot use it: no PEM certificate in it (only revocation lists)")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, password=no_pass_phrase)
    except Encrypted:
        _fail(f"--tls-key {key}: the key is encrypted; the service takes a key without a pass phrase "
              f"(decrypt it, e.g. `openssl pkey -in KEY -out KEY.plain`, and keep that file private)")
    except ssl.SSLError as exc:
        reason = exc.reason or ""
        weak = {"EE_KEY_TOO_SMALL": "its key is too small", "CA_KEY_TOO_SMALL": "a certificate of its chain has "
                "a key too small", "CA_MD_TOO_WEAK": "a certificate in it is signed with a digest too weak"}
        if reason in weak:       # the certificate or its chain falls short, whatever the key
            _fail(f"--tls-cert {cert}: cannot use it: {weak[reason]} for OpenSSL's security level ({exc})")
        # a key of the certificate's type that is not its key is a mismatch; a key of another type
        # leaves the certificate unassigned. The key is matched with the file's first certificate,
        # so a chain written CA first blames a right key: both are said
        why = ("it is not the private key of the first certificate in --tls-cert (the server's own "
               "certificate goes first in that file, then its chain)") if reason in (
            "KEY_VALUES_MISMATCH", "NO_CERTIFICATE_ASSIGNED", "KEY_TYPE_MISMATCH") else \
            f"no PEM private key in it ({exc})"
        _fail(f"--tls-key {key}: cannot use it: {why}")
    except OSError as exc:
        _fail(f"--tls-key {key}: cannot read: {exc.strerror or exc}")
    from ..service.tls import validity_problem

    dates = validity_problem(str(cert))
    if dates is not None:      # served all the same: a renewal may be on its way (the files are read again)
        say(f"a3fast: warning: --tls-cert {cert}: {dates}; clients refuse it until it is renewed")


def _warn_if_open(config) -> None:
    """A warning on standard error when the service listens beyond this machine and asks nobody who
    they are: anyone who reaches the address can then change the fleet."""
    import ipaddress

    if config.token is not None or config.tls_client_ca is not None:
        return
    try:
        loopback = config.host == "localhost" or ipaddress.ip_address(config.host.strip("[]")).is_loopback
    except ValueError:
        loopback = False     # a host name other than localhost may resolve to any address
    if not loopback:
        say(f"a3fast: warning: listening on {config.host} without authentication: anyone who reaches "
            "it can change the fleet (--token-file FILE, or --tls-client-ca for client certificates)")


def _check_k8s(watch_k8s: bool, namespaces, kubeconfig, state_dir, fleet_path, stdio: bool) -> None:
    """--watch-k8s and its options: consistent, the client installed, the connection settings usable."""
    if not watch_k8s:
        if namespaces or kubeconfig is not None:
            _fail("--k8s-namespace/--kubeconfig: only with --watch-k8s")
        return
    if stdio:
        _fail("--watch-k8s: the watch runs in the HTTP server; --stdio has no background task")
    for flag, value in (("--state", state_dir), ("--fleet", fleet_path)):
        if value is not None:
            _fail(f"--watch-k8s: not with {flag}: the cluster is the source of truth, and a replica keeps "
                  f"no state of its own (--trace names where its trace goes)")
    try:
        import kubernetes  # noqa: F401
    except ModuleNotFoundError:
        _fail("--watch-k8s needs the 'k8s' extra (pip install 'a3fast[k8s]'): kubernetes is missing")
    from ..service.k8s_watch import KubeConfigError, load_client_configuration

    try:
        load_client_configuration(kubeconfig)
    except KubeConfigError as exc:
        _fail(f"--watch-k8s: {exc}")


def _fail(message: str) -> NoReturn:
    say(f"a3fast: {printable(message)}")      # one line, whatever an option held
    sys.exit(EXIT_BAD_INPUT)


def _start_ray(config) -> None:
    """Ray is started here, in the main thread, before uvicorn installs its signal handlers."""
    from ..service.sharded import start_ray
    from ..service.state import StateError

    try:
        start_ray(config.shards, config.ray_address)
    except StateError as exc:
        _fail(str(exc))


def _run_http(config) -> int:
    from ..service.app import create_app
    from ..service.server import listening_socket, uvicorn_server

    if config.shards is not None:
        _start_ray(config)
    app = create_app(config, settle=True)     # the process is the service's own
    try:
        sock = listening_socket(config.host, config.port)
    except OSError as exc:
        _fail(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}")
    from ..service.tls import uvicorn_options

    cert, key = config.tls_cert and str(config.tls_cert), config.tls_key and str(config.tls_key)
    client_ca = config.tls_client_ca and str(config.tls_client_ca)
    tls = uvicorn_options(cert, key, client_ca)      # renewed files are served without a restart
    server = uvicorn_server(app, config, **tls)

    def failed() -> None:
        server.should_exit = True
    app.state.on_failure = failed
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"{'https' if tls else 'http'}://{shown}:{port}"
    # the service takes work only once its state and fleet are loaded: it says so when they are.
    # These lines are its status, not an answer: a reader of standard output gone (a supervisor that
    # read the first line and closed its end) loses them, and the service serves on
    app.state.on_ready = lambda agents: status_line(f"a3fast: ready ({agents:,} agent{'' if agents == 1 else 's'}); "
                                                    f"serving on {url}", sys.stdout)
    status_line(f"a3fast: loading; listening on {url}", sys.stdout)
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, _stop_asked)
    server.run(sockets=[sock])
    if getattr(app.state, "failure", None):
        return EXIT_BAD_INPUT
    status_line("a3fast: stopped", sys.stdout)
    return 0


def _stop_asked(signum: int, frame: object) -> None:
    """uvicorn raises a SIGTERM/SIGINT again once its graceful shutdown is done (the state is flushed
    by then); with this handler in place the stop that was asked for ends the process with exit 0."""


def _run_stdio(config) -> int:
    from ..service.state import ServiceState, StateError, TraceUnwritable
    from ..service.operations import Operations
    from ..service.stdio import StopRequest, Stopped, serve_stdio, serve_stdio_sync, widen_pipes
    from ..service.seed import seed_fleet
    from ..service.sharded import fleet_factory
    from ..errors import SchemaError

    state = ServiceState(config.state, engine=config.engine, trace_path=config.trace,
                         fsync=config.fsync, checkpoint_every=config.checkpoint_every,
                         fleet_factory=fleet_factory(config), settle=True)
    try:
        state.open(mark_ready=False)
        if config.fleet is not None:
            seed_fleet(state, config)
    except (StateError, SchemaError, OSError) as exc:
        from ..errors import cannot_start_lines, os_error_line

        say("\n".join(cannot_start_lines(os_error_line(exc) if isinstance(exc, OSError) else str(exc))))
        return EXIT_BAD_INPUT
    state.ready = True
    widen_pipes(sys.stdin.buffer, sys.stdout.buffer)
    # SIGTERM/SIGINT: the batch being answered is finished and its answers written; a wait for
    # more input is given up
    stop = StopRequest()
    if state.journal is None:
        # nothing to wait for: a plain loop, no event loop or worker thread per line
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop.ask)
        # nothing reads a stdio service's metrics: its placements are not counted
        ops = Operations(state, stream=True, counted=False)
        try:
            try:
                serve_stdio_sync(ops, sys.stdin.buffer, sys.stdout.buffer, config.max_body, stop)
            except Stopped:     # asked as the read ended, before the loop took note of it
                pass
            finally:
                state.close()
        except TraceUnwritable as exc:
            # the batch whose lines could not be written is not answered: its records are in no trace
            unsent = "" if exc.at_stop else ": the answers whose records it could not hold were not sent"
            say(f"a3fast: {exc}; stopped{unsent}")
            return EXIT_BAD_INPUT
        return 0

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.ask)
        await serve_stdio(Operations(state, stream=True, counted=False), sys.stdin.buffer, sys.stdout.buffer,
                          config.max_body, stop)
    try:
        try:
            asyncio.run(main())
        finally:
            state.close()
    except TraceUnwritable as exc:     # the trace could not be synced at the stop
        say(f"a3fast: {exc}; stopped")
        return EXIT_BAD_INPUT
    return 0


@click.command()
@click.argument("name", required=False)
def schema(name):
    """Print the JSON Schema of one request or response of the service protocol (docs/protocol.md).

    Without NAME, or with an unknown one, lists the names (exit 2 for an unknown name).
    """
    from ..service.openapi import load_schema, schema_names

    names = schema_names()
    if name is None:
        click.echo("\n".join(names))
        return
    if name not in names:
        say(f"a3fast: no schema named {name!r}; the schemas are: {', '.join(names)}")
        sys.exit(EXIT_BAD_INPUT)
    import json

    click.echo(json.dumps(load_schema(name), indent=2))
