"""§7 step by step, down to the words of each finding: the code, the record it is about, and what
was expected and found (a3fast.verify). test_verify_spec.py holds each rule to its codes; this file
holds each finding to its message, so that a reviewer reading one is told the truth."""
from __future__ import annotations

import orjson
import pytest

from a3fast import parse_declaration, parse_requirements
from a3fast.trace import read_values
from a3fast.verify import Finding, Verifier, summarise, unmet_detail, verify, verify_bytes, verify_file, verify_stream

from test_verify_spec import (P, PREEMPTED, REQ, admitted, bound, declaration, example, resumed, scheduling,
                              submitted)

AGENT = "agent 'order-analyst'"


def said(trace):
    """(code, seq, message) of every finding, the trace given as values and as JSON Lines alike
    (the lines also numbered)."""
    findings = [(f.code, f.seq, f.message) for f in verify(trace)]
    lines = b"".join(orjson.dumps(r) + b"\n" for r in trace)
    from_lines = verify_bytes(lines)
    assert [(f.code, f.seq, f.message) for f in from_lines] == findings
    assert all(f.line is not None for f in from_lines)  # warnings too
    return findings


def unmet(requirements, declared, **drop):
    d = declaration(**declared)
    for field in drop:
        del d[field]
    predicates = list(parse_requirements(requirements).predicates)
    return said([submitted(requirements), admitted(),
                 bound(scheduling(requirements=requirements, declaration=d, filters_passed=predicates,
                                  filters_failed=[]))])


# -- Satisfaction: what the declaration has instead ----------------------------------------------

UNMET_WORDS = {
    "capability at other versions": (
        {"capabilities": [{"name": "order.investigate", "version": 3}]},
        {"capabilities": [{"name": "order.investigate", "version": 2}, {"name": "order.investigate", "version": 1}]},
        (), "E_CAPABILITY_UNMET", "capability:order.investigate/3",
        f"{AGENT} declares order.investigate at major version 1, 2, not 3"),
    "capability not declared": (
        {"capabilities": [{"name": "text.summarise", "version": 1}]}, {}, (),
        "E_CAPABILITY_UNMET", "capability:text.summarise/1", f"{AGENT} declares no capability text.summarise"),
    "clearance, holding others": (
        {"clearances": ["refunds.issue"]}, {}, (), "E_CLEARANCE_UNMET", "clearance:refunds.issue",
        f"{AGENT} does not hold clearance refunds.issue (it holds: orders.read, customers.read)"),
    "clearance, holding none": (
        {"clearances": ["refunds.issue"]}, {"clearances": []}, (), "E_CLEARANCE_UNMET", "clearance:refunds.issue",
        f"{AGENT} does not hold clearance refunds.issue (it holds: none)"),
    "tool, declaring no tools": (
        {"tools": ["crm.lookup"]}, {}, (), "E_TOOL_UNMET", "tool:crm.lookup",
        f"{AGENT} declares no tools, so it is not bound to 'crm.lookup'"),
    "tool, declaring an empty list": (
        {"tools": ["crm.lookup"]}, {"tools": []}, (), "E_TOOL_UNMET", "tool:crm.lookup",
        f"{AGENT} is not bound to tool 'crm.lookup' (its tools: none)"),
    "tool, bound to others": (
        {"tools": ["crm.lookup"]}, {"tools": ["mail.send", "web.fetch"]}, (), "E_TOOL_UNMET", "tool:crm.lookup",
        f"{AGENT} is not bound to tool 'crm.lookup' (its tools: mail.send, web.fetch)"),
    "tool whose name holds colons": (
        {"tools": ["mcp:github/create_issue"]}, {"tools": ["mcp:github/list"]}, (), "E_TOOL_UNMET",
        "tool:mcp:github/create_issue",
        f"{AGENT} is not bound to tool 'mcp:github/create_issue' (its tools: mcp:github/list)"),
    "residency, declaring none": (
        {"residency": "us"}, {}, ("residency",), "E_RESIDENCY_UNMET", "residency:us",
        f"{AGENT} declares no residency, so it does not satisfy 'us'"),
    "residency, declaring another": (
        {"residency": "us"}, {}, (), "E_RESIDENCY_UNMET", "residency:us",
        f"{AGENT} declares residency ['eu'], which does not contain 'us'"),
    "latency class, declaring no model": (
        {"model": {"latency_class": "batch"}}, {}, (), "E_MODEL_UNMET", "model.latency_class:batch",
        f"{AGENT} declares no model.latency_class, so it does not equal 'batch'"),
    "latency class, declaring a model without one": (
        {"model": {"latency_class": "batch"}}, {"model": {"cost_ceiling_usd": "1"}}, (), "E_MODEL_UNMET",
        "model.latency_class:batch", f"{AGENT} declares no model.latency_class, so it does not equal 'batch'"),
    "latency class, declaring the other": (
        {"model": {"latency_class": "batch"}}, {"model": {"latency_class": "interactive"}}, (), "E_MODEL_UNMET",
        "model.latency_class:batch", f"{AGENT} declares model.latency_class 'interactive', not 'batch'"),
    "agentRef naming another": (
        {"agentRef": "summariser"}, {}, (), "E_AGENTREF_UNMET", "agentRef:summariser",
        "the task named agent 'summariser' directly, but the chosen agent is 'order-analyst'"),
    "anti-affinity excluding the chosen": (
        {"exclude": ["order-analyst"]}, {}, (), "E_ANTIAFFINITY_UNMET", "anti-affinity:order-analyst",
        "the task excludes agent 'order-analyst', and that is the agent chosen"),
}


