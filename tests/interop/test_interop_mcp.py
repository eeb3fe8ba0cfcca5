"""MCP tool listings -> tool bindings (A3 §3 `tools`, §8), and draft contracts from annotations."""
from __future__ import annotations

from pathlib import Path

import pytest

from a3fast.authority import parse_contracts, parse_mappings
from a3fast.errors import SchemaError
from a3fast.interop.mcp import (DELETE_WORDS, HINT_DEFAULTS, INFERRED_FROM, Tool, chain_pages, draft_contract,
                                effective_hints, import_listings, read_page)
from a3fast.interop.sources import Document, json_document
from a3fast.interop.supply import Supplied
from a3fast.schema import parse_declaration

DATA = Path(__file__).resolve().parents[1] / "data" / "interop" / "listings"

TOOLS = [{"name": "orders_lookup", "inputSchema": {"type": "object"}},
         {"name": "orders_cancel", "inputSchema": {"type": "object"}}]
DECL = {"v": "1.0", "agent": {"name": "order-analyst", "namespace": "support"},
        "capabilities": [{"name": "order.investigate", "version": 2}], "clearances": ["orders.read"],
        "tools": ["mail_send"]}
OTHER = {"v": "1.0", "agent": {"name": "summariser", "namespace": "support"},
         "capabilities": [{"name": "case.summarise", "version": 1}], "clearances": []}


def listing(obj, source="listing.json"):
    return Document(source, "$", obj)


def fleet(*decls):
    return [Document("fleet.jsonl", f"line {i + 1}: $", d) for i, d in enumerate(decls)]


def tool(name="t", **hints):
    return Tool(name, "l.json", "$[0]", hints)


# -- listing shapes ------------------------------------------------------------------------------
@pytest.mark.parametrize("obj, shape, tools_path", [
    (TOOLS, "array", "$[1]"),
    ({"tools": TOOLS}, "result", "$.tools[1]"),
    ({"jsonrpc": "2.0", "id": 1, "result": {"tools": TOOLS}}, "jsonrpc", "$.result.tools[1]"),
])
def test_each_listing_shape_is_read(obj, shape, tools_path):
    page, problems = read_page(obj, "l.json")
    assert problems == [] and page.shape == shape
    assert [t.name for t in page.tools] == ["orders_lookup", "orders_cancel"]
    assert page.tools[1].path == tools_path


@pytest.mark.parametrize("obj, path, found", [
    ({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "Method not found"}},
     "$.error", "a JSON-RPC error response (code -32601"),
    ({"jsonrpc": "2.0", "id": 1, "result": {}}, "$.result.tools", "nothing"),
    ({"jsonrpc": "2.0", "id": 1}, "$.result", "nothing"),
    ({"tools": {"name": "x"}}, "$.tools", "object with 1 field"),
    ({"name": "x", "skills": []}, "$", "A2A Agent Card"),
    ({"resources": []}, "$.tools", "nothing"),
    ("tools", "$", "string"),
])
def test_what_is_not_a_listing_is_rejected_at_its_path(obj, path, found):
    with pytest.raises(SchemaError) as err:
        read_page(obj, "l.json")
    [problem] = err.value.problems
    assert problem.path == path and found in problem.found and err.value.source == "l.json"


def test_tools_without_a_usable_name_are_skipped_and_the_rest_kept():
    page, problems = read_page([{"name": "ok"}, {"description": "no name"}, 7, {"name": "a\tb"}], "l.json")
    assert [t.name for t in page.tools] == ["ok"]
    assert [p.path for p in problems] == ["$[1].name", "$[2]", "$[3].name"]


def test_tool_names_are_kept_verbatim_and_never_become_capabilities():
    odd = [{"name": "GitHub:create/issue"}, {"name": "orders_lookup"}]
    result = import_listings([listing(odd)], fleet=fleet(DECL), bind=["order-analyst"])
    decl = result.declarations[0]
    assert decl["tools"] == ["mail_send", "GitHub:create/issue", "orders_lookup"]
    assert decl["capabilities"] == DECL["capabilities"]  # unchanged: a listing declares no capability


# -- pages ---------------------------------------------------------------------------------------
def test_pages_follow_next_cursor_and_a_tool_listed_twice_counts_once():
    docs = [json_document((DATA / name).read_bytes(), name) for name in ("page1.json", "page2.json")]
    result = import_listings(docs, Supplied(namespace="n"), bind=["a"])
    assert result.declarations[0]["tools"] == ["orders_lookup", "orders_delete", "orders_note",
                                               "orders_refresh"]
    skipped = {(s.source, s.path): s.reason for s in result.report.skipped}
    assert "already listed at page1.json $.result.tools[0]" in skipped[("page2.json", "$.result.tools[1]")]
    assert ("page2.json", "$.result.tools[2].name") in skipped
    assert not [n for n in result.report.notes if n.topic == "incomplete listings"]


