"""Portable authority: engagement signatures, connection ∩ engagement ∩ runtime, skill resolution.

Keys are generated in the tests; nothing here trusts a fixed signature. Property tests compare the
bitset implementation with a literal per-capability reading of the rules, and check that effective
authority is never wider than any one boundary.
"""
import copy
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from a3fast import SchemaError
from a3fast.authority import (CONFIRM, DECISIONS, DENIED, GRANTED, OPERATIONS, Catalog, Resolver, apply_policy,
                              canonical_bytes, effective_authority, generate_private_key,
                              parse_connection, parse_contracts, parse_engagement, parse_mappings,
                              parse_policy, parse_skills, public_key_text, resolve,
                              sign_engagement, verify_engagement)
from a3fast.bench.authority import bench_resolve, synthetic_workload
from a3fast.authority import reasons as R
from a3fast.authority.times import format_instant, parse_instant

NOW = "2026-03-01T12:30:00Z"
ISSUED = "2026-03-01T12:00:00Z"
EXPIRES = "2026-03-01T14:00:00Z"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "authority"


def contract(ident, operation="execute", **extra):
    return {"id": ident, "operation": operation, "resource": "current_match",
            "confirmation": extra.pop("confirmation", "policy_driven"), **extra}


CONTRACTS = [
    contract("game.move.submit", effects=["changes_shared_state"]),
    contract("game.board.read", "read", confirmation="never"),
    contract("game.chat.send", "communicate", effects=["sends_message"], data_classes=["personal"]),
    contract("game.match.resign", "modify", reversible=False, confirmation="always"),
    contract("game.wager.place", "transact", data_classes=["payment"], reversible=False),
]
MAPPINGS = [{"tool": "arena_submit_move", "satisfies": "game.move.submit", "transport": "mcp"},
            {"tool": "arena_get_board", "satisfies": "game.board.read", "transport": "mcp"},
            {"tool": "arena_chat", "satisfies": "game.chat.send", "transport": "http"},
            {"tool": "arena_resign", "satisfies": "game.match.resign", "transport": "mcp"}]
ALL = [c["id"] for c in CONTRACTS]


class World:
    """A signing experience and a connection that trusts it."""

    def __init__(self, connection_caps=ALL, **connection):
        self.key = generate_private_key()
        self.kid = "arena-1"
        self.connection_doc = {"id": "conn-1", "experience": "arena.example", "capabilities": list(connection_caps),
                               "keys": [{"kid": self.kid, "public_key": public_key_text(self.key)}], **connection}
        self.connection = parse_connection(self.connection_doc)

    def descriptor(self, caps=ALL, **fields):
        return {"experience": "arena.example", "context": "match-1", "connection": "conn-1",
                "capabilities": list(caps), "issued_at": ISSUED, "expires": EXPIRES, **fields}

    def engagement(self, caps=ALL, key=None, kid=None, **fields):
        return sign_engagement(self.descriptor(caps, **fields), key or self.key, kid or self.kid)

    def authority(self, engagement=None, policy=None, contracts=CONTRACTS, now=NOW, **kw):
        catalog = Catalog(parse_contracts(contracts))
        return effective_authority(catalog, self.connection, engagement if engagement is not None else self.engagement(),
                                   parse_policy(policy or {}), now=now, **kw)


@pytest.fixture
def world():
    return World()


def codes(check_or_grant):
    return [r.code for r in check_or_grant.reasons]


# -- engagement signatures ---------------------------------------------------------------------------------
def test_a_descriptor_signed_by_a_trusted_key_is_valid(world):
    check = verify_engagement(world.engagement(), world.connection, now=NOW)
    assert check.valid and check.capabilities == tuple(f"{c}/1" for c in ALL)


@pytest.mark.parametrize("field, value", [
    ("experience", "arena.other"), ("context", "match-2"), ("connection", "conn-2"),
    ("capabilities", ALL + ["game.account.administer"]), ("expires", "2027-03-01T14:00:00Z"),
    ("issued_at", "2026-03-01T11:00:00Z"), ("note", "added after signing")])
def test_a_descriptor_altered_after_signing_grants_nothing(world, field, value):
    tampered = {**world.engagement(), field: value}
    check = verify_engagement(tampered, world.connection, now=NOW)
    assert codes(check) == [R.BAD_SIGNATURE] and check.capabilities == ()


def test_a_descriptor_signed_with_another_key_under_a_trusted_key_id_grants_nothing(world):
    forged = world.engagement(key=generate_private_key())
    assert codes(verify_engagement(forged, world.connection, now=NOW)) == [R.BAD_SIGNATURE]


def test_a_descriptor_signed_with_a_key_the_connection_does_not_trust_grants_nothing(world):
    check = verify_engagement(world.engagement(kid="arena-2"), world.connection, now=NOW)
    assert codes(check) == [R.UNKNOWN_KEY] and "'arena-2'" in check.reasons[0].message


def test_a_signature_moved_to_another_descriptor_does_not_verify(world):
    narrow, wide = world.engagement(caps=ALL[:1]), world.engagement(caps=ALL)
    assert codes(verify_engagement({**wide, "signature": narrow["signature"]}, world.connection, now=NOW)) == [
        R.BAD_SIGNATURE]