@pytest.mark.parametrize("requirements, declared, drop, code, predicate, detail", UNMET_WORDS.values(),
                         ids=list(UNMET_WORDS))


def test_an_unmet_predicate_says_what_the_declaration_has_instead(requirements, declared, drop, code,
                                                                   predicate, detail):
    assert unmet(requirements, declared, **dict.fromkeys(drop)) == [
        (code, 3, f"{predicate} is not satisfied: {detail}")]


def test_a_long_list_of_what_is_held_is_cut_after_eight():
    decl = parse_declaration(declaration(clearances=[f"c.{i}" for i in range(10)]))
    assert unmet_detail(decl, "clearance:x.y") == (
        f"{AGENT} does not hold clearance x.y (it holds: c.0, c.1, c.2, c.3, c.4, c.5, c.6, c.7 and 2 more)")
    decl = parse_declaration(declaration(clearances=[f"c.{i}" for i in range(8)]))
    assert unmet_detail(decl, "clearance:x.y").endswith("(it holds: c.0, c.1, c.2, c.3, c.4, c.5, c.6, c.7)")


def test_a_string_that_is_no_predicate_is_said_to_be_none():
    assert unmet_detail(parse_declaration(declaration()), "clearance") == "'clearance' is not a predicate of §5"


# -- Scope ------------------------------------------------------------------------------------------

def test_scope_says_which_agent_was_admitted_and_which_declared():
    assert said([submitted(), admitted("summariser"), bound()]) == [
        ("E_DECLARATION_SCOPE", 3, "the declaration is for support/order-analyst, but the latest task.admitted "
                                   "(seq 2) admitted support/summariser")]
    assert said([submitted(), {"seq": 2, "kind": "task.admitted", "content": {"agent": "x"}}, bound()]) == [
        ("E_DECLARATION_SCOPE", 3, "the declaration is for support/order-analyst, but the latest task.admitted "
                                   "(seq 2) names no agent {name, namespace}")]
    assert said([submitted(), bound(seq=2)]) == [
        ("E_DECLARATION_SCOPE", 2, "the declaration is for support/order-analyst, but no task.admitted precedes "
                                   "this placement to say which agent the task was admitted to")]


# -- Consistency ------------------------------------------------------------------------------------

def test_consistency_names_what_was_dropped_and_what_was_added():
    asked = {"clearances": ["orders.read", "refunds.issue"]}
    assert said([submitted(asked), admitted(), bound()]) == [
        ("E_REQUIREMENTS_MISMATCH", 3, "the task asked for clearance:refunds.issue (task.submitted, seq 1), but "
                                       "scheduling.requirements does not: a placement may only add requirements, "
                                       "never drop one"),
        ("E_REQUIREMENTS_MISMATCH", 3, "scheduling.requirements adds capability:order.investigate/2, residency:eu, "
                                       "which the task did not ask for (task.submitted, seq 1), and no route is on "
                                       "record to name the rule that added it")]
    assert said([admitted(seq=1), bound(seq=2)]) == [
        ("E_REQUIREMENTS_MISMATCH", 2, "no task.submitted precedes this placement, so what was asked cannot be "
                                       "compared with what was matched (§6: the requirements MUST also appear there)")]


