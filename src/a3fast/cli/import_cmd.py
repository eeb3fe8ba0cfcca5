"""`a3fast import a2a|mcp|k8s|oasf`: build a fleet (JSON Lines of declarations) from what agents
already publish, and say what was derived, what the caller supplied and what was skipped.

The report goes to standard error, so standard output can be the fleet itself. Exit 0 when
the fleet was written; 1 when an agent would have no capabilities (nothing is written unless
--allow-empty); 2 when nothing usable was read, or a flag or a file the caller gave is bad.
"""
from __future__ import annotations

import os

import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import click
import orjson

from ..errors import Problem, SchemaError, describe, printable
from ..interop.a2a import import_cards
from ..interop.collect import ImportResult
from ..interop.fetch import EtagCache, FetchError, Limits, fetch_card, without_credentials
from ..interop.kubernetes import declarations_from_manifests
from ..interop.mcp import import_listings
from ..interop.naming import is_domain, server_domain
from ..interop.oasf import import_records
from ..interop.signing import CardKeys, CardKeyError, read_keys
from ..interop.report import ImportReport
from ..interop.sources import (Document, expand_paths, json_document, to_json, usable_json_documents,
                               yaml_documents)
from ..interop.supply import Supplied, read_grants
from ..schema import LATENCY_CLASSES, loads
from .extras import require
from .common import (EXIT_BAD_INPUT, EXIT_NEGATIVE, BadInput, Seconds, atomic_outputs, check_not_inputs,
                     check_outputs, json_option,
                     output_option, progress, say, shown)
from ..files import InputError, read_bytes, read_json_documents, require_kind

#: Supplied field (its JSON path's first key) -> the flag the caller used for it.
FLAGS = {
    "namespace": "--namespace", "capability_version": "--capability-version",
    "skill_versions": "--capability-version", "capabilities": "--capability",
    "clearances": "--clearance", "grants": "--grants", "residency": "--residency",
    "latency_class": "--latency-class", "cost_ceiling_usd": "--cost-ceiling",
    "skill_domain": "--skill-domain", "server": "--server", "normalise": "--strict-ids",
}
#: What a skill id that does not fit §2 is normalised under when no --skill-domain is given.
DEFAULT_SKILL_DOMAIN = "a2a"
#: The capability major version when no --capability-version is given (a card has none).
DEFAULT_CAPABILITY_VERSION = 1


@click.group("import")
def import_group() -> None:
    """Build a fleet from A2A Agent Cards (files or live agents), MCP tool listings (files or
    running servers), OASF records or Kubernetes manifests (AgentDeclaration, kagent Agent).

    Writes declarations as JSON Lines (ready for `a3fast place --fleet`) and reports, on standard
    error, what was derived, what the caller supplied, what could not be derived, and what was
    skipped and why. Nothing is invented: a field no source gives is supplied by a flag or absent.
    """


def _output_options(fn: Callable) -> Callable:
    fn = json_option('Print one JSON object on standard output instead of the report on standard error: '
                     '{"declarations": [...], "report": {...}} (with "contracts" and "mappings" when '
                     'drafted); -o still writes the declarations file.')(fn)
    fn = click.option("--report", "report_path", metavar="FILE",
                      help="Also write the full report as JSON.")(fn)
    return output_option("Write the declarations here (JSON Lines) instead of standard output.",
                         aliases=())(fn)


def _agent_options(fn: Callable) -> Callable:
    """What a source cannot say about the agents it makes, supplied by the caller."""
    for option in reversed([
        click.option("--namespace", metavar="NS", help="The namespace of the agents made (A3 §3; a card or a tool listing has none)."),
        click.option("--clearance", "clearances", multiple=True, metavar="ID",
                     help="A clearance granted to every agent made (repeatable)."),
        click.option("--grants", "grants_path", metavar="FILE",
                     help='Clearances of each agent made, JSON or YAML: {"<agent name>": ["<clearance>", ...]}.'),
        click.option("--residency", multiple=True, metavar="LABEL",
                     help="A residency label of every agent made (repeatable)."),
        click.option("--latency-class", type=click.Choice(LATENCY_CLASSES), help="model.latency_class."),
        click.option("--cost-ceiling", metavar="USD", help='model.cost_ceiling_usd, e.g. "0.75".'),
    ]):
        fn = option(fn)
    return fn