def test_a_pem_key_verifies_the_same_signatures():
    from cryptography.hazmat.primitives import serialization

    w = World()
    pem = w.key.public_key().public_bytes(serialization.Encoding.PEM,
                                          serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    connection = parse_connection({**w.connection_doc, "keys": [{"kid": w.kid, "public_key": pem}]})
    assert verify_engagement(w.engagement(), connection, now=NOW).valid


def _torsion_points() -> list[bytes]:
    """The encodings of Ed25519's eight points of small order, found as L times points of full
    order (L the prime subgroup's order), each checked to be of the order it is listed for."""
    from a3fast.authority import keys as K

    P, L = K._P, 2**252 + 27742317777372353535851937790883648493

    def add(a, b):
        (x1, y1), (x2, y2) = a, b
        t = K._D * x1 * x2 * y1 * y2 % P
        return ((x1 * y2 + y1 * x2) * pow(1 + t, P - 2, P) % P, (y1 * y2 + x1 * x2) * pow(1 - t, P - 2, P) % P)

    def times(n, point):
        out = (0, 1)
        while n:
            if n & 1:
                out = add(out, point)
            point, n = add(point, point), n >> 1
        return out

    def encoded(point):
        x, y = point
        return (y | (x & 1) << 255).to_bytes(32, "little")

    found: set[bytes] = set()
    y = 2
    while len(found) < 8:
        point = K._decoded(y.to_bytes(32, "little"))
        y += 1
        if point is None:
            continue
        torsion = times(L, point)
        for k in range(8):
            found.add(encoded(times(k, torsion)))
    return sorted(found)


def test_rule_a_key_of_small_order_is_refused_since_signatures_for_it_need_no_private_key():
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from a3fast.authority.keys import b64url_encode, load_public_key, small_order

    points = _torsion_points()
    assert len(points) == 8 and (1).to_bytes(32, "little") in points
    # the threat: the identity "verifies" a signature nobody made, for any message
    identity = Ed25519PublicKey.from_public_bytes((1).to_bytes(32, "little"))
    forged = (1).to_bytes(32, "little") + bytes(32)
    for message in (b"grant everything", b"anything else"):
        try:
            identity.verify(forged, message)
        except InvalidSignature:        # a library that refuses it itself is safe here all the same
            break
    for raw in points:
        assert small_order(raw)
        with pytest.raises(ValueError, match="not a point of small order"):
            load_public_key(b64url_encode(raw))
        world = World()
        with pytest.raises(SchemaError, match="small order"):
            parse_connection({**world.connection_doc, "keys": [{"kid": world.kid, "public_key": b64url_encode(raw)}]})
    assert not any(small_order(World().key.public_key().public_bytes_raw()) for _ in range(50))


@pytest.mark.parametrize("raw", [
    (1 | 1 << 255).to_bytes(32, "little"),                  # the identity's y with the sign bit of an x of 0
    (2**255 - 19 + 1).to_bytes(32, "little"),              # y = p + 1, read by a lenient decoder as 1
    (2**255 - 19 + 1 | 1 << 255).to_bytes(32, "little"),
    (2**255 - 19 - 1 | 1 << 255).to_bytes(32, "little"),  # the order-2 point with a sign bit
])
def test_rule_a_key_not_encoded_as_rfc_8032_writes_one_is_refused(raw):
    # accepted as key bytes by the library, and read leniently as a point of small order by its check
    from a3fast.authority.keys import b64url_encode, load_public_key

    with pytest.raises(ValueError, match="as RFC 8032 writes one"):
        load_public_key(b64url_encode(raw))


def test_a_private_key_given_as_a_public_one_is_named_so():
    from cryptography.hazmat.primitives import serialization

    from a3fast.authority.keys import load_public_key

    pem = World().key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
    with pytest.raises(ValueError, match=r"^a public key, not a private key"):
        load_public_key(pem)


def test_rule_a_public_key_is_one_pem_block_and_nothing_after_it():
    # the PEM reader takes the first block and ignores the rest: a second key there read as trusted
    from cryptography.hazmat.primitives import serialization

    from a3fast.authority.keys import load_public_key

    one, other = World().key, World().key
    pem = [k.public_key().public_bytes(serialization.Encoding.PEM,
                                       serialization.PublicFormat.SubjectPublicKeyInfo).decode() for k in (one, other)]
    private = other.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()).decode()
    load_public_key(pem[0] + "\n")
    for text in (pem[0] + pem[1], pem[0] + "junk junk", pem[0] + private):
        with pytest.raises(ValueError, match=r"^one PEM public key block and nothing after it$"):
            load_public_key(text)


def test_rule_a_connection_key_holds_kid_alg_and_public_key_only():
    # a key's own revoked_at (or status) was kept and ignored: the key its writer meant to stop
    # trusting stayed trusted
    from a3fast.authority import parse_connection

    connection = {"id": "c", "experience": "arena.example", "capabilities": [],
                  "keys": [{"kid": "k1", "alg": "Ed25519", "public_key": public_key_text(World().key)}]}
    assert set(parse_connection(connection).keys) == {"k1"}
    revoked = copy.deepcopy(connection)
    revoked["keys"][0].update(revoked_at="2026-01-01T00:00:00Z", status="revoked")
    with pytest.raises(SchemaError) as refused:
        parse_connection(revoked)
    assert [p.path for p in refused.value.problems] == ["$.keys[0].revoked_at", "$.keys[0].status"]
    assert all(p.expected.startswith("kid, alg and public_key only in a key") for p in refused.value.problems)


def test_expiry_is_exclusive_and_exact_to_the_microsecond(world):
    expires = parse_instant(EXPIRES)
    just_before = format_instant(expires - timedelta(microseconds=1))
    assert verify_engagement(world.engagement(), world.connection, now=just_before).valid
    assert codes(verify_engagement(world.engagement(), world.connection, now=EXPIRES)) == [R.EXPIRED]