def test_a_task_submitted_without_requirements_asked_for_nothing():
    # absent requirements are the empty set S: everything the placement matched was added
    assert said([submitted(requirements=None), admitted(), bound()]) == [
        ("E_REQUIREMENTS_MISMATCH", 3, f"scheduling.requirements adds {', '.join(P)}, which the task did not "
                                       "ask for (task.submitted, seq 1), and no route is on record to name the "
                                       "rule that added it")]


def test_an_unreadable_task_submitted_is_E_STRUCTURE_and_nothing_is_compared_with_it():
    assert said([submitted({"clearances": 5}), admitted(), bound()]) == [
        ("E_STRUCTURE", 1, "task.submitted requirements.clearances: expected an array, found 5; what the task "
                           "asked for cannot be read")]


# -- Explanation ------------------------------------------------------------------------------------

def test_explanation_names_what_filters_passed_lacks_and_has_beyond():
    assert said(example(filters_passed=P[:1] + ["tool:x"])) == [
        ("E_EXPLANATION", 3, "filters_passed must equal the predicates matched; it lacks clearance:orders.read, "
                             "residency:eu"),
        ("E_EXPLANATION", 3, "filters_passed must equal the predicates matched; it has tool:x, which "
                             "scheduling.requirements does not derive")]


def test_explanation_of_a_chosen_agent_failed_and_scored():
    failed = [{"candidate": "order-analyst", "predicate": P[0]}]
    assert said(example(filters_failed=failed)) == [
        ("E_EXPLANATION", 3, "the chosen agent 'order-analyst' is listed in filters_failed (as failing "
                             "capability:order.investigate/2), so the record says it was not eligible"),
        ("W_FAILED_AND_SCORED", 3, "listed both in filters_failed (ineligible) and in scores (eligible): order-analyst")]


def test_explanation_of_a_chosen_agent_failed_and_not_scored():
    failed = [{"candidate": "order-analyst", "predicate": P[1]}]
    assert said(example(filters_failed=failed, scores={"summariser": {"total": 1}})) == [
        ("E_EXPLANATION", 3, "the chosen agent 'order-analyst' is listed in filters_failed (as failing "
                             "clearance:orders.read), so the record says it was not eligible"),
        ("E_EXPLANATION", 3, "scores must contain the chosen agent 'order-analyst', and it does not (it has 1 entry)")]


@pytest.mark.parametrize("scores, entries", [({}, "0 entries"), ({"s": {"total": 1}}, "1 entry"),
                                             ({"s": {"total": 1}, "t": {"total": 2}}, "2 entries")])


def test_explanation_counts_the_scores_that_leave_out_the_chosen_agent(scores, entries):
    assert said(example(scores=scores)) == [
        ("E_EXPLANATION", 3, f"scores must contain the chosen agent 'order-analyst', and it does not (it has {entries})")]


def test_failed_predicates_that_were_not_matched_are_a_warning_listing_them_sorted():
    failed = [{"candidate": "s", "predicate": "tool:zz"}, {"candidate": "t", "predicate": "tool:aa"},
              {"candidate": "u", "predicate": P[0]}]
    assert said(example(filters_failed=failed)) == [
        ("W_FAILED_PREDICATE_UNMATCHED", 3, "filters_failed gives tool:aa, tool:zz as a first failed predicate, "
                                            "but that is not among the predicates matched")]


# -- Explanation of a resumed placement (§6 recorded_in) ----------------------------------------------

def cites(ref, **fields):
    return said(example() + [PREEMPTED, resumed(ref, **fields)])