def _naming_options(fn: Callable) -> Callable:
    """How skills become capabilities, and whether an agent may have none."""
    for option in reversed([
        click.option("--capability-version", "versions", multiple=True, metavar="N|SKILL=N",
                     help=f"Major version of every skill's capability, or of one skill (repeatable; "
                          f"default {DEFAULT_CAPABILITY_VERSION}, reported). A card's own `version` is "
                          f"the agent's release, never used as one."),
        click.option("--strict-ids", is_flag=True,
                     help="Keep skill ids exactly as written: one that does not fit the §2 grammar is "
                          "skipped instead of normalised."),
        click.option("--normalise", is_flag=True, hidden=True,
                     help="Normalise skill ids (the default; kept for older scripts)."),
        click.option("--skill-domain", metavar="DOMAIN",
                     help=f"Domain prefixed to a skill id that is no §2 identifier, once normalised (default "
                          f"{DEFAULT_SKILL_DOMAIN}: book_air_tickets -> {DEFAULT_SKILL_DOMAIN}.book-air-tickets, "
                          f"Order.Investigate -> {DEFAULT_SKILL_DOMAIN}.order.investigate)."),
        click.option("--allow-empty", is_flag=True,
                     help="Write agents that end up with no capabilities (else exit 1, nothing written)."),
    ]):
        fn = option(fn)
    return fn


def _naming(versions, strict_ids, skill_domain, bad: list[str]) -> dict[str, Any]:
    default, per_skill = _versions(versions, bad)
    defaulted = set()
    if default is None:
        default = DEFAULT_CAPABILITY_VERSION
        defaulted.add("capability_version")
    if skill_domain is None and not strict_ids:
        skill_domain = DEFAULT_SKILL_DOMAIN
        defaulted.add("skill_domain")
    return dict(capability_version=default, skill_versions=per_skill, normalise=not strict_ids,
                skill_domain=skill_domain, defaulted=frozenset(defaulted))


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


@import_group.command("a2a")
@click.argument("cards", nargs=-1, required=True, metavar="CARD|URL...")
@_agent_options
@_naming_options
@click.option("--card-key", "card_keys", multiple=True, metavar="FILE",
              help="A public key that signs cards (JWK, JWKS or PEM; repeatable). Signatures are "
                   "checked against these only; a card whose signature does not verify with a key "
                   "given for its kid is skipped, an unsigned or unverifiable one is kept and "
                   "reported (--require-signed skips it).")
@click.option("--require-signed", is_flag=True,
              help="Skip every card whose signature does not verify with a --card-key (unsigned and "
                   "unverifiable cards too). Needs --card-key.")
@click.option("--etag-cache", metavar="FILE",
              help="Remember each fetched card's ETag here, so a refresh sends If-None-Match and an "
                   "unchanged card costs a 304.")
@click.option("--timeout", type=Seconds(min=0.1, max=600), default=10.0, show_default=True,
              help="Seconds for each network operation of a fetch (the whole transfer gets 3x).")
@click.option("--max-bytes", type=click.IntRange(min=1024), default=Limits.max_bytes, show_default=True,
              help="Largest card read from the network; reading stops past it.")