def test_clock_skew_forgives_an_issuer_clock_that_runs_ahead_and_no_more(world):
    issued = parse_instant(ISSUED)
    edge = issued - timedelta(seconds=30)
    assert verify_engagement(world.engagement(), world.connection, now=edge, skew_seconds=30).valid
    early = verify_engagement(world.engagement(), world.connection, now=edge - timedelta(microseconds=1),
                              skew_seconds=30)
    assert codes(early) == [R.NOT_YET_VALID]


def test_clock_skew_never_extends_an_expiry(world):
    late = parse_instant(EXPIRES) + timedelta(seconds=1)
    assert codes(verify_engagement(world.engagement(), world.connection, now=late, skew_seconds=3600)) == [R.EXPIRED]


def test_a_signed_descriptor_for_another_connection_or_experience_grants_nothing(world):
    other = world.engagement(connection="conn-2", experience="arena.other")
    check = verify_engagement(other, world.connection, now=NOW)
    assert codes(check) == [R.WRONG_CONNECTION, R.WRONG_EXPERIENCE] and check.capabilities == ()


def test_a_malformed_descriptor_is_a_reason_not_an_exception(world):
    check = verify_engagement({"capabilities": "all"}, world.connection, now=NOW)
    assert codes(check) == [R.MALFORMED] and "and 3 more" in check.reasons[0].message


def test_canonical_bytes_ignore_member_order_and_the_signature(world):
    signed = world.engagement()
    reordered = dict(reversed(list(signed.items())))
    assert canonical_bytes(reordered) == canonical_bytes(world.descriptor())
    assert canonical_bytes(signed) == json.dumps(world.descriptor(), sort_keys=True, separators=(",", ":"),
                                                 ensure_ascii=False).encode()


def test_signing_again_replaces_the_old_signature(world):
    resigned = sign_engagement(world.engagement(kid="old"), world.key, world.kid)
    assert resigned["signature"]["kid"] == world.kid and verify_engagement(resigned, world.connection, now=NOW).valid


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
                           | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=4),
                           max_leaves=12)


@settings(max_examples=200)
@given(json_values)
def test_any_json_value_as_a_descriptor_is_rejected_without_an_exception(value):
    world = _FUZZ_WORLD
    check = verify_engagement(value, world.connection, now=NOW)
    assert not check.valid and check.capabilities == ()


@settings(max_examples=150)
@given(st.sampled_from(["experience", "context", "connection", "capabilities", "issued_at", "expires",
                        "signature", "extra"]),
       st.one_of(st.sampled_from(["signature.alg", "signature.kid", "signature.value"]), st.none()),
       json_values)
def test_any_change_to_a_signed_descriptor_either_changes_nothing_or_grants_nothing(field, sig_field, value):
    world = _FUZZ_WORLD
    original = world.engagement()
    changed = copy.deepcopy(original)
    if sig_field is not None:
        changed["signature"][sig_field.split(".")[1]] = value
    else:
        changed[field] = value
    check = verify_engagement(changed, world.connection, now=NOW)
    assert check.valid == (changed == original)


_FUZZ_WORLD = World()


# -- effective authority: one rule per boundary ---------------------------------------------------------------
def grant(authority, ident):
    return authority.grant(f"{ident}/1")


def test_a_capability_in_every_boundary_with_no_rule_is_granted(world):
    g = grant(world.authority(), "game.board.read")
    assert (g.status, g.reasons) == (GRANTED, ())


def test_the_connection_bounds_what_an_engagement_can_grant():
    w = World(connection_caps=["game.board.read"])
    g = grant(w.authority(), "game.move.submit")
    assert (g.status, codes(g)) == (DENIED, [R.NOT_IN_CONNECTION])


def test_the_engagement_narrows_the_connection(world):
    g = grant(world.authority(world.engagement(caps=["game.board.read"])), "game.move.submit")
    assert (g.status, codes(g)) == (DENIED, [R.NOT_IN_ENGAGEMENT])


def test_a_revoked_connection_grants_nothing_from_its_revocation_instant():
    revoked = World(revoked_at=NOW)
    authority = revoked.authority()
    assert authority.effective == 0 and codes(grant(authority, "game.board.read")) == [R.CONNECTION_REVOKED]
    before = parse_instant(NOW) - timedelta(microseconds=1)
    assert grant(revoked.authority(now=before), "game.board.read").status == GRANTED


def test_a_rejected_engagement_denies_every_capability_and_says_why(world):
    authority = world.authority(world.engagement(key=generate_private_key()))
    assert authority.effective == 0
    g = grant(authority, "game.board.read")
    assert codes(g) == [R.ENGAGEMENT_REJECTED] and "signature does not verify" in g.reasons[0].message


def test_a_capability_without_a_contract_is_denied_since_no_policy_can_judge_it():
    w = World(connection_caps=ALL + ["game.account.close"])
    g = grant(w.authority(w.engagement(caps=ALL + ["game.account.close"])), "game.account.close")
    assert (g.status, codes(g)) == (DENIED, [R.NO_CONTRACT])


def test_a_runtime_deny_rule_names_itself_and_its_reason(world):
    policy = {"rules": [{"id": "no-money", "decision": "deny", "when": {"data_classes": ["payment"]},
                         "reason": "never moves money"}]}
    g = grant(world.authority(policy=policy), "game.wager.place")
    assert (g.status, [(r.code, r.rule, r.boundary) for r in g.reasons]) == (
        DENIED, [(R.RUNTIME_DENIED, "no-money", R.RUNTIME)])
    assert g.reasons[0].message == "denied by runtime policy rule no-money (never moves money)"


def test_every_denying_boundary_is_named_not_just_the_first():
    w = World(connection_caps=["game.board.read"])
    policy = {"rules": [{"id": "no-trade", "decision": "deny", "when": {"operation": ["transact"]}}]}
    g = grant(w.authority(w.engagement(caps=["game.board.read"]), policy=policy), "game.wager.place")
    assert codes(g) == [R.NOT_IN_CONNECTION, R.NOT_IN_ENGAGEMENT, R.RUNTIME_DENIED]