RESUMED_WORDS = {
    "not an object": (5, 'recorded_in: expected {kind: "task.bound", seq}, found 5'),
    "no kind": ({"seq": 3}, 'recorded_in.kind must be "task.bound", found nothing'),
    "another kind": ({"kind": "task.admitted", "seq": 2}, "recorded_in.kind must be \"task.bound\", found string "
                                                           "'task.admitted'"),
    "seq not an integer": ({"kind": "task.bound", "seq": True},
                           "recorded_in.seq must be the seq of an earlier task.bound, found true"),
    "seq of another kind": ({"kind": "task.bound", "seq": 2},
                            "recorded_in.seq names seq 2, which is not a task.bound in this trace; it must name an "
                            "earlier task.bound with a full explanation"),
    "seq after the last task.bound": ({"kind": "task.bound", "seq": 4},
                                      "recorded_in.seq names seq 4, which is not a task.bound in this trace; it must "
                                      "name an earlier task.bound with a full explanation"),
    "seq not earlier": ({"kind": "task.bound", "seq": 5},
                        "recorded_in.seq names seq 5, which is not earlier than this record; it must name an earlier "
                        "task.bound with a full explanation"),
    "seq beyond int64": ({"kind": "task.bound", "seq": 2**63},
                         f"recorded_in.seq names seq {2**63}, which is not earlier than this record; it must name an "
                         "earlier task.bound with a full explanation"),
}


@pytest.mark.parametrize("ref, message", RESUMED_WORDS.values(), ids=list(RESUMED_WORDS))
def test_a_reference_that_names_no_full_explanation_says_why(ref, message):
    assert cites(ref) == [("E_EXPLANATION", 5, message)]


@pytest.mark.parametrize("first", [-2**63, -300, 1, 300, 2**63 - 2, 2**63])
def test_a_placement_is_cited_by_its_seq_wherever_in_the_integers_the_trace_runs(first):
    # seqs are any increasing integers; those beyond 64 bits are kept apart from the others
    trace = [submitted(seq=first), admitted(seq=first + 1), bound(seq=first + 2),
             {"seq": first + 3, "kind": "task.preempted", "content": {}},
             resumed({"kind": "task.bound", "seq": first + 2}, seq=first + 4)]
    assert said(trace) == []
    trace[-1] = resumed({"kind": "task.bound", "seq": first + 1}, seq=first + 4)
    assert [code for code, _, _ in said(trace)] == ["E_EXPLANATION"]


SUMMARISER = declaration("summariser")


def then_placed_on_the_summariser(seq):
    """example() (a full placement on order-analyst at seq 3), then a full placement on the
    summariser at `seq`, preempted at the seq after the last record."""
    return example() + [admitted("summariser", seq=4),
                        bound(scheduling(declaration=SUMMARISER, filters_failed=[],
                                         scores={"summariser": {"total": 1}}), seq=seq),
                        {"seq": max(seq, 4) + 1, "kind": "task.preempted", "content": {}}]


def test_a_seq_two_placements_share_is_cited_as_the_later_of_them():
    # the repeated seq is E_TRACE; a placement citing it is checked against the latest placement with it
    trace = then_placed_on_the_summariser(seq=3)

    def findings(*records):
        return [(f.code, f.seq) if f.code == "E_TRACE" else (f.code, f.seq, f.message)
                for f in verify(trace + list(records))]

    assert findings(resumed({"kind": "task.bound", "seq": 3}, seq=6, declaration=SUMMARISER)) == [("E_TRACE", 3)]
    assert findings(admitted(seq=6), resumed({"kind": "task.bound", "seq": 3}, seq=7)) == [
        ("E_TRACE", 3), ("E_EXPLANATION", 7, "the explanation it cites (seq 3) chose support/summariser; it does "
                                             "not explain a placement on support/order-analyst")]


def test_a_reference_from_a_record_out_of_order_to_a_later_seq_is_not_earlier():
    findings = verify(example() + [resumed({"kind": "task.bound", "seq": 3}, seq=2)])
    assert [(f.code, f.seq) for f in findings] == [("E_TRACE", 2), ("E_EXPLANATION", 2)]
    assert findings[1].message.startswith("recorded_in.seq names seq 3, which is not earlier than this record")


def test_each_placement_cited_is_held_to_its_own_explanation():
    # explanations are kept once per distinct content: two placements on two agents keep two
    trace = then_placed_on_the_summariser(seq=5)
    assert said(trace + [resumed({"kind": "task.bound", "seq": 5}, seq=7, declaration=SUMMARISER)]) == []
    assert said(trace + [admitted(seq=7), resumed({"kind": "task.bound", "seq": 3}, seq=8)]) == []
    assert [code for code, _, _ in said(trace + [resumed({"kind": "task.bound", "seq": 3}, seq=7,
                                                         declaration=SUMMARISER)])] == ["E_EXPLANATION"]