@_output_options
def a2a(cards, namespace, clearances, grants_path, residency, latency_class, cost_ceiling,
        versions, strict_ids, normalise, skill_domain, allow_empty, card_keys, require_signed, etag_cache,
        timeout, max_bytes, output, report_path, as_json) -> None:
    """Declarations from A2A Agent Cards: files, directories of *.json, - for standard input, or
    the URL of a running agent (its card is fetched from /.well-known/agent-card.json, then the
    legacy /.well-known/agent.json).

    A file holds one card, a JSON array of cards or JSON Lines. Skill ids become capability
    names (A3 §8), normalised to the §2 grammar (reported; --strict-ids to refuse instead). The
    namespace is --namespace, else the host of the card's URL (reported); capability versions
    default to 1 (reported); clearances, residency and model come from the flags, or are
    reported as not derived. Each declaration says where to reach the agent (`endpoint`).
    """
    if strict_ids and normalise:
        raise BadInput("--strict-ids and --normalise contradict each other; give one")
    if require_signed and not card_keys:
        raise BadInput("--require-signed: give the keys cards are signed with (--card-key FILE)")
    bad: list[str] = []
    supplied = _supplied(bad, namespace=namespace, clearances=tuple(clearances), grants=_grants(grants_path),
                         residency=tuple(residency) or None, latency_class=latency_class,
                         cost_ceiling_usd=cost_ceiling, derive_namespace=namespace is None,
                         **_naming(versions, strict_ids, skill_domain, bad))
    urls = [c for c in cards if _is_url(c)]
    if urls:
        require("a3fast import a2a URL (cards fetched from running agents)", "httpx")
    if card_keys:
        require("a3fast import a2a --card-key (card signatures checked)", "joserfc")
    keys = _card_keys(card_keys)
    outputs = _outputs(output, report_path, as_json,
                       inputs={**_given(cards), **_given(card_keys), "--grants": grants_path},
                       read=(cards, (".json", ".jsonl"), "A2A agent cards"))
    report = ImportReport("a2a")
    files = [c for c in cards if not _is_url(c)]
    docs = _read(files, (".json", ".jsonl"), _json(report), report, "A2A agent cards") if files else []
    cache = EtagCache(etag_cache)
    fetched: dict[str, str] = {}
    limits = Limits(timeout=timeout, deadline=timeout * 3, max_bytes=max_bytes)
    for url in urls:
        shown = without_credentials(url)      # a password in the URL fetches; it is never shown
        report.read(shown)
        try:
            card = fetch_card(url, limits, cache)
        except FetchError as exc:
            report.skip(shown, "$", exc.message)
            continue
        if card.revalidated:
            report.count("cards unchanged since the last fetch (HTTP 304, ETag)")
        served, problems = usable_json_documents(card.body, shown)
        for problem in problems:
            report.skip(shown, problem.path, f"expected {problem.expected}, found {problem.found} "
                                             f"(served at {without_credentials(card.url)})")
        if served:
            docs += served
            fetched[shown] = without_credentials(card.url)
    result = _run(lambda: import_cards(docs, supplied, report, fetched=fetched, keys=keys,
                                       require_verified=require_signed))
    _finish(result, outputs, require_capabilities=not allow_empty)
    try:
        cache.save()
    except OSError as exc:
        say(f"a3fast: --etag-cache {etag_cache}: not saved ({exc.strerror or exc})")


@import_group.command("oasf")
@click.argument("records", nargs=-1, required=True, metavar="RECORD...")
@_agent_options
@_naming_options
@_output_options
def oasf(records, namespace, clearances, grants_path, residency, latency_class, cost_ceiling,
         versions, strict_ids, normalise, skill_domain, allow_empty, output, report_path, as_json) -> None:
    """Declarations from OASF records (AGNTCY directory records; files, directories, or -).

    Each OASF taxonomy skill becomes a capability `oasf.<category>.<class>`; a record that embeds
    an A2A Agent Card (module integration/a2a) also gives the card's skills and endpoint, read as
    `import a2a` reads a card. The namespace is --namespace, else the embedded card's URL host.
    """
    bad: list[str] = []
    supplied = _supplied(bad, namespace=namespace, clearances=tuple(clearances), grants=_grants(grants_path),
                         residency=tuple(residency) or None, latency_class=latency_class,
                         cost_ceiling_usd=cost_ceiling, derive_namespace=namespace is None,
                         **_naming(versions, strict_ids, skill_domain, bad))
    outputs = _outputs(output, report_path, as_json, inputs={**_given(records), "--grants": grants_path},
                       read=(records, (".json", ".jsonl"), "OASF records"))
    report = ImportReport("oasf")
    docs = _read(records, (".json", ".jsonl"), _json(report), report, "OASF records")
    result = _run(lambda: import_records(docs, supplied, report))
    _finish(result, outputs, require_capabilities=not allow_empty)