@pytest.mark.parametrize("order", [0, 1])
def test_the_strictest_matching_rule_wins_whatever_the_order(world, order):
    rules = [{"id": "allow-all", "decision": "allow"}, {"id": "confirm-moves", "decision": "confirm",
                                                          "when": {"capabilities": ["game.move.submit"]}},
             {"id": "deny-execute", "decision": "deny", "when": {"operation": ["execute"]}}]
    authority = world.authority(policy={"rules": rules if order == 0 else rules[::-1]})
    assert [r.rule for r in grant(authority, "game.move.submit").reasons] == ["deny-execute"]
    assert grant(authority, "game.board.read").status == GRANTED


def test_the_policy_default_decides_what_no_rule_matches(world):
    policy = {"default": "deny", "rules": [{"id": "reads", "decision": "allow", "when": {"operation": ["read"]}}]}
    authority = world.authority(policy=policy)
    assert grant(authority, "game.board.read").status == GRANTED
    g = grant(authority, "game.move.submit")
    assert (g.status, g.reasons[0].message) == (DENIED, "denied by the runtime policy default (no rule matches)")


def test_a_contract_that_always_requires_confirmation_is_granted_with_confirmation(world):
    g = grant(world.authority(), "game.match.resign")
    assert (g.status, codes(g)) == (CONFIRM, [R.CONTRACT_CONFIRMATION])


def test_a_runtime_confirm_rule_applies_even_to_a_contract_that_never_asks(world):
    policy = {"rules": [{"id": "confirm-all-reads", "decision": "confirm", "when": {"operation": ["read"]}}]}
    g = grant(world.authority(policy=policy), "game.board.read")
    assert (g.status, [r.rule for r in g.reasons]) == (CONFIRM, ["confirm-all-reads"])


def test_a_contract_silent_on_reversibility_counts_as_irreversible(world):
    policy = {"rules": [{"id": "irreversible", "decision": "deny", "when": {"reversible": False}},
                        {"id": "reversible", "decision": "confirm", "when": {"reversible": True}}]}
    authority = world.authority(policy=policy)
    assert [r.rule for r in grant(authority, "game.move.submit").reasons] == ["irreversible"]


def test_an_engagement_check_for_another_connection_is_made_again_and_grants_it_nothing(world):
    other = World()
    check = verify_engagement(other.engagement(connection="conn-2"),
                              parse_connection({**other.connection_doc, "id": "conn-2"}), now=NOW)
    assert check.valid
    authority = effective_authority(Catalog(parse_contracts(CONTRACTS)), world.connection, check,
                                    parse_policy({}), now=NOW)
    # signed by another experience's key under the kid this connection trusts for its own: the
    # signature does not verify, which is said first, as for the descriptor itself
    assert codes(authority.engagement) == [R.BAD_SIGNATURE] and authority.effective == 0



@pytest.mark.parametrize("keys, reason", [("dropped", R.UNKNOWN_KEY), ("replaced", R.BAD_SIGNATURE)])
def test_an_engagement_check_for_a_connection_that_trusts_other_keys_is_made_again(world, keys, reason):
    # the same connection, equal in every field it compares, after the host dropped the signing key
    # (it was compromised) or trusts a new key under its kid: the old check answers for it no more
    check = verify_engagement(world.engagement(), world.connection, now=NOW)
    assert check.valid
    doc = copy.deepcopy(world.connection_doc)
    if keys == "dropped":
        doc["keys"] = []
    else:
        doc["keys"][0]["public_key"] = public_key_text(generate_private_key())
    rekeyed = parse_connection(doc)
    assert rekeyed == world.connection       # its keys are not among the fields it compares
    authority = effective_authority(Catalog(parse_contracts(CONTRACTS)), rekeyed, check, parse_policy({}), now=NOW)
    assert codes(authority.engagement) == [reason] and authority.effective == 0
    resolved = Resolver(CONTRACTS, MAPPINGS, []).resolve(rekeyed, check, {}, now=NOW)
    assert codes(resolved.authority.engagement) == [reason]
    # the very connection object, its keys changed in place after the check was made
    held = parse_connection(world.connection_doc)
    made = verify_engagement(world.engagement(), held, now=NOW)
    held.keys.clear()
    in_place = effective_authority(Catalog(parse_contracts(CONTRACTS)), held, made, parse_policy({}), now=NOW)
    assert codes(in_place.engagement) == [R.UNKNOWN_KEY] and in_place.effective == 0
    # the same keys in a connection parsed again: the check still answers for it
    again = effective_authority(Catalog(parse_contracts(CONTRACTS)), parse_connection(world.connection_doc), check,
                                parse_policy({}), now=NOW)
    assert again.engagement is check

# -- the property: authority is never wider than a boundary, and matches a literal reading ------------------
KEYS = [f"p.cap-{i}" for i in range(10)]
contract_docs = st.builds(
    lambda ident, op, effects, data, rev, conf: {k: v for k, v in {
        "id": ident, "operation": op, "resource": "r", "effects": effects, "data_classes": data,
        "reversible": rev, "confirmation": conf}.items() if v is not None},
    st.sampled_from(KEYS), st.sampled_from(OPERATIONS), st.lists(st.sampled_from(["e1", "e2", "e3"]), max_size=2),
    st.lists(st.sampled_from(["d1", "d2"]), max_size=2), st.one_of(st.none(), st.booleans()),
    st.sampled_from(["never", "always", "policy_driven"]))
