"""The A3 Authority Envelope (§8): admit computes it; the verifier's envelope warnings check it."""
import copy

import pytest
from hypothesis import given, settings, strategies as st

import a3fast
from a3fast import SchemaError
from a3fast.verify import verify
from a3fast.authority import (W_ENVELOPE_EXCEEDS_CLEARANCES, W_ENVELOPE_MALFORMED, admit, check_envelope,
                              envelope_findings)

DECL = {"v": "1.0", "agent": {"name": "order-analyst", "namespace": "support"},
        "capabilities": [{"name": "order.investigate", "version": 2}],
        "clearances": ["orders.read", "customers.read"], "residency": ["eu"]}
#: The trace of A3 §10, with the elided parts filled in minimally.
TRACE = [
    {"seq": 1, "kind": "task.submitted", "content": {"goal": "Investigate order A-1043", "requirements": {
        "v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}], "clearances": ["orders.read"],
        "residency": "eu"}}},
    {"seq": 2, "kind": "task.admitted", "content": {
        "originating_principal": {"type": "human", "id": "sub|8f3a"},
        "agent": {"name": "order-analyst", "namespace": "support"},
        "authority_envelope": {"clearances": ["orders.read", "customers.read"], "expires": ""}}},
    {"seq": 3, "kind": "task.bound", "content": {"instance": "task-4471-x", "scheduling": {"declaration": DECL}}},
]


def with_envelope(trace, envelope):
    out = copy.deepcopy(trace)
    out[1]["content"]["authority_envelope"] = envelope
    return out


# -- admit -------------------------------------------------------------------------------------------------
def test_admit_is_the_agents_clearances_that_the_principal_grants_in_declaration_order():
    assert admit(DECL, ["refunds.issue", "customers.read", "orders.read"]) == {
        "clearances": ["orders.read", "customers.read"], "expires": ""}


def test_admit_is_reachable_as_a3fast_admit():
    assert a3fast.admit(DECL, ["orders.read"]) == {"clearances": ["orders.read"], "expires": ""}


def test_admit_under_a_parent_envelope_keeps_its_expiry():
    parent = {"clearances": ["orders.read"], "expires": "2026-03-01T14:00:00Z"}
    assert admit(DECL, parent) == {"clearances": ["orders.read"], "expires": "2026-03-01T14:00:00Z"}


def test_a_grant_the_agent_does_not_hold_is_not_passed_on():
    assert admit(DECL, ["refunds.issue"])["clearances"] == []


def test_admit_refuses_grants_that_are_not_clearance_identifiers_naming_each():
    with pytest.raises(SchemaError) as info:
        admit(DECL, {"clearances": ["orders.read", "Orders"], "expires": "tomorrow"})
    assert [str(p) for p in info.value.problems] == [
        "$.expires: expected \"\" or an RFC 3339 date-time, found string 'tomorrow'",
        "$.clearances[1]: expected a clearance identifier matching [a-z0-9]+(\\.[a-z0-9-]+)+, found string 'Orders'"]


@pytest.mark.parametrize("grants", ["orders.read", None, {"expires": ""}, 5])
def test_admit_refuses_grants_that_are_not_a_list(grants):
    with pytest.raises(SchemaError):
        admit(DECL, grants)


clearance_ids = st.lists(st.sampled_from(["a.read", "b.write", "c.pii-read", "d.admin", "e.x"]), max_size=5)


@given(clearance_ids, clearance_ids)
def test_an_admitted_envelope_is_never_wider_than_the_agent_or_the_principal(held, granted):
    envelope = admit({**DECL, "clearances": held}, granted)
    assert set(envelope["clearances"]) == set(held) & set(granted)
    assert check_envelope({"authority_envelope": envelope}, {**DECL, "clearances": held}) == []


# -- the verifier's envelope check ------------------------------------------------------------------------------
def test_the_section_10_trace_has_no_envelope_warning():
    assert envelope_findings(TRACE) == []


def test_an_envelope_wider_than_the_declared_clearances_is_a_warning_on_the_admission():
    found = envelope_findings(with_envelope(TRACE, {"clearances": ["orders.read", "refunds.issue"], "expires": ""}))
    assert [(f.code, f.seq) for f in found] == [(W_ENVELOPE_EXCEEDS_CLEARANCES, 2)]
    assert "refunds.issue" in found[0].message and "support/order-analyst" in found[0].message