def test_a_last_page_that_names_a_next_cursor_is_reported_incomplete():
    doc = json_document((DATA / "page1.json").read_bytes(), "page1.json")
    result = import_listings([doc], Supplied(namespace="n"), bind=["a"])
    [note] = [n for n in result.report.notes if n.topic == "incomplete listings"]
    assert note.source == "page1.json" and "'page-2'" in note.message


def test_chain_pages_starts_a_new_listing_after_a_page_without_cursor():
    a, _ = read_page({"tools": [], "nextCursor": "c"}, "a")
    b, _ = read_page({"tools": []}, "b")
    c, _ = read_page({"tools": []}, "c")
    assert [[p.source for p in group] for group in chain_pages([a, b, c])] == [["a", "b"], ["c"]]


def test_jsonrpc_error_response_is_skipped_with_its_code():
    doc = json_document((DATA / "rpc_error.json").read_bytes(), "rpc_error.json")
    result = import_listings([doc], Supplied(namespace="n"), bind=["a"])
    assert not result.usable
    [skip] = result.report.skipped
    assert skip.path == "$.error" and "-32601" in skip.reason


# -- binding -------------------------------------------------------------------------------------
def test_binding_adds_tools_only_to_the_named_agents_and_passes_the_rest_through():
    result = import_listings([listing({"tools": TOOLS})], fleet=fleet(DECL, OTHER), bind=["summariser"])
    by_name = {d["agent"]["name"]: d for d in result.declarations}
    assert by_name["summariser"]["tools"] == ["orders_lookup", "orders_cancel"]
    assert by_name["order-analyst"] == DECL
    assert result.report.counts["declarations passed through unchanged"] == 1
    assert result.report.supplied["tools (the caller bound the agent to this server)"] == ["summariser"]


def test_bind_all_binds_every_agent_of_the_fleet():
    result = import_listings([listing(TOOLS)], fleet=fleet(DECL, OTHER), bind=None)
    assert all("orders_cancel" in d["tools"] for d in result.declarations)


def test_an_agent_not_in_the_fleet_is_made_from_what_the_caller_supplied():
    supplied = Supplied(namespace="ops", capabilities=(("order.triage", 1),), clearances=("orders.read",))
    result = import_listings([listing(TOOLS)], supplied, bind=["triager"])
    [decl] = result.declarations
    assert parse_declaration(decl).tools == ("orders_lookup", "orders_cancel")
    assert decl["capabilities"] == [{"name": "order.triage", "version": 1}]
    assert decl["clearances"] == ["orders.read"]
    assert result.report.made == 1

    result = import_listings([listing(TOOLS)], Supplied(namespace="ops"), bind=["triager"])
    why, agents = result.report.not_derived["capabilities"]
    assert agents == ["triager"] and "not a capability declaration" in why


def test_an_agent_not_in_the_fleet_without_a_namespace_is_skipped():
    result = import_listings([listing(TOOLS)], fleet=fleet(DECL), bind=["ghost"])
    [skip] = result.report.skipped
    assert skip.path == "$.bind.ghost" and "no namespace" in skip.reason
    assert result.declarations == [DECL]


def test_an_invalid_declaration_in_the_fleet_is_refused_never_dropped():
    # the fleet passes through: leaving a declaration out would lose the agent from a fleet written back
    bad = {**OTHER, "clearances": ["Not An Id"]}
    with pytest.raises(SchemaError) as refused:
        import_listings([listing(TOOLS)], fleet=fleet(DECL, bad), bind=None)
    assert [p.path for p in refused.value.problems] == ["line 2: $.clearances[0]"]


def test_nothing_usable_when_no_listing_gives_a_tool():
    result = import_listings([listing({"error": {"code": 1}, "jsonrpc": "2.0"})], fleet=fleet(DECL), bind=None)
    assert not result.usable


# -- draft contracts -----------------------------------------------------------------------------
def test_mcp_defaults_apply_when_hints_are_absent():
    hints, defaulted = effective_hints(tool())
    assert hints == HINT_DEFAULTS and defaulted == list(HINT_DEFAULTS)


def test_destructive_and_idempotent_hints_are_ignored_for_a_read_only_tool():
    hints, defaulted = effective_hints(tool(readOnlyHint=True, destructiveHint=True))
    assert hints == {"readOnlyHint": True, "openWorldHint": True} and defaulted == ["openWorldHint"]


