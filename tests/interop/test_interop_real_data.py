"""Every public Agent Card and MCP tool listing in shared/data imports or is rejected with a precise
reason, and a fleet built from them places a task end to end."""
from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

import a3fast
from a3fast.authority import parse_contracts, parse_mappings
from a3fast.interop.a2a import import_cards
from a3fast.interop.mcp import import_listings
from a3fast.interop.sources import Document, json_document, json_documents
from a3fast.interop.supply import Supplied
from a3fast.predicates import satisfies
from a3fast.schema import parse_declaration, parse_requirements


def _shared_data() -> Path | None:
    """The copies the repository ships (examples/interop/public), else `../shared/data` beside the
    repository, else `$A3FAST_SHARED` (the shared dir or its data/)."""
    repo = Path(__file__).resolve().parents[2]
    candidates = [repo / "examples" / "interop" / "public", repo.parent / "shared" / "data"]
    if os.environ.get("A3FAST_SHARED"):
        root = Path(os.environ["A3FAST_SHARED"])
        candidates += [root / "data", root]
    for candidate in candidates:
        if (candidate / "agent-cards").is_dir() and (candidate / "mcp-tools").is_dir():
            return candidate
    return None


SHARED = _shared_data()
pytestmark = pytest.mark.skipif(SHARED is None, reason="shared/data (public Agent Cards and MCP tool "
                                                       "listings) not found beside the repository "
                                                       "or at $A3FAST_SHARED")
CARDS = sorted((SHARED / "agent-cards").glob("*.json")) if SHARED else []
LISTINGS = sorted((SHARED / "mcp-tools").glob("*.json")) if SHARED else []
SUPPLIED = Supplied(namespace="demo", capability_version=1, normalise=True, skill_domain="demo")

#: What PROVENANCE.md says each file is (card shape; listing shape and tool count).
CARD_SHAPES = {
    "a2a-samples-pr482__oixa_protocol_marketplace.json": "legacy",
    "a2a-samples__a2a_mcp__air_ticketing_agent.json": "v0.2",
    "a2a-samples__adk_currency_agent.json": "v0.3",
    "a2a-samples__adk_skills_agent.json": "v1.0",
    "a2a-spec__v0.3.0_sample_georoute.json": "v0.3",
    "a2a-spec__v1_sample_georoute.json": "v1.0",
    "kagent__adk_basic.json": "partial",
}
LISTING_SHAPES = {
    "docker-mcp-registry__okta-mcp-server__tools.json": ("array", 108),
    "github-mcp-server__tools_list.json": ("result", 117),
    "mcp-servers__filesystem__tools_transcribed.json": ("result", 14),
    "mcp-spec__2026-07-28__list-tools-result-response.json": ("jsonrpc", 1),
}


def card_docs(paths=CARDS):
    return [doc for path in paths for doc in json_documents(path.read_bytes(), path.name)]


def raw(path: Path):
    return orjson.loads(path.read_bytes())


def test_the_shared_data_holds_the_files_its_provenance_lists():
    assert {p.name for p in CARDS} >= set(CARD_SHAPES)
    assert {p.name for p in LISTINGS} >= set(LISTING_SHAPES)


# -- each card -----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", CARDS, ids=lambda p: p.name)
def test_each_card_imports_or_is_rejected_with_a_precise_reason(path):
    result = import_cards(card_docs([path]), SUPPLIED)
    for skip in result.report.skipped:
        assert skip.source == path.name and skip.path.startswith("$") and skip.reason
    if not result.declarations:
        assert result.report.skipped, "a card that gives nothing must say why"
        return
    [decl] = result.declarations
    parse_declaration(decl)
    card = raw(path)
    assert decl["agent"] == {"name": card["name"], "namespace": "demo"}
    kept = len(decl["capabilities"]) + sum(1 for s in result.report.skipped if ".skills[" in s.path)
    assert kept == len(card["skills"])  # every skill became a capability or was reported
    if path.name in CARD_SHAPES:
        assert result.report.to_dict()["agents"][0]["shape"] == CARD_SHAPES[path.name]


def test_real_skill_ids_do_not_fit_section_2_and_are_reported_without_normalisation():
    result = import_cards(card_docs(), Supplied(namespace="demo", capability_version=1))
    assert all(decl["capabilities"] == [] for decl in result.declarations)
    reported = {(s.source, s.path) for s in result.report.skipped}
    for path in CARDS:
        for i, skill in enumerate(raw(path)["skills"]):
            assert (path.name, f"$.skills[{i}].id") in reported, skill["id"]
    assert all("normalised to" not in s.reason for s in result.report.skipped)


def test_real_cards_that_announce_an_extended_card_are_marked_possibly_incomplete():
    result = import_cards(card_docs(), SUPPLIED)
    flagged = {n.source for n in result.report.notes if n.topic == "possibly incomplete"}
    expected = {p.name for p in CARDS
                if raw(p).get("supportsAuthenticatedExtendedCard") is True
                or (raw(p).get("capabilities") or {}).get("extendedAgentCard") is True}
    assert flagged == expected and "a2a-spec__v1_sample_georoute.json" in flagged
    assert "a2a-samples__adk_skills_agent.json" not in flagged  # it says extendedAgentCard: false


