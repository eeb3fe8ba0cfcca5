"""Portable-authority documents: what parses, what is refused, and where the problem is named."""
import copy

import pytest
from hypothesis import given, strategies as st

from a3fast import SchemaError
from a3fast.errors import describe
from a3fast.authority import (generate_private_key, parse_capability_ref, parse_connection, parse_contract,
                              parse_contracts, parse_engagement, parse_mapping, parse_mappings, parse_policy,
                              parse_skill, parse_skills, public_key_text)
from a3fast.authority.keys import b64url_decode, b64url_encode, load_public_key
from a3fast.authority.times import format_instant, parse_instant, to_micros

#: The contract of portable-authority's "Resolution" section, verbatim.
SPEC_CONTRACT = {"id": "game.move.submit", "operation": "execute", "resource": "current_match",
                 "effects": ["changes_shared_state"], "confirmation": "policy_driven"}
#: The host mapping of the same section, verbatim.
SPEC_MAPPING = {"tool": "arena_submit_move", "satisfies": "game.move.submit", "transport": "mcp"}
KEY = public_key_text(generate_private_key())
CONNECTION = {"id": "conn-1", "experience": "arena.example", "capabilities": ["game.move.submit"],
              "keys": [{"kid": "k1", "public_key": KEY}]}
ENGAGEMENT = {"experience": "arena.example", "context": "match-1", "connection": "conn-1",
              "capabilities": ["game.move.submit"], "expires": "2026-03-01T14:00:00Z",
              "signature": {"alg": "Ed25519", "kid": "k1", "value": b64url_encode(bytes(64))}}


def problems(fn, doc):
    with pytest.raises(SchemaError) as info:
        fn(doc)
    return [str(p) for p in info.value.problems]


def with_(doc, key, value):
    out = copy.deepcopy(doc)
    if value is ...:
        del out[key]
    else:
        out[key] = value
    return out


# -- capability references and versions (A3 §2) ---------------------------------------------------
def test_a_reference_without_a_version_means_major_version_1():
    assert parse_capability_ref("game.move.submit") == "game.move.submit/1"


def test_a_reference_may_name_a_major_version():
    assert parse_capability_ref("game.move.submit/2") == "game.move.submit/2"


@pytest.mark.parametrize("text", ["Game.move", "game", "game.move/", "game.move/02", "game.move/-1",
                                  "game.move/1.0", "game.move/" + "9" * 5000, 7, None])
def test_a_reference_that_is_not_a_section_2_identifier_is_refused(text):
    assert parse_capability_ref(text) is None


def test_major_versions_above_the_signed_64_bit_range_are_refused():
    assert parse_capability_ref(f"a.b/{2**63 - 1}") == f"a.b/{2**63 - 1}"
    assert parse_capability_ref(f"a.b/{2**63}") is None


# -- capability contracts --------------------------------------------------------------------------
def test_the_spec_contract_parses_with_version_1_and_no_data_classes():
    c = parse_contract(SPEC_CONTRACT)
    assert (c.key, c.operation, c.resource, c.effects, c.data_classes, c.reversible, c.confirmation) == (
        "game.move.submit/1", "execute", "current_match", ("changes_shared_state",), (), None, "policy_driven")


def test_a_contract_with_a_major_version_is_a_different_capability():
    assert parse_contract(with_(SPEC_CONTRACT, "version", 2)).key == "game.move.submit/2"


@pytest.mark.parametrize("field", ["id", "operation", "resource", "confirmation"])
def test_a_contract_requires_its_field(field):
    assert problems(parse_contract, with_(SPEC_CONTRACT, field, ...)) == [
        f"$.{field}: expected the required field {field!r}, found nothing"]


def test_a_contract_operation_comes_from_the_portable_vocabulary():
    assert problems(parse_contract, with_(SPEC_CONTRACT, "operation", "arena_submit_move")) == [
        "$.operation: expected one of read, reveal, create, modify, delete, execute, transact, communicate, "
        "delegate, administer, found string 'arena_submit_move'"]


def test_a_contract_confirmation_is_never_always_or_policy_driven():
    assert problems(parse_contract, with_(SPEC_CONTRACT, "confirmation", "sometimes")) == [
        "$.confirmation: expected one of never, always, policy_driven, found string 'sometimes'"]