rule_docs = st.builds(
    lambda i, decision, when: {"id": f"r{i}", "decision": decision, "when": when},
    st.integers(0, 10**6), st.sampled_from(DECISIONS),
    st.fixed_dictionaries({}, optional={
        "operation": st.lists(st.sampled_from(OPERATIONS), min_size=1, max_size=3),
        "effects": st.lists(st.sampled_from(["e1", "e2", "e3"]), min_size=1, max_size=2),
        "data_classes": st.lists(st.sampled_from(["d1", "d2"]), min_size=1, max_size=2),
        "capabilities": st.lists(st.sampled_from(KEYS), min_size=1, max_size=3),
        "reversible": st.booleans()}))
worlds = st.fixed_dictionaries({
    "contracts": st.lists(contract_docs, max_size=10, unique_by=lambda c: c["id"]),
    "connection": st.lists(st.sampled_from(KEYS), unique=True),
    "engagement": st.lists(st.sampled_from(KEYS), unique=True),
    "engagement_state": st.sampled_from(["valid", "valid", "valid", "expired", "tampered", "foreign key"]),
    "revoked": st.booleans(),
    "rules": st.lists(rule_docs, max_size=5, unique_by=lambda r: r["id"]),
    "default": st.sampled_from(DECISIONS),
})


def literal_status(key, w, contracts):
    """§ portable-authority read one capability at a time, with no bitsets."""
    if w["revoked"] or w["engagement_state"] != "valid":
        return DENIED
    if key not in {f"{k}/1" for k in w["connection"]} or key not in {f"{k}/1" for k in w["engagement"]}:
        return DENIED
    c = contracts.get(key)
    if c is None:
        return DENIED

    def matches(rule):
        when = rule["when"]
        return all([
            "operation" not in when or c["operation"] in when["operation"],
            "effects" not in when or bool(set(c.get("effects", [])) & set(when["effects"])),
            "data_classes" not in when or bool(set(c.get("data_classes", [])) & set(when["data_classes"])),
            "capabilities" not in when or c["id"] in when["capabilities"],
            "reversible" not in when or bool(c.get("reversible")) == when["reversible"]])

    decisions = [r["decision"] for r in w["rules"] if matches(r)]
    decision = max(decisions, key=DECISIONS.index) if decisions else w["default"]
    if decision == "deny":
        return DENIED
    return CONFIRM if decision == "confirm" or c["confirmation"] == "always" else GRANTED


def build(w):
    world = _FUZZ_WORLD
    connection = parse_connection({**world.connection_doc, "capabilities": w["connection"],
                                   **({"revoked_at": ISSUED} if w["revoked"] else {})})
    engagement = world.engagement(caps=w["engagement"])
    if w["engagement_state"] == "expired":
        engagement = world.engagement(caps=w["engagement"], expires="2026-03-01T12:10:00Z")
    elif w["engagement_state"] == "tampered":
        engagement = {**engagement, "capabilities": KEYS}
    elif w["engagement_state"] == "foreign key":
        engagement = world.engagement(caps=w["engagement"], key=generate_private_key())
    catalog = Catalog(parse_contracts(w["contracts"]))
    policy = parse_policy({"default": w["default"], "rules": w["rules"]})
    return effective_authority(catalog, connection, engagement, policy, now=NOW)


@settings(max_examples=150)
@given(worlds)
def test_effective_authority_is_never_wider_than_any_boundary(w):
    authority = build(w)
    effective = set(authority.keys(GRANTED)) | set(authority.keys(CONFIRM))
    assert effective <= {f"{k}/1" for k in w["connection"]}
    assert effective <= {f"{k}/1" for k in w["engagement"]}
    assert effective <= {f"{c['id']}/1" for c in w["contracts"]}
    if w["revoked"] or w["engagement_state"] != "valid":
        assert effective == set()
    runtime_denied = {authority.catalog.vocabulary.key(i) for i in range(len(authority.catalog.vocabulary))
                      if (authority.runtime.deny >> i) & 1}
    assert not effective & runtime_denied


@settings(max_examples=150)
@given(worlds)
def test_effective_authority_equals_a_literal_reading_capability_by_capability(w):
    authority = build(w)
    contracts = {f"{c['id']}/1": c for c in w["contracts"]}
    for key in [f"{k}/1" for k in KEYS]:
        expected = literal_status(key, w, contracts)
        g = authority.grant(key)
        assert g.status == expected, (key, g)
        assert (key in authority) == (expected != DENIED)
        assert bool(g.reasons) == (expected != GRANTED)  # every denial and every confirmation says why


# -- skill resolution --------------------------------------------------------------------------------------------
SKILLS = [
    {"id": "chess.play", "required": ["game.board.read", "game.move.submit"], "optional": ["game.chat.send"]},
    {"id": "chess.resign", "required": ["game.match.resign"]},
    {"id": "chess.wager", "required": ["game.wager.place"]},
    {"id": "chess.idle", "required": []},
]


def resolved(world, caps=ALL, policy=None, mappings=MAPPINGS, skills=SKILLS, **kw):
    return resolve(CONTRACTS, mappings, skills, world.connection_doc, world.engagement(caps=caps, **kw),
                   policy or {}, now=NOW)


def test_a_skill_whose_required_capabilities_all_resolve_is_available_with_its_bindings(world):
    result = resolved(world).skill("chess.play")
    assert result.available and not result.unmet
    assert [(b.capability, b.tool, b.transport) for b in result.bindings] == [
        ("game.board.read/1", "arena_get_board", "mcp"), ("game.move.submit/1", "arena_submit_move", "mcp")]
    assert [(b.capability, b.tool) for b in result.optional] == [("game.chat.send/1", "arena_chat")]