def test_one_agent_published_in_two_card_versions_is_one_declaration():
    result = import_cards(card_docs(), SUPPLIED)
    names = [d["agent"]["name"] for d in result.declarations]
    assert len(names) == len(set(names)) == len({raw(p)["name"] for p in CARDS})
    replaced = {n.source for n in result.report.notes if n.topic == "replaced"}
    assert "a2a-spec__v1_sample_georoute.json" in replaced


# -- each listing --------------------------------------------------------------------------------
@pytest.mark.parametrize("path", LISTINGS, ids=lambda p: p.name)
def test_each_listing_imports_or_is_rejected_with_a_precise_reason(path):
    result = import_listings([json_document(path.read_bytes(), path.name)], Supplied(namespace="demo"),
                             bind=["bound"], server="srv", contracts=True)
    for skip in result.report.skipped:
        assert skip.source == path.name and skip.path.startswith("$") and skip.reason
    if not result.usable:
        assert result.report.skipped
        return
    [decl] = result.declarations
    assert parse_declaration(decl).capabilities == ()  # a listing is not a capability declaration
    parse_contracts(result.contracts)
    parse_mappings(result.mappings)
    if path.name in LISTING_SHAPES:
        shape, count = LISTING_SHAPES[path.name]
        assert len(decl["tools"]) == count
        obj = raw(path)
        tools = {"array": lambda: obj, "result": lambda: obj["tools"],
                 "jsonrpc": lambda: obj["result"]["tools"]}[shape]()
        assert decl["tools"] == [t["name"] for t in tools]


def test_the_spec_example_page_is_reported_as_an_incomplete_listing():
    path = SHARED / "mcp-tools" / "mcp-spec__2026-07-28__list-tools-result-response.json"
    result = import_listings([json_document(path.read_bytes(), path.name)], Supplied(namespace="d"), bind=["a"])
    [note] = [n for n in result.report.notes if n.topic == "incomplete listings"]
    assert "'next-page-cursor'" in note.message


def test_github_drafts_follow_the_stated_hints():
    path = SHARED / "mcp-tools" / "github-mcp-server__tools_list.json"
    result = import_listings([json_document(path.read_bytes(), path.name)], server="github", contracts=True)
    by_id = {c["id"]: c for c in result.contracts}
    assert len(by_id) == 117
    assert by_id["github.get-me"]["operation"] == "read"
    assert by_id["github.create-issue"]["operation"] == "create"  # destructiveHint: false
    assert (by_id["github.delete-repository"]["operation"], by_id["github.delete-repository"]["effects"]) \
        == ("delete", ["changes_state", "destructive", "open_world"])
    # No destructiveHint stated: MCP's default (true) applies, and the draft says it was defaulted.
    comment = by_id["github.add-issue-comment"]
    assert comment["operation"] == "modify" and "destructiveHint" in comment["defaulted"]


def test_okta_tools_state_no_hints_so_every_draft_carries_the_defaults():
    path = SHARED / "mcp-tools" / "docker-mcp-registry__okta-mcp-server__tools.json"
    result = import_listings([json_document(path.read_bytes(), path.name)], server="okta", contracts=True)
    assert all(c["defaulted"] == ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]
               for c in result.contracts)
    assert {c["operation"] for c in result.contracts} == {"modify", "delete"}


# -- a fleet from the real files places a task ---------------------------------------------------
def real_fleet() -> list[dict]:
    supplied = Supplied(namespace="demo", capability_version=1, normalise=True, skill_domain="demo",
                        grants={"basic": ("repos.read", "repos.write")})
    cards = import_cards(card_docs(), supplied)
    fleet = [Document("fleet", f"$[{i}]", d) for i, d in enumerate(cards.declarations)]
    github = SHARED / "mcp-tools" / "github-mcp-server__tools_list.json"
    bound = import_listings([json_document(github.read_bytes(), github.name)], fleet=fleet, bind=["basic"])
    return bound.declarations


TASK = {"v": "1.0", "capabilities": [{"name": "demo.basic", "version": 1}],
        "clearances": ["repos.write"], "tools": ["create_pull_request"]}
UNSCHEDULABLE = {"v": "1.0", "capabilities": [{"name": "demo.currency-conversion", "version": 1}],
                 "tools": ["create_pull_request"]}


def test_the_literal_section_5_reading_finds_exactly_one_eligible_agent():
    declarations = [parse_declaration(d) for d in real_fleet()]
    predicates = parse_requirements(TASK).predicates
    eligible = [d.agent.name for d in declarations if all(satisfies(d, p) for p in predicates)]
    assert eligible == ["basic"]


def test_a_fleet_built_from_real_data_places_a_task():
    fleet = a3fast.Fleet()
    for decl in real_fleet():
        fleet.add(decl)
    placement = fleet.place(TASK)
    assert placement.bound and placement.agent == "basic"
    scheduling = placement.scheduling
    assert scheduling["filters_passed"] == ["capability:demo.basic/1", "clearance:repos.write",
                                            "tool:create_pull_request"]
    assert {f["predicate"] for f in scheduling["filters_failed"]} == {"capability:demo.basic/1"}

    rejected = fleet.place(UNSCHEDULABLE)
    assert not rejected.bound
    failed = {f["candidate"]: f["predicate"] for f in rejected.rejection["filters_failed"]}
    assert failed["Currency Conversion Agent"] == "tool:create_pull_request"
