"""MCP tool listings -> tool bindings (A3 §3 `tools`), and draft authority contracts on request.

A3 §8: "MCP describes tools, not agents; a tool listing is not a capability declaration." So tool
names become the `tools` of the agents the caller says are bound to the server, verbatim (§5 tool
names are opaque), and never capabilities. The listing shapes read are a bare array of Tool
objects, a ListToolsResult `{"tools": [...], "nextCursor"?}` and a JSON-RPC response to
`tools/list` whose `result` is one. Several files are pages of one listing when each but the
last names a `nextCursor`; a listing whose last page still names one is reported incomplete.

Draft contracts (portable authority) are derived from tool annotations, which MCP itself calls
hints that clients must not trust from an untrusted server. Each draft says so (`trusted: false`,
`inferred_from: "mcp-annotations"`), records the hints it used and which were MCP's defaults
(readOnlyHint false, destructiveHint true, idempotentHint false, openWorldHint true), and reads:
read-only -> `read`; neither read-only nor destructive -> `create`; destructive -> `delete` when the
tool's name says delete/remove/destroy/purge/erase/drop, else `modify`, with a `destructive` effect.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import Problem, SchemaError, describe, json_path
from .collect import DeclarationSet, ImportResult
from .naming import is_domain, normalise_identifier
from .report import ImportReport
from .sources import Document
from .supply import Supplied, text_problem

__all__ = ["HINT_DEFAULTS", "Tool", "ListingPage", "read_page", "chain_pages", "effective_hints",
           "draft_contract", "import_listings", "INFERRED_FROM"]

#: MCP ToolAnnotations defaults, applied when a hint is absent (or not a boolean).
HINT_DEFAULTS = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False,
                 "openWorldHint": True}
#: The marker on every draft contract: where its meaning came from.
INFERRED_FROM = "mcp-annotations"
DELETE_WORDS = frozenset({"delete", "remove", "destroy", "purge", "erase", "drop"})
ORIGIN = "a tool listing"
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


@dataclass(frozen=True)
class Tool:
    """One MCP Tool: its name, where it was listed, and the annotation hints it stated."""

    name: str
    source: str
    path: str
    hints: Mapping[str, bool]
    #: annotations that were not usable and so left to MCP's defaults, each at its path
    ignored: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class ListingPage:
    """One file of a tool listing. `shape` is "array", "result" or "jsonrpc"."""

    source: str
    path: str
    shape: str
    tools: tuple[Tool, ...]
    next_cursor: str | None


def read_page(obj: Any, source: str = "listing", path: str = "$") -> tuple[ListingPage, list[Problem]]:
    """Read one page of a tool listing. Raises SchemaError if `obj` is none of the listing shapes;
    returns the page and the problems of the tools that were left out (a hint that was ignored is
    kept on its Tool, which is still usable)."""
    shape, tools_doc, result_path, result = _locate(obj, source, path)
    problems: list[Problem] = []
    tools = []
    tools_path = json_path(result_path, "tools") if shape != "array" else path
    for i, item in enumerate(tools_doc):
        tpath = json_path(tools_path, i)
        if not isinstance(item, Mapping):
            problems.append(Problem(tpath, "an MCP Tool (an object)", describe(item)))
            continue
        name = item.get("name")
        if why := text_problem(name):
            problems.append(Problem(json_path(tpath, "name"), f"the tool's name ({why})",
                                    describe(name) if "name" in item else "nothing"))
            continue
        assert isinstance(name, str)  # text_problem found none
        ignored: list[Problem] = []
        tools.append(Tool(name, source, tpath, _hints(item, tpath, ignored), tuple(ignored)))
    cursor = result.get("nextCursor") if result is not None else None
    if cursor is not None and not isinstance(cursor, str):
        problems.append(Problem(json_path(result_path, "nextCursor"), "a cursor (a string)", describe(cursor)))
        cursor = None
    return ListingPage(source, path, shape, tuple(tools), cursor or None), problems


def _locate(obj: Any, source: str, path: str) -> tuple[str, list[Any], str, Mapping[str, Any] | None]:
    """(shape, the tools array, the path of the object holding it, that object) — or SchemaError."""
    if isinstance(obj, list):
        return "array", obj, path, None
    if not isinstance(obj, Mapping):
        raise SchemaError([Problem(path, "an MCP tool listing (an array of tools, {\"tools\": [...]} "
                                         "or a JSON-RPC tools/list response)", describe(obj))], source)
    if "jsonrpc" in obj or "result" in obj or "error" in obj:
        error = obj.get("error")
        if isinstance(error, Mapping):
            raise SchemaError([Problem(json_path(path, "error"), "a tools/list result",
                                       f"a JSON-RPC error response (code {describe(error.get('code'))}, "
                                       f"message {describe(error.get('message'))})")], source)
        if error is not None and obj.get("result") is None:     # an error a server wrote as it saw fit
            raise SchemaError([Problem(json_path(path, "error"), "a tools/list result",
                                       f"a JSON-RPC error response (error {describe(error)})")], source)
        result = obj.get("result")
        rpath = json_path(path, "result")
        if not isinstance(result, Mapping):
            raise SchemaError([Problem(rpath, "a tools/list result (an object)",
                                       describe(result) if "result" in obj else "nothing")], source)
        if not isinstance(result.get("tools"), list):
            raise SchemaError([Problem(json_path(rpath, "tools"), "the tools/list result's tools (an array)",
                                       describe(result["tools"]) if "tools" in result else "nothing")],
                              source)
        return "jsonrpc", result["tools"], rpath, result
    if "tools" in obj:
        if not isinstance(obj["tools"], list):
            raise SchemaError([Problem(json_path(path, "tools"), "an array of MCP tools",
                                       describe(obj["tools"]))], source)
        return "result", obj["tools"], path, obj
    if "skills" in obj:
        raise SchemaError([Problem(path, "an MCP tool listing", "what looks like an A2A Agent Card "
                                                              "(import it as one)")], source)
    raise SchemaError([Problem(json_path(path, "tools"), "an array of MCP tools (ListToolsResult.tools)",
                               "nothing")], source)


def _hints(item: Mapping[str, Any], path: str, problems: list[Problem]) -> dict[str, bool]:
    """The annotation hints a tool states; a non-boolean hint is reported and treated as absent."""
    annotations = item.get("annotations")
    if annotations is None:
        return {}
    apath = json_path(path, "annotations")
    if not isinstance(annotations, Mapping):
        problems.append(Problem(apath, "tool annotations (an object); MCP defaults apply instead",
                                describe(annotations)))
        return {}
    stated = {}
    for key in HINT_DEFAULTS:
        if key not in annotations:
            continue
        if isinstance(annotations[key], bool):
            stated[key] = annotations[key]
        else:
            problems.append(Problem(json_path(apath, key), "a boolean hint; the MCP default applies "
                                                           "instead", describe(annotations[key])))
    return stated


def chain_pages(pages: Iterable[ListingPage]) -> list[list[ListingPage]]:
    """Group pages into listings: a page follows the one before it when that one named a
    nextCursor (the cursor a client passes back is not in the response, so order is the caller's)."""
    listings: list[list[ListingPage]] = []
    for page in pages:
        if listings and listings[-1][-1].next_cursor is not None:
            listings[-1].append(page)
        else:
            listings.append([page])
    return listings


def effective_hints(tool: Tool) -> tuple[dict[str, bool], list[str]]:
    """The hints that decide a tool's meaning, with MCP's defaults for absent ones, and the names
    of those that were defaulted. destructiveHint and idempotentHint mean something only when
    readOnlyHint is false (MCP), so a read-only tool's are left out."""
    read_only = tool.hints.get("readOnlyHint", HINT_DEFAULTS["readOnlyHint"])
    keys = ("readOnlyHint", "openWorldHint") if read_only else tuple(HINT_DEFAULTS)
    hints = {key: tool.hints.get(key, HINT_DEFAULTS[key]) for key in keys}
    return hints, [key for key in keys if key not in tool.hints]


def _words(name: str) -> set[str]:
    """The words of a tool's name, read as its contract id reads them (`normalise_identifier`:
    accents and compatibility forms folded to ASCII first), so that an id that says delete is
    never drafted as a modify."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    return {word.lower() for word in _WORD.findall(folded)}


def draft_contract(tool: Tool, server: str) -> dict[str, Any] | None:
    """A draft portable-authority contract for `tool` on `server`, or None if the tool's name
    gives no §2 identifier. The draft is marked untrusted: annotations are hints (see module doc)."""
    if not is_domain(server):
        raise ValueError(f"not a server name usable as a §2 domain: {server!r}")
    contract_id = normalise_identifier(tool.name, server)
    if contract_id is None:
        return None
    hints, defaulted = effective_hints(tool)
    operation_from = "hints"
    if hints["readOnlyHint"]:
        operation, effects, confirmation = "read", [], "policy_driven"
    elif not hints["destructiveHint"]:
        operation, effects, confirmation = "create", ["changes_state"], "policy_driven"
    else:
        # The hints say "may destroy", not whether by changing or removing; the name decides.
        operation = "delete" if _words(tool.name) & DELETE_WORDS else "modify"
        operation_from = "hints+name"
        effects, confirmation = ["changes_state", "destructive"], "always"
    if hints["openWorldHint"]:
        effects.append("open_world")
    return {
        "id": contract_id,
        "operation": operation,
        "resource": server,
        "effects": effects,
        "data_classes": [],
        "confirmation": confirmation,
        "inferred_from": INFERRED_FROM,
        "trusted": False,
        "hints": hints,
        "defaulted": defaulted,
        "operation_from": operation_from,
    }


def import_listings(documents: Iterable[Document], supplied: Supplied | None = None, *,
                    fleet: Iterable[Document] = (), bind: Iterable[str] | None = (),
                    server: str | None = None, contracts: bool = False,
                    report: ImportReport | None = None,
                    tool_server: Mapping[str, Any] | None = None) -> ImportResult:
    """Bind the tools of MCP listings to agents, and draft contracts from their annotations.

    `fleet` holds declarations already made (passed through, with the tools added to the bound
    ones); `bind` names the agents bound to the listed server, None meaning every agent of
    `fleet`. A bound agent not in `fleet` is made from `supplied` (its namespace, capabilities,
    clearances, residency, model): the listing itself says nothing about any agent. `contracts`
    asks for draft contracts, whose ids are `<server>.<tool>`. `tool_server` says how the server
    is reached (`{"name", "transport", "url" | "command"}`); each bound agent's declaration lists it
    under `tool_servers` (a member A3 §3 keeps as matched), so a bound record says where the
    agent's tools are. A declaration of `fleet` that a fleet would refuse (invalid, or its name held
    by another namespace) is a SchemaError naming its source and place: it passes through, so it is
    never dropped.
    """
    supplied = (supplied or Supplied()).check()
    if contracts and (server is None or not is_domain(server)):
        raise SchemaError([Problem("$.server", "a server name to prefix contract ids with, such as "
                                               "github (lowercase, dot-separated)", describe(server))],
                          "supplied")
    report = report or ImportReport("mcp")
    out = DeclarationSet(report)
    refused: list[SchemaError] = []
    for doc in fleet:
        report.read(doc.source)
        try:
            out.keep(doc.value, doc.source, doc.path)
        except SchemaError as exc:
            refused.append(exc)
    if refused:
        raise _every_problem(refused)
    tools = _read_tools(documents, report)
    result = ImportResult([], report, usable=bool(tools))
    if contracts:
        assert server is not None  # checked above: contracts need a server name
        result.contracts, result.mappings = _drafts(tools, server, report)
    names = [t.name for t in tools]
    targets = [d["agent"]["name"] for d in out.declarations()] if bind is None else list(dict.fromkeys(bind))
    changed = sum(_bind(out, agent, names, supplied, report, tool_server) for agent in targets)
    if len(out) > changed:
        report.count("declarations passed through unchanged", len(out) - changed)
    result.declarations = out.declarations()
    if targets and not changed and not contracts:
        # agents were to be bound and none could be (each refused, and reported): an empty
        # fleet is not what was asked for
        result.usable = False
    return result


def _every_problem(refused: list[SchemaError]) -> SchemaError:
    """One SchemaError of every problem of `refused`: of their source, if they share one."""
    sources = {exc.source for exc in refused}
    if len(sources) == 1:
        return SchemaError([p for exc in refused for p in exc.problems], sources.pop())
    return SchemaError([Problem(f"{exc.source}: {p.path}", p.expected, p.found)
                        for exc in refused for p in exc.problems])


def _read_tools(documents: Iterable[Document], report: ImportReport) -> list[Tool]:
    """Every usable tool of the listings, each name once, in listing order."""
    pages = []
    for doc in documents:
        report.read(doc.source)
        try:
            page, problems = read_page(doc.value, doc.source, doc.path)
        except SchemaError as exc:
            for problem in exc.problems:
                report.skip(doc.source, problem.path, f"expected {problem.expected}, found {problem.found}")
            continue
        for problem in problems:
            report.skip(doc.source, problem.path, f"expected {problem.expected}, found {problem.found}")
        for tool in page.tools:
            for problem in tool.ignored:
                report.note("annotations ignored", doc.source, problem.path,
                            f"expected {problem.expected}, found {problem.found}")
        pages.append(page)
    tools: dict[str, Tool] = {}
    for listing in chain_pages(pages):
        last = listing[-1]
        if last.next_cursor is not None:
            report.note("incomplete listings", last.source, last.path,
                        f"the last page given names nextCursor {last.next_cursor!r}: the server has "
                        f"more tools than the {sum(len(p.tools) for p in listing)} listed here")
        for page in listing:
            for tool in page.tools:
                first = tools.get(tool.name)
                if first is not None:
                    report.skip(tool.source, tool.path, f"tool {tool.name!r} already listed at "
                                                        f"{first.source} {first.path}")
                    continue
                tools[tool.name] = tool
    return list(tools.values())


def _drafts(tools: list[Tool], server: str, report: ImportReport) -> tuple[list[dict], list[dict]]:
    contracts: dict[str, dict[str, Any]] = {}
    mappings = []
    for tool in tools:
        contract = draft_contract(tool, server)
        if contract is None:
            report.skip(tool.source, json_path(tool.path, "name"),
                        f"no contract: tool name {tool.name!r} gives no §2 identifier")
            continue
        if contract["id"] in contracts:
            report.skip(tool.source, json_path(tool.path, "name"),
                        f"no contract: tool name {tool.name!r} gives id {contract['id']!r}, already "
                        f"drafted for another tool")
            continue
        if tool.hints.get("readOnlyHint") is True and tool.hints.get("destructiveHint") is True:
            report.note("contradictory hints", tool.source, json_path(tool.path, "annotations"),
                        f"tool {tool.name!r} says both readOnlyHint and destructiveHint; MCP reads "
                        f"destructiveHint only when readOnlyHint is false, so the draft says read")
        contracts[contract["id"]] = contract
        mappings.append({"tool": tool.name, "satisfies": contract["id"], "transport": "mcp"})
    if contracts:
        report.count("draft contracts (inferred from untrusted annotations)", len(contracts))
    bare = sum(1 for tool in tools if not tool.hints)
    if bare:
        report.count("tools stating no hints (drafted from MCP's defaults: destructive, open world)", bare)
    return list(contracts.values()), mappings


TOOL_SERVERS = "tool_servers"


def _with_server(servers: Any, tool_server: Mapping[str, Any] | None) -> list[Any] | None:
    """The declaration's tool_servers with `tool_server` added once (None when there are none)."""
    current = list(servers) if isinstance(servers, list) else []
    if tool_server is not None and dict(tool_server) not in current:
        current.append(dict(tool_server))
    return current or None