def test_an_optional_capability_that_does_not_resolve_never_blocks_a_skill(world):
    result = resolved(world, caps=["game.board.read", "game.move.submit"]).skill("chess.play")
    assert result.available and result.optional == ()
    assert [(u.capability, codes(u)) for u in result.optional_unmet] == [("game.chat.send/1", [R.NOT_IN_ENGAGEMENT])]


def test_a_granted_capability_with_no_tool_on_this_host_leaves_the_skill_unavailable(world):
    result = resolved(world).skill("chess.wager")
    assert not result.available
    assert [(u.capability, codes(u)) for u in result.unmet] == [("game.wager.place/1", [R.NO_MAPPING])]


def test_an_unmet_requirement_names_every_reason(world):
    policy = {"rules": [{"id": "no-trade", "decision": "deny", "when": {"operation": ["transact"]}}]}
    result = resolved(world, caps=["game.board.read"], policy=policy).skill("chess.wager")
    assert codes(result.unmet[0]) == [R.NOT_IN_ENGAGEMENT, R.RUNTIME_DENIED, R.NO_MAPPING]


def test_a_binding_that_needs_confirmation_says_why(world):
    binding = resolved(world).skill("chess.resign").bindings[0]
    assert codes_of(binding.confirmation) == [R.CONTRACT_CONFIRMATION]


def codes_of(reasons):
    return [r.code for r in reasons]


def test_the_first_mapping_of_a_capability_is_the_one_bound(world):
    mappings = [{"tool": "preferred", "satisfies": "game.board.read", "transport": "mcp"}, *MAPPINGS]
    assert resolved(world, mappings=mappings).skill("chess.play").bindings[0].tool == "preferred"


def test_a_skill_that_requires_nothing_is_available(world):
    assert resolved(world, caps=[]).is_available("chess.idle")


def test_a_revoked_connection_leaves_every_skill_that_needs_authority_unavailable():
    w = World(revoked_at=ISSUED)
    resolution = resolved(w)
    assert resolution.available_skills() == ["chess.idle"]
    assert R.CONNECTION_REVOKED in codes(resolution.skill("chess.play").unmet[0])


def test_one_resolver_serves_many_engagements(world):
    resolver = Resolver(CONTRACTS, MAPPINGS, SKILLS)
    wide = resolver.resolve(world.connection_doc, world.engagement(), {}, now=NOW)
    narrow = resolver.resolve(world.connection_doc, world.engagement(caps=["game.match.resign", "game.new.cap"]), {},
                              now=NOW)
    assert wide.available_skills() == ["chess.play", "chess.resign", "chess.idle"]
    assert narrow.available_skills() == ["chess.resign", "chess.idle"]


skill_docs = st.lists(st.builds(lambda i, req, opt: {"id": f"s.k{i}", "required": req,
                                                     "optional": [k for k in opt if k not in req]},
                                st.integers(0, 10**6), st.lists(st.sampled_from(KEYS), max_size=4, unique=True),
                                st.lists(st.sampled_from(KEYS), max_size=2, unique=True)),
                      max_size=12, unique_by=lambda s: s["id"])


@settings(max_examples=150)
@given(worlds, skill_docs, st.lists(st.sampled_from(KEYS), unique=True))
def test_skill_availability_by_bitsets_equals_a_literal_reading(w, skills, mapped):
    authority = build(w)
    mappings = [{"tool": f"tool_{k}", "satisfies": k, "transport": "mcp"} for k in mapped]
    resolver = Resolver(w["contracts"], mappings, skills)
    resolution = resolver.resolve(authority.connection, authority.engagement, parse_policy(
        {"default": w["default"], "rules": w["rules"]}), now=NOW)
    contracts = {f"{c['id']}/1": c for c in w["contracts"]}
    usable = {f"{k}/1" for k in KEYS if literal_status(f"{k}/1", w, contracts) != DENIED and k in mapped}
    for skill in skills:
        result = resolution.skill(skill["id"])
        required = [f"{k}/1" for k in skill["required"]]
        assert result.available == all(k in usable for k in required) == resolution.is_available(skill["id"])
        assert [b.capability for b in result.bindings] == [k for k in required if k in usable]
        assert [u.capability for u in result.unmet] == [k for k in required if k not in usable]
        assert all(u.reasons for u in result.unmet)


# -- the worked example and the benchmark function -------------------------------------------------------------
def load(name):
    return json.loads((EXAMPLES / name).read_text())


def test_the_worked_example_resolves_as_documented():
    resolution = resolve(load("contracts.json"), load("mappings.json"), load("skills.json"), load("connection.json"),
                         load("engagement.json"), load("policy.json"), now=NOW)
    assert resolution.available_skills() == ["chess.play", "chess.resign"]
    play = resolution.skill("chess.play")
    assert [(b.capability, b.tool, [r.rule for r in b.confirmation]) for b in play.bindings] == [
        ("game.board.read/1", "arena_get_board", []),
        ("game.move.submit/1", "arena_submit_move", ["confirm-shared-moves"])]
    assert {u.capability: codes(u) for s in resolution.unavailable_skills()
            for u in resolution.skill(s).unmet} == {
        "game.wager.place/2": [R.RUNTIME_DENIED], "engine.position.evaluate/1": [R.NO_MAPPING],
        "game.spectators.invite/1": [R.NOT_IN_CONNECTION]}


def test_the_signed_example_files_are_what_the_example_key_produces(tmp_path):
    subprocess.run([sys.executable, str(EXAMPLES / "sign_examples.py"), str(tmp_path)], check=True)
    for name in ("connection.json", "engagement.json"):
        assert (tmp_path / name).read_bytes() == (EXAMPLES / name).read_bytes(), name