def test_a_seq_that_does_not_increase_is_E_TRACE_named_by_its_line_or_its_place():
    trace = example() + [dict(PREEMPTED, seq=2)]
    assert [(f.code, f.seq, f.line, f.message) for f in verify(trace)] == [
        ("E_TRACE", 2, None, "record 4: seq 2 does not increase (an earlier record has seq 3)")]
    assert [(f.code, f.seq, f.line, f.message) for f in verify_bytes(b"".join(orjson.dumps(r) + b"\n" for r in trace))] == [
        ("E_TRACE", 2, 4, "seq 2 does not increase (an earlier record has seq 3)")]


def test_a_reference_without_resumed_true_says_so():
    assert said(example() + [PREEMPTED, resumed({"kind": "task.bound", "seq": 3}, flag=False)]) == [
        ("E_EXPLANATION", 5, "recorded_in stands in for the explanation only in a resumed placement, and this "
                             "task.bound does not carry resumed: true")]


def test_a_reference_to_a_placement_that_cites_another_says_it_carries_none_of_its_own():
    trace = example() + [PREEMPTED, resumed({"kind": "task.bound", "seq": 3}),
                         resumed({"kind": "task.bound", "seq": 5}, seq=6)]
    assert said(trace) == [("E_EXPLANATION", 6, "recorded_in.seq names seq 5, a task.bound that carries no full "
                                                "explanation of its own; it must name an earlier task.bound with a "
                                                "full explanation")]


def test_a_reference_to_a_placement_whose_lists_are_not_all_there_says_it_carries_none():
    sched = scheduling()
    del sched["candidates"]
    findings = said([submitted(), admitted(), bound(sched), PREEMPTED, resumed({"kind": "task.bound", "seq": 3})])
    assert [(code, seq) for code, seq, _ in findings] == [("E_STRUCTURE", 3), ("E_EXPLANATION", 5)]
    assert findings[1][2].startswith("recorded_in.seq names seq 3, a task.bound that carries no full explanation")


def test_a_reference_without_seq_in_a_trace_with_no_full_explanation():
    assert said([submitted(), admitted(), resumed({"kind": "task.bound"}, seq=3)]) == [
        ("E_EXPLANATION", 3, "recorded_in names no seq, so the trace must hold a task.bound with a full "
                             "explanation (§6), and it holds none")]


def test_a_reference_without_seq_is_anchored_by_a_full_explanation_anywhere_in_the_trace():
    trace = [submitted(), admitted(), resumed({"kind": "task.bound"}, seq=3), submitted(seq=4),
             admitted(seq=5), bound(seq=6)]
    assert said(trace) == []


def test_a_finding_made_when_the_trace_ends_stands_in_trace_order():
    trace = [submitted(), admitted(), resumed({"kind": "task.bound"}, seq=3), submitted(requirements=5, seq=4),
             resumed({"kind": "task.bound"}, seq=5)]
    unanchored = ("recorded_in names no seq, so the trace must hold a task.bound with a full explanation (§6), "
                  "and it holds none")
    assert said(trace) == [
        ("E_EXPLANATION", 3, unanchored),
        ("E_STRUCTURE", 4, "task.submitted requirements: expected an object, found 5; what the task asked for "
                           "cannot be read"),
        ("E_EXPLANATION", 5, unanchored)]


def test_finishing_twice_gives_the_same_findings_once():
    verifier = Verifier().feed_all(read_values([submitted(), admitted(), resumed({"kind": "task.bound"}, seq=3)]))
    first = list(verifier.finish())
    assert [f.code for f in first] == ["E_EXPLANATION"]
    assert verifier.finish() == first


def test_the_explanation_cited_is_held_to_what_this_placement_matched():
    req = dict(REQ, tools=["crm.lookup"])
    assert cites({"kind": "task.bound", "seq": 3}, requirements=req, declaration=declaration(tools=["crm.lookup"]),
                 route="needs-crm") == [
        ("E_EXPLANATION", 5, "the explanation it cites (seq 3) does not cover this placement: its filters_passed "
                             "lacks tool:crm.lookup")]
    trace = example(filters_passed=P + ["tool:q"], requirements=dict(REQ, tools=["q"]),
                    declaration=declaration(tools=["q"]), route="r")
    assert said(trace + [PREEMPTED, resumed({"kind": "task.bound", "seq": 3})]) == [
        ("E_EXPLANATION", 5, "the explanation it cites (seq 3) does not cover this placement: its filters_passed "
                             "has tool:q, which this placement did not match")]


