"""A2A Agent Cards -> declarations (A3 §8): card shapes, skill ids, what the caller supplies."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from a3fast.errors import SchemaError
from a3fast.interop.a2a import card_shape, import_cards, read_card
from a3fast.interop.naming import normalise_identifier
from a3fast.interop.sources import Document, json_documents
from a3fast.interop.supply import Supplied, read_grants
from a3fast.schema import is_identifier, parse_declaration

DATA = Path(__file__).resolve().parents[1] / "data" / "interop" / "cards"

V1 = {"name": "order-analyst", "version": "3.4.1",
      "supportedInterfaces": [{"url": "https://o.example/a2a", "protocolBinding": "JSONRPC",
                               "protocolVersion": "1.0"}],
      "capabilities": {"extendedAgentCard": False},
      "skills": [{"id": "order.investigate", "description": "Finds out what happened"},
                 {"id": "case.summarise"}]}
V03 = {"name": "geo", "protocolVersion": "0.3.0", "url": "https://g.example/a2a",
       "preferredTransport": "GRPC",
       "additionalInterfaces": [{"url": "https://g.example/a2a", "transport": "GRPC"},
                                {"url": "https://g.example/json", "transport": "HTTP+JSON"}],
       "skills": [{"id": "route.plan"}]}
V02 = {"name": "tickets", "url": "http://localhost:10103/", "version": "1.0.0",
       "skills": [{"id": "travel.book"}]}
LEGACY = {"name": "market", "url": "http://m.example", "authentication": {"schemes": ["none"]},
          "skills": [{"id": "market.bid"}]}
PARTIAL = {"name": "basic", "version": "0.0.1", "skills": [{"id": "basic.chat"}]}

FULL = Supplied(namespace="support", capability_version=1)


def run(*cards, supplied=FULL):
    docs = [Document(f"card{i}.json", "$", card) for i, card in enumerate(cards)]
    return import_cards(docs, supplied)


def skipped_reasons(result):
    return [(s.source, s.path, s.reason) for s in result.report.skipped]


# -- card shapes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("card, shape", [(V1, "v1.0"), (V03, "v0.3"), (V02, "v0.2"),
                                         (LEGACY, "legacy"), (PARTIAL, "partial")])
def test_each_card_shape_is_recognised_and_gives_a_valid_declaration(card, shape):
    assert card_shape(card) == shape
    result = run(card)
    assert len(result.declarations) == 1
    decl = parse_declaration(result.declarations[0])
    assert decl.agent.name == card["name"] and decl.agent.namespace == "support"
    assert [c.name for c in decl.capabilities] == [s["id"] for s in card["skills"]]
    assert result.report.to_dict()["agents"][0]["shape"] == shape


def test_v1_endpoints_come_from_supported_interfaces():
    card, problems = read_card(V1)
    assert problems == []
    assert [(i.url, i.binding, i.protocol_version) for i in card.interfaces] == [
        ("https://o.example/a2a", "JSONRPC", "1.0")]
    assert card.protocol_version == "1.0"


def test_v03_main_url_speaks_preferred_transport_and_additional_interfaces_are_kept_once():
    card, _ = read_card(V03)
    assert [(i.url, i.binding) for i in card.interfaces] == [
        ("https://g.example/a2a", "GRPC"), ("https://g.example/json", "HTTP+JSON")]
    without_preference = {k: v for k, v in V03.items() if k != "preferredTransport"}
    card, _ = read_card(without_preference)
    assert card.interfaces[0].binding == "JSONRPC"  # A2A 0.3's default transport


@pytest.mark.parametrize("url", ["https://admin:S3cr3t@o.example/a2a", "file:///etc/passwd",
                                 "javascript:alert(document.domain)", "https://o.example/\x1b[31m\nx"])
def test_rule_an_interface_whose_url_cannot_be_an_endpoint_is_left_out_and_reported(url):
    # every record of a placement carries the agent's endpoint: a password, a local file or a
    # script never becomes one
    good = {"url": "https://o.example/json", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
    v1 = {**V1, "supportedInterfaces": [{**V1["supportedInterfaces"][0], "url": url}, good]}
    v03 = {**V03, "url": "https://g.example/a2a",
           "additionalInterfaces": [{"url": url, "transport": "GRPC"}]}
    result = run(v1, v03, {**V02, "url": url})
    # the card whose one URL is left out still gives its agent, with no endpoint (as a partial card)
    assert [d.get("endpoint", {}).get("url") for d in result.declarations] == [
        "https://o.example/json", "https://g.example/a2a", None]
    skipped = skipped_reasons(result)
    assert [(source, path) for source, path, _ in skipped] == [
        ("card0.json", "$.supportedInterfaces[0].url"), ("card1.json", "$.additionalInterfaces[0].url"),
        ("card2.json", "$.url")]
    text = json.dumps([result.declarations, skipped, result.report.to_dict()])
    assert "S3cr3t" not in text and "\x1b" not in "".join(r for *_, r in skipped)
    assert all(r.startswith("expected an absolute http:// or https:// URL with a host and no user name or "
                            "password, found string ") for *_, r in skipped)
    if "@" in url:
        assert "'https://…@o.example/a2a': it holds a user name or password" in skipped[0][2]


def test_rule_a_card_fetched_with_credentials_names_its_url_without_them():
    result = import_cards([Document("https://o.example/", "$", V02)], Supplied(capability_version=1, derive_namespace=True),
                          fetched={"https://o.example/": "https://bot:S3cr3t@o.example/.well-known/agent-card.json"})
    decl = result.declarations[0]
    assert decl["endpoint"]["card"] == "https://o.example/.well-known/agent-card.json"
    assert "S3cr3t" not in json.dumps([decl, result.report.to_dict()])


def test_partial_card_imports_and_is_noted_as_naming_no_endpoint():
    result = run(PARTIAL)
    assert len(result.declarations) == 1
    notes = [n for n in result.report.notes if n.topic == "no endpoint"]
    assert len(notes) == 1 and "basic" in notes[0].message


@pytest.mark.parametrize("card, field", [
    ({**V1, "capabilities": {"extendedAgentCard": True}}, "capabilities.extendedAgentCard"),
    ({**V03, "supportsAuthenticatedExtendedCard": True}, "supportsAuthenticatedExtendedCard"),
])
def test_card_that_says_an_extended_card_exists_is_marked_possibly_incomplete(card, field):
    result = run(card)
    entry = result.report.to_dict()["agents"][0]
    assert entry["possibly_incomplete"] is True
    notes = [n for n in result.report.notes if n.topic == "possibly incomplete"]
    assert len(notes) == 1 and field in notes[0].message


def test_card_that_denies_an_extended_card_is_not_marked():
    result = run(V1)
    assert result.report.to_dict()["agents"][0]["possibly_incomplete"] is False
    assert not [n for n in result.report.notes if n.topic == "possibly incomplete"]


# -- what is not a card --------------------------------------------------------------------------
@pytest.mark.parametrize("obj, path, expected", [
    ([1], "$", "an A2A Agent Card (a JSON object)"),
    ({"skills": []}, "$.name", "the agent's name"),
    ({"name": "x"}, "$.skills", "an array of skills"),
    ({"name": "x", "skills": {"id": "a.b"}}, "$.skills", "an array of skills"),
    ({"name": "x\ny", "skills": []}, "$.name", "no control characters"),
    ({"tools": []}, "$", "an A2A Agent Card"),
])
def test_what_is_not_a_card_is_rejected_at_its_path(obj, path, expected):
    with pytest.raises(SchemaError) as err:
        read_card(obj, "f.json")
    assert any(p.path == path and expected in p.expected for p in err.value.problems), err.value
    assert err.value.source == "f.json"


def test_skills_without_ids_are_skipped_at_their_path_and_the_rest_imported():
    card = {"name": "x", "url": "https://x.example/", "skills": [{"id": "a.b"}, {"name": "no id"}, "text", {"id": ""}]}
    result = run(card)
    assert [c["name"] for c in result.declarations[0]["capabilities"]] == ["a.b"]
    paths = [path for _, path, _ in skipped_reasons(result)]
    assert paths == ["$.skills[1].id", "$.skills[2]", "$.skills[3].id"]


# -- skill ids and the §2 grammar ----------------------------------------------------------------
def test_skill_id_outside_the_grammar_is_reported_without_a_suggestion_by_default():
    result = run({**V02, "skills": [{"id": "book_air_tickets"}, {"id": "travel.book"}]})
    assert [c["name"] for c in result.declarations[0]["capabilities"]] == ["travel.book"]
    [(source, path, reason)] = skipped_reasons(result)
    assert path == "$.skills[0].id" and "book_air_tickets" in reason and "§2" in reason
    assert "normalised to" not in reason and "travel." not in reason


def test_normalisation_when_asked_uses_the_suggested_id_and_reports_it():
    supplied = Supplied(namespace="t", capability_version=1, normalise=True, skill_domain="travel")
    result = run({**V02, "skills": [{"id": "book_air_tickets"}, {"id": "travel.book"}]}, supplied=supplied)
    names = [c["name"] for c in result.declarations[0]["capabilities"]]
    assert names == ["travel.book-air-tickets", "travel.book"]  # a conforming id is left alone
    [note] = [n for n in result.report.notes if n.topic == "skill ids normalised"]
    assert note.path == "$.skills[0].id" and "'travel.book-air-tickets'" in note.message


def test_single_segment_id_cannot_be_normalised_without_a_domain():
    supplied = Supplied(namespace="t", capability_version=1, normalise=True)
    result = run({**V02, "skills": [{"id": "basic"}, {"id": "Travel.Book_Tickets"}]}, supplied=supplied)
    assert [c["name"] for c in result.declarations[0]["capabilities"]] == ["travel.book-tickets"]
    [(_, path, reason)] = skipped_reasons(result)
    assert path == "$.skills[0].id" and "no domain" in reason


def test_two_skills_normalising_to_one_capability_keep_the_first():
    supplied = Supplied(namespace="t", capability_version=1, normalise=True, skill_domain="x")
    result = run({**V02, "skills": [{"id": "book_tickets"}, {"id": "book-tickets"}]}, supplied=supplied)
    assert [c["name"] for c in result.declarations[0]["capabilities"]] == ["x.book-tickets"]
    [(_, path, reason)] = skipped_reasons(result)
    assert path == "$.skills[1].id" and "already declared" in reason


@pytest.mark.parametrize("text, domain, expected", [
    ("book_air_tickets", "travel", "travel.book-air-tickets"),
    ("bookAirTickets", "travel", "travel.book-air-tickets"),
    ("Currency Conversion", "fx", "fx.currency-conversion"),
    ("café.menü", None, "cafe.menu"),
    ("basic", None, None),
    ("___", "x", None),
    ("route-optimizer.traffic", None, None),  # the first segment may not hold a hyphen (§2)
])
def test_normalise_identifier(text, domain, expected):
    got = normalise_identifier(text, domain)
    assert got == expected
    if got is not None:
        assert is_identifier(got)


# -- what the caller supplies, and what is reported missing --------------------------------------
def test_a_card_version_is_never_a_capability_version():
    result = run(V02, supplied=Supplied(namespace="t"))
    assert result.declarations[0]["capabilities"] == []
    why, agents = result.report.not_derived["capability version"]
    assert agents == ["tickets"] and "'1.0.0' is the agent's own release" in why


def test_per_skill_versions_override_the_default():
    supplied = Supplied(namespace="t", capability_version=1, skill_versions={"case.summarise": 3})
    caps = run(V1, supplied=supplied).declarations[0]["capabilities"]
    assert [(c["name"], c["version"]) for c in caps] == [("order.investigate", 1), ("case.summarise", 3)]


def test_without_a_namespace_the_card_is_skipped_and_nothing_is_usable():
    result = run(V1, supplied=Supplied(capability_version=1))
    assert result.declarations == [] and not result.usable
    [(_, path, reason)] = skipped_reasons(result)
    assert path == "$" and "no namespace" in reason


def test_clearances_come_only_from_the_caller_and_are_reported():
    card = {**V1, "securitySchemes": {"oauth": {}}, "security": [{"oauth": ["orders.read"]}]}
    result = run(card)
    assert result.declarations[0]["clearances"] == []  # a card's OAuth scopes are not grants (§8)
    assert result.report.not_derived["clearances"][1] == ["order-analyst"]

    supplied = Supplied(namespace="s", capability_version=1, clearances=("audit.read",),
                        grants={"order-analyst": ("orders.read", "audit.read")})
    result = run(card, supplied=supplied)
    assert result.declarations[0]["clearances"] == ["audit.read", "orders.read"]
    assert "clearances" not in result.report.not_derived
    assert result.report.supplied["clearances (grants file)"] == ["order-analyst"]


def test_residency_and_model_are_supplied_or_reported_absent():
    result = run(V1)
    assert "residency" not in result.declarations[0] and "model" not in result.declarations[0]
    assert set(result.report.not_derived) >= {"residency", "model"}
    supplied = Supplied(namespace="s", capability_version=1, residency=("eu",),
                        latency_class="interactive", cost_ceiling_usd="0.75")
    decl = run(V1, supplied=supplied).declarations[0]
    assert decl["residency"] == ["eu"]
    assert decl["model"] == {"latency_class": "interactive", "cost_ceiling_usd": "0.75"}


def test_unused_grants_and_skill_versions_are_noted():
    supplied = Supplied(namespace="s", capability_version=1, grants={"nobody": ("a.b",)},
                        skill_versions={"no.such-skill": 2})
    result = run(V1, supplied=supplied)
    unused = [n.path for n in result.report.notes if n.topic == "unused"]
    assert unused == ["$.grants.nobody", "$.skill_versions['no.such-skill']"]


@pytest.mark.parametrize("supplied, path", [
    (Supplied(namespace=""), "$.namespace"),
    (Supplied(capability_version=-1), "$.capability_version"),
    (Supplied(capability_version=True), "$.capability_version"),
    (Supplied(clearances=("Orders.Read",)), "$.clearances[0]"),
    (Supplied(residency=("eu", "")), "$.residency[1]"),
    (Supplied(latency_class="fast"), "$.latency_class"),
    (Supplied(cost_ceiling_usd="1,5"), "$.cost_ceiling_usd"),
    (Supplied(skill_domain="-x"), "$.skill_domain"),
])
def test_bad_supplied_values_are_refused_before_anything_is_read(supplied, path):
    with pytest.raises(SchemaError) as err:
        run(V1, supplied=supplied)
    assert [p.path for p in err.value.problems] == [path]


def test_grants_file_is_checked_entry_by_entry():
    assert read_grants({"a": ["x.y", "x.y"]}, "g.json") == {"a": ("x.y",)}
    with pytest.raises(SchemaError) as err:
        read_grants({"a": ["x.y", "Bad"], "b": "x.y", "": []}, "g.json")
    assert [p.path for p in err.value.problems] == ["$.a[1]", "$.b", "$['']"]
    with pytest.raises(SchemaError):
        read_grants(["x.y"], "g.json")


# -- several cards -------------------------------------------------------------------------------
def test_a_later_card_for_the_same_agent_replaces_the_earlier_one():
    newer = copy.deepcopy(V1)
    newer["skills"].append({"id": "order.refund"})
    result = run(V1, newer)
    assert len(result.declarations) == 1
    assert [c["name"] for c in result.declarations[0]["capabilities"]][-1] == "order.refund"
    [note] = [n for n in result.report.notes if n.topic == "replaced"]
    assert note.source == "card1.json" and "card0.json" in note.message


def test_files_with_arrays_and_json_lines_of_cards():
    docs = json_documents((DATA / "cards_array.json").read_bytes(), "cards_array.json")
    assert [d.path for d in docs] == ["$[0]", "$[1]", "$[2]"]
    result = import_cards(docs, FULL)
    assert [d["agent"]["name"] for d in result.declarations] == ["refunder", "summariser"]
    reasons = skipped_reasons(result)
    assert reasons[0][:2] == ("cards_array.json", "$[1].skills")
    assert [r[1] for r in reasons[1:]] == ["$[2].skills[1].id", "$[2].skills[2].id"]

    docs = json_documents((DATA / "cards.jsonl").read_bytes(), "cards.jsonl")
    assert [d.path for d in docs] == ["line 1: $", "line 3: $"]
    assert len(import_cards(docs, FULL).declarations) == 2


def test_truncated_json_is_an_error_naming_the_file():
    with pytest.raises(SchemaError) as err:
        json_documents((DATA / "truncated.json").read_bytes(), "truncated.json")
    assert err.value.source == "truncated.json" and err.value.problems[0].expected == "valid JSON"


def test_every_declaration_made_parses():
    cards = [V1, V03, V02, LEGACY, PARTIAL, {"name": "weird \u00e9", "url": "https://w.example/", "skills": []}]
    result = run(*cards)
    assert len(result.declarations) == len(cards)
    for decl in result.declarations:
        parse_declaration(decl)


# -- the report ----------------------------------------------------------------------------------
def test_the_short_report_stays_short_and_the_full_report_keeps_everything():
    cards = [{"name": f"agent-{i}", "url": "https://a.example/", "skills": [{"id": f"Skill {i}"}]} for i in range(2000)]
    result = run(*cards)
    assert result.report.made == 2000
    text = result.report.lines()
    assert len(text) < 40
    assert text[0] == "import a2a: 2000 agents made from 2000 files, 2000 items skipped"
    assert any("… and 1980 more" in line for line in text)
    assert "namespace — 2000 agents: agent-0, agent-1, agent-2, +1997 more" in "\n".join(text)
    full = result.report.to_dict()
    assert len(full["skipped"]) == 2000 and len(full["agents"]) == 2000
    assert full["supplied"]["namespace"][-1] == "agent-1999"


def test_a_broken_pretty_printed_card_is_one_error_not_one_per_line():
    data = json.dumps(V1, indent=2).encode()[:-3]
    with pytest.raises(SchemaError) as err:
        json_documents(data, "broken.json")
    assert len(err.value.problems) == 1 and err.value.problems[0].path == "$"


def test_a_skill_description_that_is_not_text_is_reported_and_the_skill_kept():
    card, problems = read_card({**V1, "skills": [{"id": "order.investigate", "description": 3}]})
    assert [p.path for p in problems] == ["$.skills[0].description"]
    assert [s.description for s in card.skills] == [None]


def test_additional_interfaces_that_are_not_an_array_are_reported():
    card, problems = read_card({**V03, "additionalInterfaces": "https://x"})
    assert [p.path for p in problems] == ["$.additionalInterfaces"]
    assert len(card.interfaces) == 1