def test_bench_resolve_reports_a_median_and_the_skills_a_literal_check_finds_available():
    report = bench_resolve(n_skills=300, caps_per_skill=4, vocabulary=60, seed=7, quick=True)
    w = synthetic_workload(300, 4, 60, seed=7)
    resolution = Resolver(w.contracts, w.mappings, w.skills).resolve(w.connection, w.engagement, w.policy,
                                                                     now="2026-01-01T12:00:00Z")
    usable = {k for k in resolution.authority.keys(GRANTED) + resolution.authority.keys(CONFIRM)} & {
        m.satisfies for m in w.mappings}
    assert report["available"] == sum(all(k in usable for k in s.required) for s in w.skills)
    assert (report["n_skills"], report["caps_per_skill"], report["vocabulary"]) == (300, 4, 60)
    assert 0 < report["min_s"] <= report["median_s"] and report["repeat"] == 3
    assert report["target_met"] == (report["median_s"] <= report["target_s"])


# -- hostile input: findings, never a crash, never authority -----------------------------------------------------
PARSERS = [lambda v: parse_contracts([v]), lambda v: parse_mappings([v]), lambda v: parse_skills([v]),
           parse_connection, parse_policy, parse_engagement]


@settings(max_examples=200)
@given(st.sampled_from(range(len(PARSERS))), json_values)
def test_any_json_value_either_parses_or_is_a_schema_error(which, value):
    try:
        PARSERS[which](value)
    except SchemaError as exc:
        assert exc.problems and all(p.path.startswith("$") for p in exc.problems)


@settings(max_examples=200)
@given(st.integers(-5_000_000, 5_000_000), st.integers(-5_000_000, 5_000_000), st.integers(0, 120))
def test_an_engagement_is_in_force_exactly_from_issue_minus_skew_until_expiry(from_issue, from_expiry, skew):
    world = _FUZZ_WORLD
    issued, expires = parse_instant(ISSUED), parse_instant(EXPIRES)
    for now in (issued + timedelta(microseconds=from_issue), expires + timedelta(microseconds=from_expiry)):
        check = verify_engagement(world.engagement(), world.connection, now=now, skew_seconds=skew)
        in_force = issued - timedelta(seconds=skew) <= now < expires
        assert check.valid == in_force and (check.capabilities != ()) == in_force


def test_a_signature_by_one_trusted_key_under_another_trusted_keys_id_grants_nothing():
    w = World()
    second = generate_private_key()
    connection = parse_connection({**w.connection_doc, "keys": [
        *w.connection_doc["keys"], {"kid": "arena-2", "public_key": public_key_text(second)}]})
    assert verify_engagement(w.engagement(key=second, kid="arena-2"), connection, now=NOW).valid
    assert codes(verify_engagement(w.engagement(key=second, kid=w.kid), connection, now=NOW)) == [R.BAD_SIGNATURE]



def test_a_contract_inferred_from_untrusted_hints_needs_confirmation(world):
    """Drafts from MCP annotations (a3fast import mcp --contracts) carry trusted: false; a tool's
    own hints must not let it run unattended, so each use needs a person's confirmation."""
    drafted = [dict(c, trusted=False, inferred_from="mcp-annotations") if c["id"] == "game.board.read" else c
               for c in CONTRACTS]
    g = grant(world.authority(contracts=drafted), "game.board.read")
    assert g.status == CONFIRM
    assert codes(g) == ["contract_inferred_from_untrusted_hints"]
    assert "inferred from mcp-annotations" in g.reasons[0].message
    assert grant(world.authority(), "game.board.read").status == GRANTED


def test_two_parsed_contracts_for_one_capability_are_refused(world):
    # as the documents are (one contract per id and major version): their qualifiers would be merged
    # into one capability's bits, so a rule denying irreversible actions could be escaped
    reversible = contract("game.board.read", "read", reversible=True, confirmation="never")
    irreversible = contract("game.board.read", "transact", confirmation="always")
    with pytest.raises(SchemaError, match="one contract per id and major version"):
        Resolver([reversible, irreversible], MAPPINGS, [])
    with pytest.raises(ValueError, match="'game.board.read/1' given twice; one contract per id and major version"):
        Resolver(parse_contracts([reversible]) + parse_contracts([irreversible]), MAPPINGS, [])
    with pytest.raises(ValueError, match="given twice"):
        Catalog(parse_contracts([reversible]) + parse_contracts([irreversible]))


def test_connection_and_policy_documents_are_parsed_by_the_library_calls_as_the_resolver_parses_them(world):
    catalog = Catalog(parse_contracts(CONTRACTS))
    engagement = world.engagement()
    policy = {"rules": [{"id": "no-chat", "decision": "deny", "when": {"operation": ["communicate"]}}]}
    parsed = effective_authority(catalog, world.connection, engagement, parse_policy(policy), now=NOW)
    given = effective_authority(catalog, world.connection_doc, engagement, policy, now=NOW)
    assert given.counts() == parsed.counts() and grant(given, "game.chat.send").status == DENIED
    assert verify_engagement(engagement, world.connection_doc, now=NOW).valid
    # what does not parse is named, as the resolver names it; what is no catalog is a TypeError
    with pytest.raises(SchemaError, match=r"\$: expected an object"):
        verify_engagement(engagement, ["conn-1"], now=NOW)
    with pytest.raises(SchemaError, match=r"\$\.rules: expected an array"):
        effective_authority(catalog, world.connection, engagement, {"rules": "all"}, now=NOW)
    with pytest.raises(TypeError, match="catalog: expected a Catalog"):
        effective_authority(CONTRACTS, world.connection, engagement, {}, now=NOW)
    # and the runtime policy on its own
    assert apply_policy(catalog, policy).deny == apply_policy(catalog, parse_policy(policy)).deny != 0
    with pytest.raises(TypeError, match="catalog: expected a Catalog"):
        apply_policy(CONTRACTS, policy)


