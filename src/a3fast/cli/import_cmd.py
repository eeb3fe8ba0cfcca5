"""`a3fast import a2a|mcp|k8s`: build a fleet (JSON Lines of declarations) from what agents
already publish, and say what was derived, what the caller supplied and what was skipped.

The report goes to standard error, so standard output can be the fleet itself. Exit 0 when
something usable was read, 2 when nothing was (or when a flag or a file the caller gave is bad).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import click
import orjson

from ..errors import Problem, SchemaError
from ..interop.a2a import import_cards
from ..interop.collect import ImportResult
from ..interop.kubernetes import declarations_from_manifests
from ..interop.mcp import import_listings
from ..interop.report import ImportReport
from ..interop.sources import (Document, expand_paths, json_document, json_documents, to_json,
                               yaml_documents)
from ..interop.supply import Supplied, read_grants
from ..schema import LATENCY_CLASSES, loads
from .common import (EXIT_BAD_INPUT, BadInput, atomic_outputs, check_outputs, json_option, output_option,
                     progress, read_bytes, read_json_documents)

#: Supplied field (its JSON path's first key) -> the flag the caller used for it.
FLAGS = {
    "namespace": "--namespace", "capability_version": "--capability-version",
    "skill_versions": "--capability-version", "capabilities": "--capability",
    "clearances": "--clearance", "grants": "--grants", "residency": "--residency",
    "latency_class": "--latency-class", "cost_ceiling_usd": "--cost-ceiling",
    "skill_domain": "--skill-domain", "server": "--server", "normalise": "--normalise",
}


@click.group("import")
def import_group() -> None:
    """Build a fleet from A2A Agent Cards, MCP tool listings or Kubernetes manifests.

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


@import_group.command("a2a")
@click.argument("cards", nargs=-1, required=True, metavar="CARD...")
@_agent_options
@click.option("--capability-version", "versions", multiple=True, metavar="N|SKILL=N",
              help="Major version of every skill's capability, or of one skill (repeatable). "
                   "A card's own `version` is the agent's release, never used as one.")
@click.option("--normalise", is_flag=True,
              help="Turn skill ids that do not fit the §2 grammar into identifiers (reported).")
@click.option("--skill-domain", metavar="DOMAIN",
              help="Domain prefixed to normalised skill ids, e.g. travel -> travel.book-air-tickets.")
@_output_options
def a2a(cards, namespace, clearances, grants_path, residency, latency_class, cost_ceiling,
        versions, normalise, skill_domain, output, report_path, as_json) -> None:
    """Declarations from A2A Agent Cards (files, directories of *.json, or - for standard input).

    A file holds one card, a JSON array of cards or JSON Lines. Skill ids become capability
    names (A3 §8); the namespace, capability versions, clearances, residency and model come from
    the flags, or are reported as not derived.
    """
    bad: list[str] = []
    default, per_skill = _versions(versions, bad)
    supplied = _supplied(bad, namespace=namespace, capability_version=default, skill_versions=per_skill,
                         clearances=tuple(clearances), grants=_grants(grants_path),
                         residency=tuple(residency) or None, latency_class=latency_class,
                         cost_ceiling_usd=cost_ceiling, normalise=normalise, skill_domain=skill_domain)
    outputs = _outputs(output, report_path, as_json)
    report = ImportReport("a2a")
    docs = _read(cards, (".json", ".jsonl"), json_documents, report)
    result = _run(lambda: import_cards(docs, supplied, report))
    _finish(result, outputs)


@import_group.command("mcp")
@click.argument("listings", nargs=-1, required=True, metavar="LISTING...")
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
def mcp(listings, fleet_path, bind, bind_all, namespace, clearances, grants_path, residency,
        latency_class, cost_ceiling, capabilities, server, contracts_path, mappings_path, output,
        report_path, as_json) -> None:
    """Bind the tools of an MCP tool listing to agents (A3 §3 `tools`).

    LISTING is a bare array of tools, {"tools": [...]}, or a JSON-RPC tools/list response; several
    files are pages of one listing when each names a nextCursor. Tool names become the bound
    agents' `tools`, never capabilities.
    """
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
                       contracts=contracts_path, mappings=mappings_path)
    fleet = []
    if fleet_path:
        fleet = [Document(fleet_path, prefix, doc) for prefix, doc in read_json_documents(fleet_path)]
    report = ImportReport("mcp")
    docs = _read(listings, (".json",), lambda data, source: [json_document(data, source)], report)
    result = _run(lambda: import_listings(docs, supplied, fleet=fleet,
                                          bind=None if bind_all else bind, server=server,
                                          contracts=drafts, report=report))
    _finish(result, outputs)