@pytest.mark.parametrize("envelope", [
    ["orders.read"], {"clearances": "orders.read"}, {"clearances": ["Orders"]},
    # an expiry that is neither "" nor an RFC 3339 date-time, as `admit` refuses in a principal's
    {"clearances": ["orders.read"], "expires": "tomorrow"}, {"clearances": ["orders.read"], "expires": 5},
    {"clearances": ["orders.read"], "expires": {"a": 1}}, {"clearances": ["orders.read"], "expires": None}])
def test_an_envelope_that_cannot_be_read_is_its_own_warning(envelope):
    assert [f.code for f in envelope_findings(with_envelope(TRACE, envelope))] == [W_ENVELOPE_MALFORMED]
    assert [f.code for f in verify(with_envelope(TRACE, envelope)) if f.code.startswith("W_")] == [W_ENVELOPE_MALFORMED]


@pytest.mark.parametrize("expires", ["", "2026-03-01T14:00:00Z", ...])
def test_an_envelope_expiring_never_at_an_instant_or_silent_on_it_is_read(expires):
    envelope = {"clearances": ["orders.read"]} if expires is ... else {"clearances": ["orders.read"], "expires": expires}
    assert envelope_findings(with_envelope(TRACE, envelope)) == []


def test_an_admission_waits_for_a_declaration_of_its_agent_that_parses():
    # a task.bound whose declaration does not parse (§7 reports it) does not use the admission up:
    # the next placement of the agent is checked against it, by the walk and by the verifier alike
    trace = with_envelope(TRACE, {"clearances": ["orders.read", "refunds.issue"], "expires": ""})
    broken = copy.deepcopy(trace[2])
    broken["content"]["scheduling"]["declaration"] = {**DECL, "clearances": ["Orders"]}
    trace = [trace[0], trace[1], broken, {**copy.deepcopy(trace[2]), "seq": 4}]
    for seq, record in enumerate(trace, 1):
        record["seq"] = seq
    assert [(f.code, f.seq) for f in envelope_findings(trace)] == [(W_ENVELOPE_EXCEEDS_CLEARANCES, 2)]
    assert [(f.code, f.seq) for f in verify(trace) if f.code.startswith("W_")] == [(W_ENVELOPE_EXCEEDS_CLEARANCES, 2)]


def test_an_admission_without_an_envelope_is_not_checked():
    trace = copy.deepcopy(TRACE)
    del trace[1]["content"]["authority_envelope"]
    assert envelope_findings(trace) == []


def test_a_placement_of_another_agent_is_left_to_the_scope_check():
    trace = with_envelope(TRACE, {"clearances": ["refunds.issue"], "expires": ""})
    trace[2]["content"]["scheduling"]["declaration"] = {**DECL, "agent": {"name": "x", "namespace": "support"}}
    assert envelope_findings(trace) == []


def test_one_admission_is_checked_once_even_when_placed_again():
    trace = with_envelope(TRACE, {"clearances": ["refunds.issue"], "expires": ""})
    trace.append({**copy.deepcopy(trace[2]), "seq": 4})
    assert len(envelope_findings(trace)) == 1


def test_check_envelope_ignores_a_declaration_that_does_not_parse():
    assert check_envelope({"authority_envelope": {"clearances": ["x.y"]}}, {"v": "1.0"}) == []


records = st.lists(st.one_of(
    st.fixed_dictionaries({"seq": st.integers(), "kind": st.sampled_from(["task.admitted", "task.bound", "x"]),
                           "content": st.dictionaries(st.sampled_from(["agent", "authority_envelope", "scheduling"]),
                                                      st.recursive(st.none() | st.text(max_size=5) | st.integers(),
                                                                   lambda i: st.lists(i, max_size=3)
                                                                   | st.dictionaries(st.text(max_size=5), i, max_size=3),
                                                                   max_leaves=8))}),
    st.none(), st.integers(), st.text(max_size=4)), max_size=6)


@settings(max_examples=150)
@given(records)
def test_any_records_give_findings_or_nothing_never_an_exception(trace):
    for finding in envelope_findings(trace):
        assert finding.code in (W_ENVELOPE_EXCEEDS_CLEARANCES, W_ENVELOPE_MALFORMED)