# -- a resolver and a check used again ----------------------------------------------------------------------
def test_a_resolver_used_again_gives_each_connection_its_own_answer_and_changes_none_given():
    world = World()
    resolver = Resolver(CONTRACTS, MAPPINGS, [{"id": "game.play", "required": ["game.move.submit"]}])
    first = resolver.resolve(world.connection, world.engagement(), {}, now=NOW)
    counts, grants = first.authority.counts(), [g.to_dict() for g in first.authority.grants()]
    # another connection that the experience grants capabilities the host never heard of
    wider = World(connection_caps=ALL + [f"other.cap{i}" for i in range(5)])
    resolver.resolve(wider.connection, wider.engagement(ALL + ["other.cap0"]), {}, now=NOW)
    assert first.authority.counts() == counts and [g.to_dict() for g in first.authority.grants()] == grants
    again = resolver.resolve(world.connection, world.engagement(), {}, now=NOW)
    assert again.authority.counts() == counts
    assert len(resolver.vocabulary) == len(CONTRACTS) + 0     # the host's own keys only


def test_an_engagement_check_used_at_another_instant_is_made_again(world):
    resolver = Resolver(CONTRACTS, MAPPINGS, [{"id": "game.play", "required": ["game.move.submit"]}])
    check = verify_engagement(world.engagement(), world.connection, now=NOW)
    assert check.valid and resolver.resolve(world.connection, check, {}, now=NOW).available_skills() == ["game.play"]
    later = resolver.resolve(world.connection, check, {}, now="2026-03-02T09:00:00Z")
    assert later.available_skills() == [] and codes(later.authority.engagement) == [R.EXPIRED]
    # and for a connection with the same id paired with another experience
    elsewhere = parse_connection({**world.connection_doc, "experience": "elsewhere.example"})
    moved = resolver.resolve(elsewhere, check, {}, now=NOW)
    assert moved.available_skills() == [] and codes(moved.authority.engagement) == [R.WRONG_EXPERIENCE]


def test_a_parsed_engagement_is_verified_as_its_descriptor(world):
    parsed = parse_engagement(world.engagement())
    assert verify_engagement(parsed, world.connection, now=NOW).valid
    resolution = resolve(CONTRACTS, MAPPINGS, [{"id": "game.play", "required": ["game.move.submit"]}],
                         world.connection, parsed, {}, now=NOW)
    assert resolution.available_skills() == ["game.play"]


def test_a_capability_asked_about_without_a_version_is_its_major_version_1(world):
    authority = world.authority()
    assert "game.board.read" in authority and "game.board.read/1" in authority
    assert authority.grant("game.board.read") == authority.grant("game.board.read/1")
    assert authority.grant("game.board.read").status == GRANTED
    with pytest.raises(ValueError, match="expected a reference"):
        authority.grant("Not A Reference")


@pytest.mark.parametrize("text, shown", [
    ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"),
    ("0999-12-31T23:59:59.5Z", "0999-12-31T23:59:59.5Z"),
    ("2026-03-01T12:30:00.1234567891Z", "2026-03-01T12:30:00.123456Z"),
])
def test_an_instant_is_written_as_rfc_3339_and_read_back(text, shown):
    # four-digit years however early, and a fraction of any length kept to the microsecond
    instant = parse_instant(text)
    assert instant is not None and format_instant(instant) == shown and parse_instant(shown) == instant


def test_a_descriptor_for_another_operating_context_grants_nothing_where_the_host_names_its_own(world):
    # portable-authority, 2 · Engagement: the descriptor narrows authority for one experience and
    # one operating context
    descriptor = world.engagement()
    context = descriptor["context"]
    assert verify_engagement(descriptor, world.connection, now=NOW, context=context).valid
    other = verify_engagement(descriptor, world.connection, now=NOW, context="casual-match-9")
    assert codes(other) == [R.WRONG_CONTEXT] and other.capabilities == ()
    assert repr(context) in other.reasons[0].message and "'casual-match-9'" in other.reasons[0].message
    assert verify_engagement(descriptor, world.connection, now=NOW).valid        # a host naming none
    resolver = Resolver(CONTRACTS, MAPPINGS, [{"id": "game.play", "required": ["game.move.submit"]}])
    assert resolver.resolve(world.connection, descriptor, {}, now=NOW, context=context).available_skills() == \
        ["game.play"]
    assert resolver.resolve(world.connection, descriptor, {}, now=NOW, context="casual-match-9").available_skills() == []
    # a check made in one context is made again for another
    check = verify_engagement(descriptor, world.connection, now=NOW, context=context)
    moved = resolver.resolve(world.connection, check, {}, now=NOW, context="casual-match-9")
    assert codes(moved.authority.engagement) == [R.WRONG_CONTEXT]
    with pytest.raises(ValueError, match="context must be a string or None"):
        verify_engagement(descriptor, world.connection, now=NOW, context=9)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_descriptor_holding_a_number_json_cannot_carry_is_malformed_not_signed_as_null(world, value):
    # orjson writes NaN and the infinities as null: the signature over null must not cover them
    signed = world.engagement(max_stake=None)
    assert verify_engagement(signed, world.connection, now=NOW).valid
    check = verify_engagement({**signed, "max_stake": value}, world.connection, now=NOW)
    assert codes(check) == [R.MALFORMED] and "is not a JSON number" in check.reasons[0].message
    with pytest.raises(TypeError):
        sign_engagement({**world.descriptor(ALL), "extra": {"deep": [value]}}, world.key, world.kid)