@pytest.mark.parametrize("name, hints, operation, effects, confirmation", [
    ("get_me", {"readOnlyHint": True}, "read", ["open_world"], "policy_driven"),
    ("read_file", {"readOnlyHint": True, "openWorldHint": False}, "read", [], "policy_driven"),
    ("create_issue", {"readOnlyHint": False, "destructiveHint": False}, "create",
     ["changes_state", "open_world"], "policy_driven"),
    ("write_file", {"destructiveHint": True, "openWorldHint": False}, "modify",
     ["changes_state", "destructive"], "always"),
    ("delete_file", {"destructiveHint": True}, "delete",
     ["changes_state", "destructive", "open_world"], "always"),
    ("removeUserFromGroup", {}, "delete", ["changes_state", "destructive", "open_world"], "always"),
    ("add_issue_comment", {"readOnlyHint": False}, "modify",
     ["changes_state", "destructive", "open_world"], "always"),  # destructiveHint defaults to true
])
def test_draft_contract_reads_the_hints(name, hints, operation, effects, confirmation):
    contract = draft_contract(tool(name, **hints), "github")
    assert (contract["operation"], contract["effects"], contract["confirmation"]) == (
        operation, effects, confirmation)
    assert contract["inferred_from"] == INFERRED_FROM and contract["trusted"] is False
    assert contract["resource"] == "github" and contract["data_classes"] == []
    assert set(contract["defaulted"]) == set(contract["hints"]) - set(hints)


@pytest.mark.parametrize("name", ["ｄｅｌｅｔｅ_record", "Délete_user", "ＲＥＭＯＶＥ_Item", "pürge"])
def test_a_destructive_tool_whose_id_says_delete_is_drafted_as_a_delete(name):
    # the id folds accents and compatibility forms to ASCII; the words that chose the operation
    # were read from the name as given, so `files.delete-record` was drafted as a modify, out of
    # reach of a policy that denies deletes
    contract = draft_contract(tool(name, destructiveHint=True), "files")
    assert contract["operation"] == "delete", contract["id"]
    assert set(contract["id"].split(".")[-1].split("-")) & DELETE_WORDS


def test_draft_ids_are_section_2_identifiers_under_the_server_domain():
    assert draft_contract(tool("get_me"), "github")["id"] == "github.get-me"
    assert draft_contract(tool("___"), "github") is None
    with pytest.raises(ValueError):
        draft_contract(tool("get_me"), "Git Hub")


def test_drafts_and_mappings_parse_as_portable_authority_documents():
    tools = [{"name": "orders_lookup", "annotations": {"readOnlyHint": True}},
             {"name": "orders_cancel", "annotations": {"destructiveHint": True}},
             {"name": "orders-lookup"}]  # same id as orders_lookup: skipped, not drafted twice
    result = import_listings([listing(tools)], server="shop", contracts=True)
    contracts = parse_contracts(result.contracts)
    mappings = parse_mappings(result.mappings)
    assert [c.id for c in contracts] == ["shop.orders-lookup", "shop.orders-cancel"]
    # A contract that states no version is major version 1; the resolver keys it so.
    assert [(m.tool, m.satisfies, m.transport) for m in mappings] == [
        ("orders_lookup", "shop.orders-lookup/1", "mcp"), ("orders_cancel", "shop.orders-cancel/1", "mcp")]
    assert [c.key for c in contracts] == ["shop.orders-lookup/1", "shop.orders-cancel/1"]
    assert "already drafted" in result.report.skipped[0].reason
    assert result.declarations == []  # no agent was bound


def test_contracts_need_a_server_name():
    with pytest.raises(SchemaError) as err:
        import_listings([listing(TOOLS)], contracts=True)
    assert err.value.problems[0].path == "$.server"


def test_a_hint_that_is_not_a_boolean_is_noted_and_the_default_used():
    page, problems = read_page([{"name": "x", "annotations": {"readOnlyHint": "yes"}}], "l.json")
    assert problems == []
    [ignored] = page.tools[0].ignored
    assert ignored.path == "$[0].annotations.readOnlyHint"
    assert draft_contract(page.tools[0], "s")["operation"] == "modify"


def test_contradictory_hints_are_noted():
    tools = [{"name": "x", "annotations": {"readOnlyHint": True, "destructiveHint": True}}]
    result = import_listings([listing(tools)], server="s", contracts=True)
    assert result.contracts[0]["operation"] == "read"
    assert [n.topic for n in result.report.notes] == ["contradictory hints"]


def test_a_failed_servers_last_words_are_read_from_the_end_of_its_standard_error():
    # a server may write gigabytes to standard error before it stops: its last lines are quoted
    # without reading the rest into memory
    import tempfile
    import tracemalloc

    from a3fast.interop.mcp_live import _tail

    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        chunk = "noise " * 1000 + "\n"
        for _ in range(8000):       # about 48 MB
            errlog.write(chunk)
        errlog.write("fatal: the token is wrong\n")
        tracemalloc.start()
        try:
            quoted = _tail(errlog)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert quoted.endswith("fatal: the token is wrong)")
    assert peak < 1 << 20, peak