def test_a_contract_id_is_a_namespaced_section_2_identifier():
    assert problems(parse_contract, with_(SPEC_CONTRACT, "id", "submit_move")) == [
        "$.id: expected a capability identifier matching [a-z0-9]+(\\.[a-z0-9-]+)+, found string 'submit_move'"]


@pytest.mark.parametrize("value", ["false", 0, "no", 1, {}, []])
def test_a_contract_trusted_is_a_boolean(value):
    # `trusted: false` makes every use need a person's confirmation: a value that is no boolean is
    # refused, not read as trusted (which would let a draft run unattended)
    assert problems(parse_contract, {**SPEC_CONTRACT, "trusted": value}) == [
        f"$.trusted: expected true or false, found {describe(value)}"]


@pytest.mark.parametrize("value", [True, False, None])
def test_a_contract_trusted_may_be_true_false_or_null(value):
    assert parse_contract({**SPEC_CONTRACT, "trusted": value}).doc["trusted"] is value


def test_a_contract_reversible_is_a_boolean_and_qualifiers_are_arrays_of_strings():
    found = problems(parse_contract, {**SPEC_CONTRACT, "reversible": "no", "effects": "x", "data_classes": [1]})
    assert found == ["$.effects: expected an array, found string 'x'",
                     "$.data_classes[0]: expected a data class (a non-empty string), found 1",
                     "$.reversible: expected true or false, found string 'no'"]


def test_every_problem_of_every_contract_is_reported_at_once():
    found = problems(parse_contracts, [with_(SPEC_CONTRACT, "id", ...), 5, with_(SPEC_CONTRACT, "operation", "x")])
    assert [p.split(":")[0] for p in found] == ["$[0].id", "$[1]", "$[2].operation"]


def test_two_contracts_for_one_id_and_major_version_are_refused():
    assert problems(parse_contracts, [SPEC_CONTRACT, SPEC_CONTRACT]) == [
        "$[1]: expected one contract per id and major version, found game.move.submit/1 again (first at $[0])"]
    assert len(parse_contracts([SPEC_CONTRACT, with_(SPEC_CONTRACT, "version", 2)])) == 2


def test_documents_missing_their_id_are_not_reported_as_duplicates_of_each_other():
    for parse, name, what in ((parse_contracts, "id", "contract"), (parse_skills, "id", "skill"),
                              (parse_mappings, "satisfies", "mapping")):
        found = problems(parse, [{}, {}])
        assert not [p for p in found if "again" in p], what
        assert f"$[1].{name}: expected the required field {name!r}, found nothing" in found, what
    found = problems(parse_policy, {"rules": [{"decision": "deny"}, {"decision": "deny"}]})
    assert found == ["$.rules[0].id: expected the required field 'id', found nothing",
                     "$.rules[1].id: expected the required field 'id', found nothing"]


def test_problems_are_rooted_at_the_paths_given_for_json_lines():
    assert problems(lambda d: parse_contracts(d, ["line 3: $"]), [with_(SPEC_CONTRACT, "resource", "")]) == [
        "line 3: $.resource: expected a non-empty string, found string ''"]


# -- host mappings and skills ------------------------------------------------------------------------
def test_the_spec_host_mapping_parses():
    m = parse_mapping(SPEC_MAPPING)
    assert (m.tool, m.satisfies, m.transport) == ("arena_submit_move", "game.move.submit/1", "mcp")


@pytest.mark.parametrize("field", ["tool", "satisfies", "transport"])
def test_a_mapping_requires_its_field(field):
    assert problems(parse_mapping, with_(SPEC_MAPPING, field, ...)) == [
        f"$.{field}: expected the required field {field!r}, found nothing"]


def test_several_mappings_may_satisfy_one_capability_in_order_of_preference():
    mappings = parse_mappings([SPEC_MAPPING, with_(SPEC_MAPPING, "tool", "arena_move_v2")])
    assert [m.tool for m in mappings] == ["arena_submit_move", "arena_move_v2"]


def test_a_skill_lists_required_and_optional_capabilities():
    s = parse_skill({"id": "chess.play", "required": ["game.move.submit"], "optional": ["game.chat.send/2"]})
    assert (s.id, s.required, s.optional) == ("chess.play", ("game.move.submit/1",), ("game.chat.send/2",))


def test_a_skill_without_optional_capabilities_has_none():
    assert parse_skill({"id": "chess.play", "required": []}).optional == ()