def _card_keys(paths: Iterable[str]) -> CardKeys:
    keys = CardKeys()
    for path in paths:
        try:
            read_keys(read_bytes(path), path, keys)
        except CardKeyError as exc:
            raise BadInput(f"--card-key {exc}") from None
    return keys


@import_group.command("mcp")
@click.argument("listings", nargs=-1, metavar="[LISTING...]")
@click.option("--server-command", metavar="'CMD ARGS'",
              help="List the tools of a running MCP server started by this command line (stdio).")
@click.option("--server-url", metavar="URL",
              help="List the tools of the MCP server at this URL (streamable HTTP).")
@click.option("--timeout", type=Seconds(min=0.1, max=600), default=30.0, show_default=True,
              help="Seconds for a running server's whole tool listing.")
@click.option("--fleet", "fleet_path", metavar="FLEET",
              help="Declarations to bind the tools into (JSON Lines or a JSON array); passed through.")
@click.option("--bind", "bind", multiple=True, metavar="AGENT",
              help="An agent bound to this MCP server (repeatable); made from the flags if not in --fleet.")
@click.option("--bind-all", is_flag=True, help="Bind every agent of --fleet to this server.")
@_agent_options
@click.option("--capability", "capabilities", multiple=True, metavar="NAME/VERSION",
              help="A capability declared by each agent made here (repeatable); a tool listing "
                   "declares none (A3 §8).")
@click.option("--server", metavar="NAME", help="The server's name: the domain of draft contract ids.")
@click.option("--contracts", "contracts_path", metavar="FILE",
              help="Write draft portable-authority contracts inferred from the tools' annotations "
                   "(untrusted hints; JSON Lines, as `a3fast resolve --contracts` reads; needs --server).")
@click.option("--mappings", "mappings_path", metavar="FILE",
              help="Write the host mappings tool -> drafted contract (JSON Lines, as "
                   "`a3fast resolve --mappings` reads; needs --server).")