def _bind(out: DeclarationSet, agent: str, names: list[str], supplied: Supplied,
          report: ImportReport, tool_server: Mapping[str, Any] | None = None) -> bool:
    """Add the listed tools to `agent`'s declaration, making it from `supplied` if it is new.
    Returns whether a declaration was bound or made."""
    what = "tools (the caller bound the agent to this server)"
    doc = out.get(agent)
    if doc is not None:
        merged = dict(doc)
        merged["tools"] = list(dict.fromkeys([*(doc.get("tools") or ()), *names]))
        servers = _with_server(doc.get(TOOL_SERVERS), tool_server)
        if servers is not None:
            merged[TOOL_SERVERS] = servers
        out.replace_doc(agent, merged)
        report.count("agents of the fleet bound to the listed tools")
        report.supply(what, agent)
        return True
    if supplied.namespace is None:
        report.skip("supplied", json_path("$.bind", agent),
                    f"agent {agent!r} is not in the fleet given and no namespace was supplied to "
                    f"make it (a tool listing describes no agent)")
        return False
    new: dict[str, Any] = {"v": "1.0", "agent": {"name": agent, "namespace": supplied.namespace},
                           "capabilities": [{"name": n, "version": v} for n, v in supplied.capabilities],
                           "clearances": []}
    given = ["namespace", what]
    missing: list[tuple[str, str]] = []
    if supplied.capabilities:
        given.append("capabilities")
    else:
        missing.append(("capabilities", "a tool listing is not a capability declaration (A3 §8) and "
                                        "none was supplied: the agent declares none"))
    more, absent = supplied.fill(new, agent, ORIGIN)
    new["tools"] = list(names)
    servers = _with_server(None, tool_server)
    if servers is not None:
        new[TOOL_SERVERS] = servers
    return out.offer(new, "supplied", json_path("$.bind", agent), supplied=given + more,
                     missing=missing + absent, detail={"tools": len(names)})