def test_an_explanation_cited_that_lacks_some_and_has_others_says_both():
    trace = example(filters_passed=P + ["tool:q"], requirements=dict(REQ, tools=["q"]),
                    declaration=declaration(tools=["q", "crm.lookup"]), route="r")
    assert said(trace + [PREEMPTED, resumed({"kind": "task.bound", "seq": 3}, requirements=dict(REQ, tools=["crm.lookup"]),
                                            declaration=declaration(tools=["q", "crm.lookup"]), route="r")]) == [
        ("E_EXPLANATION", 5, "the explanation it cites (seq 3) does not cover this placement: its filters_passed "
                             "lacks tool:crm.lookup and has tool:q, which this placement did not match")]


def test_the_explanation_cited_must_have_chosen_this_agent_eligibly():
    assert said(example() + [admitted("summariser", seq=4),
                             resumed({"kind": "task.bound", "seq": 3}, declaration=declaration("summariser"))]) == [
        ("E_EXPLANATION", 5, "the explanation it cites (seq 3) chose support/order-analyst; it does not explain a "
                             "placement on support/summariser")]
    failed = [{"candidate": "order-analyst", "predicate": P[0]}]
    assert said(example(filters_failed=failed, scores={"s": {"total": 1}})
                + [PREEMPTED, resumed({"kind": "task.bound", "seq": 3})])[2:] == [
        ("E_EXPLANATION", 5, "the explanation it cites (seq 3) lists the chosen agent 'order-analyst' in "
                             "filters_failed (as failing capability:order.investigate/2)"),
        ("E_EXPLANATION", 5, "the explanation it cites (seq 3) has no score for the chosen agent 'order-analyst'")]


def test_an_explanation_whose_declaration_was_unreadable_chose_no_agent():
    trace = [submitted(), admitted(), bound(scheduling(declaration={"v": "1.0"})), PREEMPTED,
             resumed({"kind": "task.bound", "seq": 3})]
    assert said(trace)[3:] == [
        ("E_EXPLANATION", 5, "the explanation it cites (seq 3) chose no agent; it does not explain a placement on "
                             "support/order-analyst")]


# -- Rejection --------------------------------------------------------------------------------------

REJECTION_RULE = ("a rejection that claims no agent was eligible must name at least one failed predicate of §5 "
                  "(such as capability:<name>/<version>); found ")


def rejected(content, seq=2):
    return {"seq": seq, "kind": "task.rejected", "content": content}


def test_a_rejection_reason_without_a_predicate_is_quoted_up_to_120_characters():
    reason = "no eligible agent " + "x" * 200
    assert said([submitted(), rejected({"reason": reason})]) == [
        ("E_REJECTION_REASON", 2, f"{REJECTION_RULE}reason string {reason[:120] + '…'!r}")]
    assert said([submitted(), rejected({"code": "unschedulable"})]) == [
        ("E_REJECTION_REASON", 2, f"{REJECTION_RULE}no reason")]
    assert said([submitted(), rejected({"code": "unschedulable", "reason": 5})]) == [
        ("E_REJECTION_REASON", 2, f"{REJECTION_RULE}reason 5")]


def test_the_verifier_counts_the_records_placements_and_rejections_it_read():
    from a3fast.trace import read_values
    from a3fast.verify import Verifier

    trace = example() + [PREEMPTED, resumed({"kind": "task.bound", "seq": 3}),
                         rejected({"reason": "budget exhausted"}, seq=6), rejected({}, seq=7)]
    verifier = Verifier().feed_all(read_values(trace))
    assert (verifier.records, verifier.placements, verifier.rejections) == (7, 2, 2)


# -- compact records the verifier cannot read -----------------------------------------------------------

def compact_trace(requirements):
    from a3fast import Fleet
    from a3fast.record.compact import Encoder

    fleet = Fleet()
    fleet.add(declaration("order-analyst"))
    placement = fleet.place(requirements)
    return [{"seq": seq, "kind": kind, "content": orjson.loads(content)}
            for seq, (kind, content) in enumerate(Encoder().encode_placement(1, placement), 1)]


UNREADABLE = ("a3fast.compact: the compact record cannot be read: seq {seq}: $.content['a3fast.compact'].format: "
              "unknown compact format 3 (this decoder reads formats 1 and 2)")