@_output_options
def mcp(listings, server_command, server_url, timeout, fleet_path, bind, bind_all, namespace,
        clearances, grants_path, residency, latency_class, cost_ceiling, capabilities, server,
        contracts_path, mappings_path, output, report_path, as_json) -> None:
    """Bind the tools of an MCP server to agents (A3 §3 `tools`).

    The tools come from a running server (--server-command, --server-url: initialize, then every
    page of tools/list) or from LISTING files: a bare array of tools, {"tools": [...]}, or a
    JSON-RPC tools/list response; several files are pages of one listing when each names a
    nextCursor. Tool names become the bound agents' `tools`, never capabilities; the server is
    recorded under the bound agents' `tool_servers`. A server name such as github-mcp-server is
    mapped to a §2 domain (github) for contract ids, and reported.
    """
    sources = bool(listings) + (server_command is not None) + (server_url is not None)
    if sources != 1:
        raise BadInput("name one source of tools: LISTING files, --server-command 'CMD ...' or "
                       "--server-url URL" + (f" (got {sources})" if sources else ""))
    if server is not None:
        _check_server_name(server)
    if server_command is not None or server_url is not None:
        require(f"a3fast import mcp {'--server-command' if server_command is not None else '--server-url'} "
                f"(tools listed from a running server)", "anyio", "mcp")
    drafts = contracts_path is not None or mappings_path is not None
    if not (bind or bind_all or drafts):
        raise BadInput("nothing to do: name the agents bound to this server (--bind AGENT, "
                       "--bind-all) or ask for --contracts FILE / --mappings FILE")
    if bind_all and not fleet_path:
        raise BadInput("--bind-all: binds every agent of --fleet, and no --fleet was given")
    if output and not (bind or bind_all):
        raise BadInput("--output: no agent is bound (--bind, --bind-all), so there are no declarations to write")
    bad: list[str] = []
    supplied = _supplied(bad, namespace=namespace, capabilities=_capabilities(capabilities, bad),
                         clearances=tuple(clearances), grants=_grants(grants_path),
                         residency=tuple(residency) or None, latency_class=latency_class,
                         cost_ceiling_usd=cost_ceiling)
    outputs = _outputs(output, report_path, as_json, declarations=bool(bind or bind_all),
                       contracts=contracts_path, mappings=mappings_path,
                       # (not --fleet: `--fleet F --bind A -o F` adds the tools to F in place, written whole)
                       inputs={**_given(listings), "--grants": grants_path},
                       read=(listings, (".json",), "MCP tool listings"))
    fleet = []
    if fleet_path:
        require_kind(fleet_path, "declarations")
        fleet = [Document(fleet_path, prefix, doc) for prefix, doc in read_json_documents(fleet_path)]
    report = ImportReport("mcp")
    tool_server = None
    if listings:
        docs = _read(listings, (".json",), lambda data, source: [json_document(data, source)], report,
                     "MCP tool listings")
    else:
        docs, server_name, tool_server = _live_listing(server_command, server_url, timeout, report)
        server = server if server is not None else server_name
    if server is not None and not is_domain(server):
        domain = server_domain(server)
        if domain is None:
            raise BadInput(f"--server: expected a server name that gives a §2 domain, found {server!r}")
        report.note("server name mapped", "supplied", "$.server",
                    f"server {server!r} is named {domain!r} in contract ids (§2: lowercase, "
                    f"dot-separated, no hyphen in the first segment)")
        server = domain
    if tool_server is not None and server is not None:
        tool_server = {"name": server, **tool_server}
    result = _run(lambda: import_listings(docs, supplied, fleet=fleet,
                                          bind=None if bind_all else bind, server=server,
                                          contracts=drafts, report=report, tool_server=tool_server),
                  files=(fleet_path,) if fleet_path else ())
    _finish(result, outputs)


def _check_server_name(server: str) -> None:
    """--server is printed in the report and becomes the domain of contract ids: a control
    character in it (a terminal escape, a newline) is refused rather than mapped away."""
    import unicodedata

    for at, char in enumerate(server):
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            raise BadInput(f"--server: a control character (U+{ord(char):04X}) at position {at + 1} of "
                           f"{server!r}; a server name is printable text")
    if not server.strip():
        raise BadInput("--server: an empty server name")


def _live_listing(command: str | None, url: str | None, timeout: float,
                  report: ImportReport) -> tuple[list[Document], str | None, dict[str, Any]]:
    """The pages of a running server's tools/list; a server that cannot be listed whole is
    BadInput (exit 2, nothing written): a partial listing would bind too few tools."""
    from ..interop.mcp_live import ListingError, ServerSpec, list_tools

    try:
        spec = ServerSpec.from_command(command) if command is not None else ServerSpec(url=url)
        if url is not None and not _is_url(url):
            raise ListingError(url, "expected an http:// or https:// URL")
        listing = list_tools(spec, timeout=timeout)
    except ListingError as exc:
        raise BadInput(f"{'--server-url' if url is not None else '--server-command'} {exc.server}: "
                       f"{exc.message}; nothing written") from None
    report.read(f"mcp {spec.label}")
    report.count("pages of tools/list read from the running server", len(listing.pages))
    docs = [Document(f"mcp {spec.label}", d.path, d.value) for d in listing.documents()]
    return docs, listing.server_name, spec.tool_server(None)


@import_group.command("k8s")
@click.argument("manifests", nargs=-1, required=True, metavar="MANIFEST...")
@click.option("--namespace", metavar="NS",
              help="Namespace for declarations whose object has no metadata.namespace.")