@import_group.command("k8s")
@click.argument("manifests", nargs=-1, required=True, metavar="MANIFEST...")
@click.option("--namespace", metavar="NS",
              help="Namespace for declarations whose object has no metadata.namespace.")
@_output_options
def k8s(manifests, namespace, output, report_path, as_json) -> None:
    """Declarations carried by Kubernetes manifests (YAML or JSON; files, directories, or -).

    Read from the `a3.dev/declaration` annotation (JSON) of any object, and from AgentDeclaration
    resources (spec). metadata.name and metadata.namespace fill the agent when it is left out.
    """
    supplied = _supplied([], namespace=namespace)
    outputs = _outputs(output, report_path, as_json)
    report = ImportReport("k8s")
    docs = _read(manifests, (".yaml", ".yml", ".json"), _yaml(report), report)
    result = _run(lambda: declarations_from_manifests(docs, supplied, report))
    _finish(result, outputs)


# -- helpers --------------------------------------------------------------------------------------
def _versions(values: Iterable[str], bad: list[str]) -> tuple[int | None, dict[str, int]]:
    """`--capability-version N` (every skill) and `SKILL=N` (one skill); problems go to `bad`."""
    default, per_skill = None, {}
    for value in values:
        skill, sep, number = value.rpartition("=")
        if not number.isdigit() or not number.isascii() or (sep and not skill):
            bad.append(f"--capability-version: expected N or SKILL=N with N a major version, found {value!r}")
        elif sep:
            per_skill[skill] = int(number)
        else:
            default = int(number)
    return default, per_skill


def _capabilities(values: Iterable[str], bad: list[str]) -> tuple[tuple[str, int], ...]:
    """`--capability NAME/VERSION`; problems go to `bad`."""
    out = []
    for value in values:
        name, sep, number = value.rpartition("/")
        if not sep or not number.isdigit() or not number.isascii():
            bad.append(f"--capability: expected NAME/VERSION such as order.investigate/2, found {value!r}")
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
          parse: Callable[[bytes, str], list[Document]], report: ImportReport) -> list[Document]:
    """Documents of every readable file; a file that cannot be read or parsed is a skipped item
    (one bad card among a thousand does not stop an import)."""
    docs: list[Document] = []
    files = expand_paths(paths, suffixes)
    if not files:
        raise BadInput(f"no input files: the directories given hold no {', '.join(suffixes)} files")
    if len(files) < PROGRESS_MIN_FILES:
        for path in files:
            _read_one(path, parse, report, docs)
        return docs
    with progress(files, len(files), "reading") as items:
        for path in items:
            _read_one(path, parse, report, docs)
    return docs


def _read_one(path: str, parse: Callable[[bytes, str], list[Document]], report: ImportReport,
              docs: list[Document]) -> None:
    source = "<stdin>" if path == "-" else path
    report.read(source)
    try:
        data = read_bytes(path)
    except BadInput as exc:
        report.skip(source, "$", exc.lines[0].split(": ", 1)[-1])
        return
    try:
        docs += parse(data, source)
    except SchemaError as exc:
        for problem in exc.problems:
            report.skip(source, problem.path, f"expected {problem.expected}, found {problem.found}")


def _run(fn: Callable[[], ImportResult]) -> ImportResult:
    try:
        return fn()
    except SchemaError as exc:  # a supplied value the importer refused (e.g. --server)
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
             contracts: str | None = None, mappings: str | None = None) -> Outputs:
    """The outputs asked for, checked before any input is read: every one must be writable and
    distinct, and only one may go to standard output."""
    if declarations:
        output = output if output is not None else (None if as_json else "-")
    outputs = Outputs(output if declarations else None, report_path, contracts, mappings, as_json)
    check_outputs(outputs.paths() + (["-"] if as_json else []))
    return outputs


def _lines(docs: Iterable[Any]) -> bytes:
    return b"".join(orjson.dumps(doc) + b"\n" for doc in docs)


def _finish(result: ImportResult, outputs: Outputs) -> None:
    """Print the report (or, with --json, the whole result); exit 2 if nothing usable was read,
    else write every output asked for, all or nothing."""
    if not outputs.as_json:
        for line in result.report.lines():
            click.echo(line, err=True)
    if not result.usable:
        click.echo("a3fast: nothing usable was read; no output written", err=True)
        sys.exit(EXIT_BAD_INPUT)
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