def test_a_compact_placement_that_cannot_be_read_is_E_STRUCTURE_saying_why():
    trace = compact_trace(REQ)
    assert [r["kind"] for r in trace] == ["task.submitted", "task.admitted", "task.bound"]
    trace[2]["content"]["a3fast.compact"]["format"] = 3
    assert said(trace) == [("E_STRUCTURE", 3, UNREADABLE.format(seq=3))]


def test_a_compact_rejection_that_cannot_be_read_is_still_held_to_the_rejection_rule():
    # §7 reads a rejection's code and reason, which stay beside the compact member
    trace = compact_trace({"capabilities": [{"name": "x.y", "version": 1}]})
    assert [r["kind"] for r in trace] == ["task.submitted", "task.rejected"] and said(trace) == []
    trace[1]["content"]["a3fast.compact"]["format"] = 3
    # its reason was derived from the member (format 2): unread, the rejection has none
    assert said(trace) == [("E_STRUCTURE", 2, UNREADABLE.format(seq=2)),
                           ("E_REJECTION_REASON", 2, f"{REJECTION_RULE}no reason")]
    trace[1]["content"]["reason"] = "no eligible agent among 1 candidate: capability:x.y/1 failed by order-analyst"
    assert said(trace) == [("E_STRUCTURE", 2, UNREADABLE.format(seq=2))]
    trace[1]["content"]["reason"] = "no eligible agent"
    assert said(trace) == [("E_STRUCTURE", 2, UNREADABLE.format(seq=2)),
                           ("E_REJECTION_REASON", 2, f"{REJECTION_RULE}reason string 'no eligible agent'")]


# -- Findings and their summary ----------------------------------------------------------------------

def test_a_finding_says_where_it_is_and_a_warning_says_it_is_one():
    assert str(Finding("E_TRACE", 3, "m", 7)) == "line 7, seq 3: E_TRACE: m"
    assert str(Finding("E_TRACE", None, "m", 7)) == "line 7: E_TRACE: m"
    assert str(Finding("E_TRACE", 3, "m")) == "seq 3: E_TRACE: m"
    assert str(Finding("W_FAILED_AND_SCORED", None, "m", None, "warning")) == "warning W_FAILED_AND_SCORED: m"
    assert Finding("E_TRACE", 3, "m", 7).to_dict() == {"code": "E_TRACE", "seq": 3, "line": 7, "message": "m"}
    assert Finding("E_TRACE", 3, "m").is_error and not Finding("W_X", 3, "m", severity="warning").is_error


def test_the_summary_gives_the_verdict_then_one_line_per_finding():
    error, warning = Finding("E_TRACE", 3, "m", 7), Finding("W_FAILED_AND_SCORED", 4, "w", None, "warning")
    assert summarise([], "t.jsonl") == "t.jsonl: valid: every check of §7 passed"
    assert summarise([warning]) == "valid: every check of §7 passed, 1 warning\n  seq 4: warning W_FAILED_AND_SCORED: w"
    assert summarise([error, warning, warning], "t.jsonl").splitlines() == [
        "t.jsonl: invalid: 1 error, 2 warnings", "  line 7, seq 3: E_TRACE: m",
        "  seq 4: warning W_FAILED_AND_SCORED: w", "  seq 4: warning W_FAILED_AND_SCORED: w"]
    assert summarise([error, error]).splitlines()[0] == "invalid: 2 errors"


@pytest.mark.parametrize("value, found", [("x", "string 'x'"), ({"a": 1}, "object with 1 field"), (5, "5")])
def test_a_value_that_is_no_sequence_of_records_is_one_E_TRACE(value, found):
    assert verify(value) == [Finding("E_TRACE", None, f"expected a sequence of records {{seq, kind, content}}, "
                                                      f"found {found}")]


def test_progress_hears_of_every_byte_of_a_trace_read_from_a_file_or_a_stream(tmp_path):
    import io

    text = b"".join(orjson.dumps(r) + b"\n" for r in example())
    path = tmp_path / "trace.jsonl"
    path.write_bytes(text)
    heard: list[int] = []
    assert verify_file(path, heard.append) == [] and sum(heard) == len(text) and len(heard) == 3
    heard.clear()
    assert verify_stream(io.BytesIO(text), heard.append) == [] and sum(heard) == len(text)