@_naming_options
@_output_options
def k8s(manifests, namespace, versions, strict_ids, normalise, skill_domain, allow_empty, output,
        report_path, as_json) -> None:
    """Declarations carried by Kubernetes manifests (YAML or JSON; files, directories, or -).

    Read from the `a3.dev/declaration` annotation (JSON) of any object, from AgentDeclaration
    resources (spec), and from kagent Agent resources (kagent.dev v1alpha1/v1alpha2: the skills of
    a2aConfig become capabilities as a card's do, toolNames become tools). metadata.name and
    metadata.namespace fill the agent when it is left out.
    """
    bad: list[str] = []
    supplied = _supplied(bad, namespace=namespace, **_naming(versions, strict_ids, skill_domain, bad))
    outputs = _outputs(output, report_path, as_json, inputs=_given(manifests),
                       read=(manifests, (".yaml", ".yml", ".json"), "Kubernetes manifests"))
    report = ImportReport("k8s")
    docs = _read(manifests, (".yaml", ".yml", ".json"), _yaml(report), report, "Kubernetes manifests")
    result = _run(lambda: declarations_from_manifests(docs, supplied, report))
    # A declaration its author wrote with no capabilities is as meant; one derived from a kagent
    # Agent's skills that came out empty is not.
    _finish(result, outputs, require_capabilities=not allow_empty, derived_only=True)


# -- helpers --------------------------------------------------------------------------------------
def _versions(values: Iterable[str], bad: list[str]) -> tuple[int | None, dict[str, int]]:
    """`--capability-version N` (every skill) and `SKILL=N` (one skill); problems go to `bad`."""
    default, per_skill = None, {}
    for value in values:
        skill, sep, number = value.rpartition("=")
        if not _digits(number) or (sep and not skill):
            bad.append(f"--capability-version: expected N or SKILL=N with N a major version, found {describe(value)}")
        elif sep:
            per_skill[skill] = int(number)
        else:
            default = int(number)
    return default, per_skill


def _digits(number: str) -> bool:
    """Whether `number` is ASCII digits short enough to read as an int (a major version's bound, 2^63,
    is checked after; Python refuses to read more than 4,300 digits at all)."""
    return number.isdigit() and number.isascii() and len(number) <= 40


def _capabilities(values: Iterable[str], bad: list[str]) -> tuple[tuple[str, int], ...]:
    """`--capability NAME/VERSION`; problems go to `bad`."""
    out = []
    for value in values:
        name, sep, number = value.rpartition("/")
        if not sep or not _digits(number):
            bad.append(f"--capability: expected NAME/VERSION such as order.investigate/2, found {describe(value)}")
        else:
            out.append((name, int(number)))
    return tuple(out)


def _supplied(bad: list[str], **fields: Any) -> Supplied:
    """The caller's answers, checked; every bad flag is one line of one BadInput."""
    try:
        supplied = Supplied(**fields).check()
    except SchemaError as exc:
        bad = bad + [_flag_line(p.path, p.expected, p.found) for p in exc.problems]
    if bad:
        raise BadInput(bad)
    return supplied


def _flag_line(path: str, expected: str, found: str) -> str:
    key = path[2:].split("[", 1)[0].split(".", 1)[0]
    return f"{FLAGS.get(key, path)}: expected {expected}, found {found}"


def _grants(path: str | None) -> dict[str, tuple[str, ...]]:
    if path is None:
        return {}
    data = read_bytes(path)
    require_kind(path, "grants", data=data)
    try:
        obj = _yaml_or_json(data, path)
        return read_grants(obj, path)
    except SchemaError as exc:
        raise BadInput.from_error(exc, path) from None


def _yaml_or_json(data: bytes, source: str) -> Any:
    if not source.lower().endswith((".yaml", ".yml")):
        return loads(data, source)
    docs, problems = yaml_documents(data, source)
    if problems:
        raise SchemaError(problems, source)
    if len(docs) != 1:
        raise SchemaError([Problem("$", "one YAML document", f"{len(docs)}")], source)
    return to_json(docs[0].value)