def test_a_capability_both_required_and_optional_is_refused():
    assert problems(parse_skill, {"id": "chess.play", "required": ["a.b"], "optional": ["a.b/1"]}) == [
        "$.optional: expected a capability listed once, as required or as optional, found a.b/1 in both"]


def test_two_skills_with_one_id_are_refused():
    skill = {"id": "chess.play", "required": ["a.b"]}
    assert problems(parse_skills, [skill, skill]) == [
        "$[1]: expected one skill per id, found chess.play again (first at $[0])"]


def test_a_skill_reference_that_is_not_an_identifier_names_its_index():
    assert problems(parse_skill, {"id": "chess.play", "required": ["a.b", "Tool_Name"]}) == [
        "$.required[1]: expected a capability reference \"<id>\" or \"<id>/<major>\" (id matching "
        "[a-z0-9]+(\\.[a-z0-9-]+)+), found string 'Tool_Name'"]


# -- connection ------------------------------------------------------------------------------------------
def test_a_connection_parses_with_its_trusted_keys():
    c = parse_connection({**CONNECTION, "agent": {"name": "coach", "namespace": "players"},
                          "revoked_at": "2026-03-01T13:00:00+01:00"})
    assert c.capabilities == ("game.move.submit/1",) and set(c.keys) == {"k1"}
    assert (c.agent.name, format_instant(c.revoked_at)) == ("coach", "2026-03-01T12:00:00Z")


def test_a_connection_key_may_be_pem():
    from cryptography.hazmat.primitives import serialization

    pem = generate_private_key().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    c = parse_connection({**CONNECTION, "keys": [{"kid": "pem", "public_key": pem}]})
    assert public_key_text(c.keys["pem"]) == public_key_text(load_public_key(pem))


def test_a_connection_refuses_bad_keys_each_with_its_path():
    keys = [{"kid": "a", "public_key": "not-a-key"}, {"kid": "b", "alg": "RS256", "public_key": KEY},
            {"kid": "a", "public_key": KEY}, {"public_key": KEY}]
    assert problems(parse_connection, {**CONNECTION, "keys": keys}) == [
        "$.keys[0].public_key: expected 32 raw key bytes as unpadded base64url, or a PEM public key, "
        "found string 'not-a-key'",
        "$.keys[1].alg: expected one of Ed25519, found string 'RS256'",
        "$.keys[2].kid: expected one key per key id, found string 'a'",
        "$.keys[3].kid: expected the required field 'kid', found nothing"]


def test_a_connection_revocation_time_is_rfc_3339():
    assert problems(parse_connection, {**CONNECTION, "revoked_at": "yesterday"}) == [
        "$.revoked_at: expected an RFC 3339 date-time with an offset, such as \"2026-03-01T12:00:00Z\", "
        "found string 'yesterday'"]


# -- engagement descriptor (structure; signatures are in test_authority.py) ----------------------------
def test_an_engagement_descriptor_parses():
    e = parse_engagement(ENGAGEMENT)
    assert (e.context, e.capabilities, e.signature.kid, len(e.signature.value)) == (
        "match-1", ("game.move.submit/1",), "k1", 64)


@pytest.mark.parametrize("field", ["experience", "context", "connection", "capabilities", "expires", "signature"])
def test_an_engagement_requires_its_field(field):
    assert problems(parse_engagement, with_(ENGAGEMENT, field, ...)) == [
        f"$.{field}: expected the required field {field!r}, found nothing"]


def test_an_engagement_that_expires_before_it_is_issued_is_malformed():
    assert problems(parse_engagement, {**ENGAGEMENT, "issued_at": "2026-03-01T14:00:00Z"}) == [
        "$.expires: expected an instant after issued_at, found string '2026-03-01T14:00:00Z'"]


@pytest.mark.parametrize("value", [b64url_encode(bytes(63)), b64url_encode(bytes(64)) + "==", "!" * 86, 5])
def test_an_engagement_signature_is_64_bytes_of_unpadded_base64url(value):
    doc = {**ENGAGEMENT, "signature": {**ENGAGEMENT["signature"], "value": value}}
    assert [p.split(":")[0] for p in problems(parse_engagement, doc)] == ["$.signature.value"]


# -- runtime policy ------------------------------------------------------------------------------------------
def test_a_runtime_policy_defaults_to_allow_with_no_rules():
    p = parse_policy({})
    assert (p.default, p.rules) == ("allow", ())