def _json(report: ImportReport) -> Callable[[bytes, str], list[Document]]:
    """The documents of a JSON file; each line of JSON Lines that cannot be read is a skipped item
    and the others are used."""
    def parse(data: bytes, source: str) -> list[Document]:
        docs, problems = usable_json_documents(data, source)
        for problem in problems:
            report.skip(source, problem.path, f"expected {problem.expected}, found {problem.found}")
        return docs
    return parse


def _yaml(report: ImportReport) -> Callable[[bytes, str], list[Document]]:
    def parse(data: bytes, source: str) -> list[Document]:
        docs, problems = yaml_documents(data, source)
        for problem in problems:
            report.skip(source, problem.path, f"expected {problem.expected}, found {problem.found}; "
                                              f"the rest of the file was not read")
        return docs
    return parse


#: Fewer input files than this are read in well under a second: no progress bar.
PROGRESS_MIN_FILES = 200


def _read(paths: Iterable[str], suffixes: tuple[str, ...],
          parse: Callable[[bytes, str], list[Document]], report: ImportReport, what: str) -> list[Document]:
    """Documents of every readable file; a file that cannot be read or parsed is a skipped item
    (one bad card among a thousand does not stop an import)."""
    docs: list[Document] = []
    files = expand_paths(paths, suffixes)
    if not files:
        raise BadInput(f"no input files: the directories given hold no {', '.join(suffixes)} files")
    if len(files) < PROGRESS_MIN_FILES:
        for path in files:
            _read_one(path, parse, report, docs, what, len(files) > 1)
        return docs
    with progress(files, len(files), "reading") as items:
        for path in items:
            _read_one(path, parse, report, docs, what, True)
    return docs


def _read_one(path: str, parse: Callable[[bytes, str], list[Document]], report: ImportReport,
              docs: list[Document], what: str, among_many: bool) -> None:
    source = "<stdin>" if path == "-" else shown(path)
    report.read(source)
    try:
        data = read_bytes(path)
    except InputError as exc:
        report.skip(source, "$", exc.lines[0].split(": ", 1)[-1])
        return
    try:
        require_kind(path, what, data=data)
    except InputError as exc:
        # a file a3fast wrote of another kind: the one input given, one line and exit 2; among
        # many (the fleet an earlier import wrote into the directory of cards), a skipped item
        if not among_many:
            raise
        _, looks, rest = exc.lines[0].partition(" looks like ")      # "NAME looks like K, not K2"
        report.skip(source, "$", f"looks like {rest}" if looks else exc.lines[0])
        return
    try:
        docs += parse(data, source)
    except SchemaError as exc:
        for problem in exc.problems:
            report.skip(source, problem.path, f"expected {problem.expected}, found {problem.found}")


def _run(fn: Callable[[], ImportResult], files: tuple[str, ...] = ()) -> ImportResult:
    try:
        return fn()
    except SchemaError as exc:
        if exc.source is not None and exc.source in files:  # a caller's file (--fleet) the import refused
            raise BadInput(exc.lines()) from None
        # a supplied value the importer refused (e.g. --server)
        raise BadInput([_flag_line(p.path, p.expected, p.found) for p in exc.problems]) from None


@dataclass(frozen=True)
class Outputs:
    """Where an import's results go: None for an output not asked for, '-' for standard output."""

    declarations: str | None
    report: str | None
    contracts: str | None
    mappings: str | None
    as_json: bool

    def paths(self) -> list[str]:
        return [p for p in (self.declarations, self.report, self.contracts, self.mappings) if p is not None]


def _outputs(output: str | None, report_path: str | None, as_json: bool, *, declarations: bool = True,
             contracts: str | None = None, mappings: str | None = None,
             inputs: Mapping[str, str | None] | None = None,
             read: tuple[Iterable[str], tuple[str, ...], str] | None = None) -> Outputs:
    """The outputs asked for, checked before any input is read: every one must be writable and
    distinct, only one may go to standard output, and none may be a file given as an input
    (`inputs`: what names it -> path) or one the import reads from a directory it is given (`read`:
    the paths given, the suffixes of the files read in their directories, the kind read). A file of
    another kind in such a directory (the declarations an earlier run wrote among the cards) is
    skipped by the read, so an output may replace it."""
    if declarations:
        output = output if output is not None else (None if as_json else "-")
    outputs = Outputs(output if declarations else None, report_path, contracts, mappings, as_json)
    check_outputs(outputs.paths() + (["-"] if as_json else []))
    check_not_inputs(outputs.paths(), inputs or {})
    if read is not None:
        _check_not_read(outputs.paths(), *read)
    return outputs