def test_a_rule_lists_alternatives_per_condition():
    p = parse_policy({"rules": [{"id": "r", "decision": "confirm", "reason": "why",
                                 "when": {"operation": ["delete", "modify"], "reversible": False,
                                          "capabilities": ["a.b"], "data_classes": ["personal"]}}]})
    r = p.rules[0]
    assert (r.operation, r.reversible, r.capabilities, r.data_classes, r.effects, r.reason) == (
        ("delete", "modify"), False, ("a.b/1",), ("personal",), None, "why")


def test_an_unknown_condition_is_refused_rather_than_matching_everything():
    assert problems(parse_policy, {"rules": [{"id": "r", "decision": "deny", "when": {"operations": ["read"]}}]}) == [
        "$.rules[0].when.operations: expected a condition among operation, resource, effects, data_classes, "
        "capabilities, reversible, found unknown condition 'operations'"]


def test_an_empty_list_of_alternatives_is_refused_rather_than_matching_nothing():
    assert problems(parse_policy, {"rules": [{"id": "r", "decision": "deny", "when": {"effects": []}}]}) == [
        "$.rules[0].when.effects: expected a non-empty array, found array of 0"]


def test_rule_ids_are_unique_and_decisions_are_allow_confirm_or_deny():
    rules = [{"id": "r", "decision": "deny"}, {"id": "r", "decision": "allow"}, {"id": "s", "decision": "ask"}]
    assert problems(parse_policy, {"rules": rules}) == [
        "$.rules[1].id: expected one rule per id, found string 'r'",
        "$.rules[2].decision: expected one of allow, confirm, deny, found string 'ask'"]


# -- instants and base64url -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["2026-03-01", "2026-03-01T12:00:00", "2026-02-30T00:00:00Z",
                                  "2026-03-01T12:00:60Z", "2026-03-01T12:00:00+24:00", " 2026-03-01T12:00:00Z",
                                  20260301])
def test_instants_are_strict_rfc_3339_with_an_offset(text):
    assert parse_instant(text) is None


def test_instants_compare_exactly_at_the_ends_of_the_calendar():
    assert to_micros(parse_instant("0001-01-01T00:00:00Z")) == -62_135_596_800_000_000
    assert to_micros(parse_instant("9999-12-31T23:59:59.999999Z")) == 253_402_300_799_999_999
    assert to_micros(parse_instant("1970-01-01T00:00:00.000001Z")) == 1


@pytest.mark.parametrize("text, micros", [("0001-01-01T00:30:00+01:00", -62_135_598_600_000_000),
                                           ("9999-12-31T23:30:00-01:00", 253_402_302_600_000_000)])
def test_an_instant_that_utc_puts_past_the_calendars_ends_is_read_and_written_in_its_own_offset(text, micros):
    # valid RFC 3339, in UTC a year 0 or 10000 instant no datetime holds: compared exactly all the same
    instant = parse_instant(text)
    assert to_micros(instant) == micros
    assert format_instant(instant) == text
    assert (instant < parse_instant("2026-03-01T12:00:00Z")) == (micros < 0)


def test_an_instant_past_the_calendar_in_an_offset_with_seconds_is_written_as_that_same_instant():
    from datetime import datetime, timedelta, timezone

    instant = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(-timedelta(minutes=1, seconds=30)))
    assert format_instant(instant) == "9999-12-31T23:59:59-00:01:30"


def test_offsets_are_normalised_to_utc():
    assert format_instant(parse_instant("2026-03-01T13:30:00.5+01:30")) == "2026-03-01T12:00:00.5Z"


@given(st.binary(max_size=80))
def test_base64url_round_trips_and_only_the_canonical_text_decodes(data):
    text = b64url_encode(data)
    assert b64url_decode(text) == data
    assert b64url_decode(text + "=") is None


@pytest.mark.parametrize("value", [None, 5, ["k"]])
def test_a_public_key_that_is_neither_text_nor_bytes_is_a_type_error(value):
    with pytest.raises(TypeError, match="expected base64url or PEM text"):
        load_public_key(value)


def test_a_policy_is_empty_or_has_rules_or_a_default():
    assert parse_policy({}).default == "allow"
    assert parse_policy({"default": "deny", "note": "kept"}).default == "deny"
    assert problems(parse_policy, {"capabilities": ["a.b"], "note": "x"}) == [
        "$: expected a runtime policy: `rules` or `default` ({} for one that allows everything), found an "
        "object with neither, holding 'capabilities', 'note'"]