def _check_not_read(outputs: list[str], paths: Iterable[str], suffixes: tuple[str, ...], what: str) -> None:
    """BadInput when an output is a file a directory of `paths` holds that the import would read as
    `what`: written whole and renamed into place, it would replace an input."""
    directories = [p for p in paths if p != "-" and not _is_url(p) and os.path.isdir(p)]
    for output in outputs:
        if output == "-" or not directories or not os.path.isfile(output) \
                or not os.path.basename(output).lower().endswith(suffixes):
            continue
        held = next((d for d in directories if os.path.samefile(os.path.dirname(os.path.abspath(output)), d)), None)
        if held is None:
            continue
        try:
            require_kind(output, what)
        except InputError:
            continue        # of another kind: the read skips it
        raise BadInput(f"{output}: an output must not replace a file of {held} that this command reads "
                       f"as one of its {what}")


def _given(paths: Iterable[str]) -> dict[str, str]:
    """The input files of a command's arguments, for `_outputs`, each named by itself."""
    return {path: path for path in paths if path != "-" and not _is_url(path) and os.path.isfile(path)}


def _lines(docs: Iterable[Any]) -> bytes:
    return b"".join(orjson.dumps(doc) + b"\n" for doc in docs)


def _finish(result: ImportResult, outputs: Outputs, *, require_capabilities: bool = False,
            derived_only: bool = False) -> None:
    """Decide the outcome, then print the report (or, with --json, the whole result): exit 2 if
    nothing usable was read, 1 if an agent would have no capabilities (unless allowed), else write
    every output asked for, all or nothing. The headline says the outcome, never more."""
    empty = [d["agent"]["name"] for d in result.declarations if not d.get("capabilities")
             and (not derived_only or d["agent"]["name"] in result.report.derived)] \
        if require_capabilities else []
    outcome = None
    if not result.usable:
        outcome = "nothing usable read; no output written"
    elif empty:
        n = len(result.declarations)
        outcome = (f"refused: {len(empty)} of {n} agent{'s' if n != 1 else ''} would have no "
                   f"capabilities; no output written")
    if outcome is not None:
        _print_report(result, outcome)
    if not result.usable:
        say("a3fast: nothing usable was read; no output written")
        sys.exit(EXIT_BAD_INPUT)
    if empty:
        listed = ", ".join(repr(n) for n in empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        say(f"a3fast: no capabilities for {listed}: a task can never be placed on such an agent "
            f"(see the skipped skills above); give --capability-version or --skill-domain, or "
            f"--allow-empty to write them anyway")
        sys.exit(EXIT_NEGATIVE)
    report = result.report.to_dict()
    content = {outputs.declarations: _lines(result.declarations),
               outputs.report: orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n",
               outputs.contracts: _lines(result.contracts),
               outputs.mappings: _lines(result.mappings)}
    paths = outputs.paths()
    if outputs.as_json:
        whole: dict[str, Any] = {"declarations": result.declarations, "report": report}
        if outputs.contracts is not None or outputs.mappings is not None:
            whole.update(contracts=result.contracts, mappings=result.mappings)
        content["-"] = orjson.dumps(whole) + b"\n"
        paths.append("-")
    with atomic_outputs(paths) as streams:
        for path, stream in zip(paths, streams):
            stream.write(content[path])
    if not outputs.as_json:      # its headline says they were written: only once they are
        _print_report(result, None)


def _print_report(result: ImportResult, outcome: str | None) -> None:
    for line in result.report.lines(outcome=outcome):   # file names and card text, shown escaped
        say(printable(line))
