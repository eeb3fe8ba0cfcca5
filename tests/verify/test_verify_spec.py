"""The verification procedure of §7, one test per rule, named for the rule.

Each test starts from the §10 example, breaks one thing, and checks the exact (code, seq) set
reported — and that the message says what was expected and what was found.
"""
from __future__ import annotations

import copy

import pytest

from a3fast.verify import ERROR_CODES, Finding, is_valid, verify

# declaration(name?, namespace?, **members): §10's order-analyst with the members a test changes
from factories import section_10_order_analyst as declaration, section_10_requirements

REQ = section_10_requirements()
P = ["capability:order.investigate/2", "clearance:orders.read", "residency:eu"]


def scheduling(**fields):
    doc = {"requirements": REQ, "declaration": declaration(),
           "candidates": ["order-analyst", "summariser"], "filters_passed": list(P),
           "filters_failed": [{"candidate": "summariser", "predicate": P[0]}],
           "scores": {"order-analyst": {"total": 0.7, "affinity": 0, "success_rate": 1, "cost": 0.4}}}
    doc.update(fields)
    return doc


def submitted(requirements=REQ, seq=1):
    content = {"goal": "Investigate order A-1043"}
    if requirements is not None:
        content["requirements"] = requirements
    return {"seq": seq, "kind": "task.submitted", "content": content}


def admitted(name="order-analyst", namespace="support", seq=2):
    return {"seq": seq, "kind": "task.admitted", "content": {"agent": {"name": name, "namespace": namespace}}}


def bound(sched=None, seq=3, **content):
    return {"seq": seq, "kind": "task.bound",
            "content": {"instance": "task-4471-x", "scheduling": sched if sched is not None else scheduling(),
                        **content}}


def example(**sched_fields):
    return [submitted(), admitted(), bound(scheduling(**sched_fields))]


def errors(findings: list[Finding]) -> set[tuple[str, int | None]]:
    return {(f.code, f.seq) for f in findings if f.is_error}


def only(findings: list[Finding], code: str) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, findings
    return matching[0]


# -- §10 ------------------------------------------------------------------------------------------

def test_the_section_10_example_verifies_clean():
    findings = verify(example())
    assert findings == []
    assert is_valid(findings)


# -- Requirements ---------------------------------------------------------------------------------

def test_requirements_absent_from_task_submitted_mean_an_empty_set():
    trace = [submitted(None), admitted(), bound(scheduling(requirements={}, filters_passed=[], filters_failed=[]))]
    assert verify(trace) == []


def test_requirements_S_comes_from_the_latest_task_submitted():
    trace = [submitted({"clearances": ["refunds.issue"]}), submitted(seq=2), admitted(seq=3), bound(seq=4)]
    assert verify(trace) == []


def test_requirements_P_comes_from_scheduling_requirements():
    # P adds a clearance the declaration does not hold: the unmet predicate comes from P, not S.
    req = dict(REQ, clearances=["orders.read", "refunds.issue"])
    trace = [submitted(), admitted(), bound(scheduling(requirements=req, route="refunds-review",
                                                       filters_passed=P + ["clearance:refunds.issue"]))]
    assert errors(verify(trace)) == {("E_CLEARANCE_UNMET", 3)}


# -- Placement ------------------------------------------------------------------------------------

def test_placement_without_scheduling_is_E_STRUCTURE():
    trace = [submitted(), admitted(), {"seq": 3, "kind": "task.bound", "content": {"instance": "x"}}]
    finding = only(verify(trace), "E_STRUCTURE")
    assert finding.seq == 3 and "scheduling" in finding.message and "nothing" in finding.message


@pytest.mark.parametrize("field, value, words", [
    ("requirements", "eu", "scheduling.requirements"),
    ("declaration", {"v": "1.0", "agent": {"name": "order-analyst"}, "capabilities": [], "clearances": []},
     "namespace"),
    ("candidates", "order-analyst", "scheduling.candidates"),
    ("filters_passed", [1, 2], "scheduling.filters_passed[0]"),
    ("filters_failed", [{"candidate": "summariser"}], "filters_failed[0].predicate"),
    ("scores", {"order-analyst": {"affinity": 1}}, ".total"),
    ("route", 7, "scheduling.route"),
])
def test_placement_with_a_malformed_field_is_E_STRUCTURE(field, value, words):
    findings = verify(example(**{field: value}))
    structure = [f for f in findings if f.code == "E_STRUCTURE"]
    assert structure and all(f.seq == 3 for f in structure)
    assert any(words in f.message for f in structure), structure


@pytest.mark.parametrize("field", ["requirements", "declaration", "candidates", "filters_passed",
                                   "filters_failed", "scores"])
def test_placement_without_a_required_field_is_E_STRUCTURE(field):
    sched = scheduling()
    del sched[field]
    assert errors(verify([submitted(), admitted(), bound(sched)])) == {("E_STRUCTURE", 3)}


# -- Scope ----------------------------------------------------------------------------------------

def test_scope_declaration_agent_must_equal_the_admitted_agent():
    finding = only(verify([submitted(), admitted("refund-agent"), bound()]), "E_DECLARATION_SCOPE")
    assert "support/refund-agent" in finding.message and "support/order-analyst" in finding.message


def test_scope_compares_namespace_as_well_as_name():
    assert errors(verify([submitted(), admitted(namespace="billing"), bound()])) == {("E_DECLARATION_SCOPE", 3)}


def test_scope_uses_the_latest_task_admitted():
    trace = [submitted(), admitted(), admitted("summariser", seq=3), bound(seq=4)]
    assert errors(verify(trace)) == {("E_DECLARATION_SCOPE", 4)}


def test_scope_without_any_task_admitted_is_E_DECLARATION_SCOPE():
    assert errors(verify([submitted(), bound(seq=2)])) == {("E_DECLARATION_SCOPE", 2)}


# -- Consistency ----------------------------------------------------------------------------------

def test_consistency_S_must_be_a_subset_of_P():
    req = {k: v for k, v in REQ.items() if k != "residency"}
    finding = only(verify(example(requirements=req, filters_passed=P[:2], route="any-rule")),
                   "E_REQUIREMENTS_MISMATCH")
    assert "residency:eu" in finding.message


def test_consistency_without_route_P_must_equal_S():
    req = dict(REQ, tools=["crm.lookup"])
    findings = verify(example(requirements=req, declaration=declaration(tools=["crm.lookup"]),
                              filters_passed=P + ["tool:crm.lookup"]))
    finding = only(findings, "E_REQUIREMENTS_MISMATCH")
    assert "tool:crm.lookup" in finding.message and "route" in finding.message


def test_consistency_a_route_may_add_requirements():
    req = dict(REQ, tools=["crm.lookup"])
    assert verify(example(requirements=req, declaration=declaration(tools=["crm.lookup"]),
                          filters_passed=P + ["tool:crm.lookup"], route="needs-crm")) == []


def test_consistency_without_task_submitted_is_E_REQUIREMENTS_MISMATCH():
    assert errors(verify([admitted(seq=1), bound(seq=2)])) == {("E_REQUIREMENTS_MISMATCH", 2)}


# -- Satisfaction ---------------------------------------------------------------------------------

UNMET = [
    ("E_CAPABILITY_UNMET", {"capabilities": [{"name": "order.investigate", "version": 2}]},
     {"capabilities": [{"name": "order.investigate", "version": 1}]}, "major version 1"),
    ("E_CLEARANCE_UNMET", {"clearances": ["refunds.issue"]}, {}, "refunds.issue"),
    ("E_TOOL_UNMET", {"tools": ["crm.lookup"]}, {"tools": ["mail.send"]}, "mail.send"),
    ("E_RESIDENCY_UNMET", {"residency": "us"}, {}, "'us'"),
    ("E_MODEL_UNMET", {"model": {"latency_class": "interactive"}}, {"model": {"latency_class": "batch"}}, "'batch'"),
    ("E_AGENTREF_UNMET", {"agentRef": "summariser"}, {}, "'summariser'"),
    ("E_ANTIAFFINITY_UNMET", {"exclude": ["order-analyst"]}, {}, "excludes"),
]


@pytest.mark.parametrize("code, requirements, declared, words", UNMET, ids=[u[0] for u in UNMET])
def test_satisfaction_every_predicate_of_P_must_be_satisfied(code, requirements, declared, words):
    from a3fast import parse_requirements

    predicates = list(parse_requirements(requirements).predicates)
    trace = [submitted(requirements), admitted(),
             bound(scheduling(requirements=requirements, declaration=declaration(**declared),
                              filters_passed=predicates, filters_failed=[]))]
    finding = only(verify(trace), code)
    assert finding.seq == 3 and predicates[0] in finding.message and words in finding.message
    assert errors(verify(trace)) == {(code, 3)}


def test_satisfaction_reports_one_error_per_unmet_predicate():
    decl = declaration(capabilities=[], clearances=[], residency=["us"])
    findings = verify(example(declaration=decl))
    unmet = [f for f in findings if f.code.endswith("_UNMET")]
    assert sorted(f.code for f in unmet) == ["E_CAPABILITY_UNMET", "E_CLEARANCE_UNMET", "E_RESIDENCY_UNMET"]
    assert {f.message.split(" ")[0] for f in unmet} == set(P)


# -- Explanation ----------------------------------------------------------------------------------

def test_explanation_filters_passed_must_equal_P_as_a_set():
    assert verify(example(filters_passed=[P[2], P[0], P[1], P[0]])) == []
    lacking = only(verify(example(filters_passed=P[:2])), "E_EXPLANATION")
    assert "lacks residency:eu" in lacking.message
    extra = only(verify(example(filters_passed=P + ["clearance:customers.read"])), "E_EXPLANATION")
    assert "clearance:customers.read" in extra.message


def test_explanation_chosen_agent_must_not_appear_in_filters_failed():
    failed = [{"candidate": "summariser", "predicate": P[0]}, {"candidate": "order-analyst", "predicate": P[1]}]
    finding = only(verify(example(filters_failed=failed)), "E_EXPLANATION")
    assert "'order-analyst'" in finding.message and P[1] in finding.message


def test_explanation_scores_must_contain_the_chosen_agent():
    finding = only(verify(example(scores={"summariser": {"total": 1}})), "E_EXPLANATION")
    assert "scores" in finding.message and "'order-analyst'" in finding.message


# -- Resumed placements (§6 recorded_in) ---------------------------------------------------------

def resumed(ref, seq=5, flag=True, **fields):
    sched = {"requirements": REQ, "declaration": declaration(), "recorded_in": ref, **fields}
    record = bound(sched, seq=seq)
    if flag:
        record["content"]["resumed"] = True
    return record


PREEMPTED = {"seq": 4, "kind": "task.preempted", "content": {}}


def test_resumed_placement_citing_an_earlier_full_explanation_is_valid():
    assert verify(example() + [PREEMPTED, resumed({"kind": "task.bound", "seq": 3})]) == []


def test_resumed_flag_may_sit_inside_scheduling():
    record = resumed({"kind": "task.bound", "seq": 3}, flag=False)
    record["content"]["scheduling"]["resumed"] = True
    assert verify(example() + [PREEMPTED, record]) == []


def test_resumed_recorded_in_requires_resumed_true():
    record = resumed({"kind": "task.bound", "seq": 3}, flag=False)
    finding = only(verify(example() + [PREEMPTED, record]), "E_EXPLANATION")
    assert "resumed: true" in finding.message


def test_resumed_recorded_in_kind_must_be_task_bound():
    trace = example() + [PREEMPTED, resumed({"kind": "task.admitted", "seq": 2})]
    assert errors(verify(trace)) == {("E_EXPLANATION", 5)}


@pytest.mark.parametrize("target, words", [(2, "not a task.bound"), (5, "not earlier"), (9, "not earlier"),
                                           ("3", "found string")])
def test_resumed_recorded_in_seq_must_name_an_earlier_task_bound(target, words):
    finding = only(verify(example() + [PREEMPTED, resumed({"kind": "task.bound", "seq": target})]),
                   "E_EXPLANATION")
    assert words in finding.message


def test_resumed_recorded_in_seq_must_name_a_full_explanation():
    trace = example() + [PREEMPTED, resumed({"kind": "task.bound", "seq": 3}),
                         {"seq": 6, "kind": "task.parked", "content": {}},
                         resumed({"kind": "task.bound", "seq": 5}, seq=7)]
    assert errors(verify(trace)) == {("E_EXPLANATION", 7)}


def test_resumed_without_seq_needs_a_full_explanation_somewhere_in_the_trace():
    assert verify(example() + [PREEMPTED, resumed({"kind": "task.bound"})]) == []
    lonely = [submitted(), admitted(), resumed({"kind": "task.bound"}, seq=3)]
    assert errors(verify(lonely)) == {("E_EXPLANATION", 3)}


def test_resumed_placement_is_held_to_scope_consistency_and_satisfaction():
    record = resumed({"kind": "task.bound", "seq": 3}, declaration=declaration(clearances=[]))
    trace = example() + [admitted("summariser", seq=4), record]
    assert errors(verify(trace)) == {("E_DECLARATION_SCOPE", 5), ("E_CLEARANCE_UNMET", 5)}


def test_a_resumption_after_another_task_was_placed_is_held_to_its_own_task():
    # another task submitted, admitted to another agent and placed between the placement and its
    # resumption: the resumption goes back to its own task (reading 8), held to what it cites
    other_requirements = {"v": "1.0", "capabilities": [{"name": "case.summarise", "version": 1}]}
    other_declaration = {"v": "1.0", "agent": {"name": "summariser", "namespace": "support"},
                         "capabilities": [{"name": "case.summarise", "version": 1}], "clearances": []}
    other = bound({"requirements": other_requirements, "declaration": other_declaration,
                   "candidates": ["summariser"], "filters_passed": ["capability:case.summarise/1"],
                   "filters_failed": [], "scores": {"summariser": {"total": 1}}}, seq=6)
    between = [submitted(other_requirements, seq=4), admitted("summariser", seq=5), other]
    assert verify(example() + between + [resumed({"kind": "task.bound", "seq": 3}, seq=7)]) == []
    # and is held to it: on another agent, or matching other predicates, it is not what it cites
    record = resumed({"kind": "task.bound", "seq": 3}, seq=7, declaration=declaration(name="summariser"))
    assert ("E_EXPLANATION", 7) in errors(verify(example() + between + [record]))
    # one that cites the other task's placement is held to the latest task, that one
    record = resumed({"kind": "task.bound", "seq": 6}, seq=7)
    assert errors(verify(example() + between + [record])) >= {("E_DECLARATION_SCOPE", 7), ("E_EXPLANATION", 7)}


def test_a3fast_s_own_resumption_after_other_placements_verifies():
    import orjson

    from a3fast import Fleet
    from a3fast.record.write import placement_records
    from a3fast.workload import generate_fleet, generate_tasks

    docs = generate_fleet(20, seed=5)
    fleet = Fleet()
    fleet.extend(docs)
    trace: list[dict] = []

    def write(p) -> int:
        for kind, content in placement_records(p):
            trace.append({"seq": len(trace) + 1, "kind": kind, "content": orjson.loads(content)})
        return len(trace)                  # the seq of its task.bound (or task.rejected)
    placements = [fleet.place(task) for task in generate_tasks(docs, 6, seed=5)]
    first = next(p for p in placements if p.bound)
    cited = {id(p): write(p) for p in placements}[id(first)]
    write(fleet.resume(first, seq=cited))
    assert trace[-1]["content"]["scheduling"]["recorded_in"] == {"kind": "task.bound", "seq": cited}
    assert any(r["kind"] == "task.submitted" and r["seq"] > cited for r in trace)      # others came between
    assert verify(trace) == []


def test_resumed_explanation_checks_are_those_of_the_record_it_names():
    req = dict(REQ, tools=["crm.lookup"])
    record = resumed({"kind": "task.bound", "seq": 3}, requirements=req,
                     declaration=declaration(tools=["crm.lookup"]), route="needs-crm")
    finding = only(verify(example() + [PREEMPTED, record]), "E_EXPLANATION")
    assert "seq 3" in finding.message and "tool:crm.lookup" in finding.message


# -- Rejection ------------------------------------------------------------------------------------

def rejected(**content):
    return [submitted(), {"seq": 2, "kind": "task.rejected", "content": content}]


@pytest.mark.parametrize("content", [
    {"code": "unschedulable", "reason": "No agent available"},
    {"reason": "no eligible agent among summariser, refund-agent"},
    {"reason": "The task is unschedulable"},
    {"code": "unschedulable"},
])
def test_rejection_claiming_no_eligible_agent_must_name_a_predicate(content):
    assert errors(verify(rejected(**content))) == {("E_REJECTION_REASON", 2)}


@pytest.mark.parametrize("content", [
    {"code": "unschedulable", "reason": "no eligible agent: capability:order.investigate/2 failed by summariser"},
    {"reason": "No agent is eligible: every candidate failed residency:eu."},
    {"code": "budget_exhausted", "reason": "the budget is spent"},
    {"reason": "cancelled by the submitter"},
])
def test_rejection_naming_a_predicate_or_not_claiming_ineligibility_is_valid(content):
    assert verify(rejected(**content)) == []


# -- Every error is reported ----------------------------------------------------------------------

def test_every_error_is_reported_not_just_the_first():
    decl = declaration("summariser", capabilities=[], clearances=[], residency=[])
    trace = [submitted(), admitted(), bound(scheduling(declaration=decl, filters_passed=P[:1])),
             submitted(seq=4), {"seq": 5, "kind": "task.rejected", "content": {"code": "unschedulable"}}]
    assert errors(verify(trace)) == {
        ("E_DECLARATION_SCOPE", 3), ("E_CAPABILITY_UNMET", 3), ("E_CLEARANCE_UNMET", 3),
        ("E_RESIDENCY_UNMET", 3), ("E_EXPLANATION", 3), ("E_REJECTION_REASON", 5)}


def test_error_codes_are_the_codes_of_section_7_and_E_TRACE():
    assert set(ERROR_CODES) == {
        "E_TRACE", "E_STRUCTURE", "E_DECLARATION_SCOPE", "E_REQUIREMENTS_MISMATCH", "E_CAPABILITY_UNMET",
        "E_CLEARANCE_UNMET", "E_TOOL_UNMET", "E_RESIDENCY_UNMET", "E_MODEL_UNMET", "E_AGENTREF_UNMET",
        "E_ANTIAFFINITY_UNMET", "E_EXPLANATION", "E_REJECTION_REASON"}


def test_warnings_never_make_a_trace_invalid():
    both = {"order-analyst": {"total": 0.7}, "summariser": {"total": 0.1}}
    findings = verify(example(scores=both))
    assert [f.code for f in findings] == ["W_FAILED_AND_SCORED"]
    assert findings[0].severity == "warning" and is_valid(findings)


def test_records_of_other_kinds_are_not_checked():
    trace = example() + [{"seq": 4, "kind": "task.completed", "content": {"anything": [1, 2]}}]
    assert verify(copy.deepcopy(trace)) == []


def test_resumed_placement_may_cite_a_seq_beyond_signed_64_bits():
    big = 2**64 - 10  # above 2^63: held outside the verifier's int64 array of seqs
    trace = [submitted(seq=big + 1), admitted(seq=big + 2), bound(seq=big + 3),
             {"seq": big + 4, "kind": "task.preempted", "content": {}},
             resumed({"kind": "task.bound", "seq": big + 3}, seq=big + 5)]
    assert verify(trace) == []
    trace[-1] = resumed({"kind": "task.bound", "seq": big + 2}, seq=big + 5)
    assert errors(verify(trace)) == {("E_EXPLANATION", big + 5)}


def test_a_seq_beyond_64_bits_breaks_the_document_rule():
    trace = example()
    trace[2] = dict(trace[2], seq=2**64)
    assert errors(verify(trace)) == {("E_TRACE", None)}


def test_a_resumption_is_held_to_the_latest_task_while_that_task_awaits_its_placement():
    # a task submitted after the cited placement, and not yet placed: the task.bound that follows
    # may be its placement, so it is held to that task's submission, whatever it says it resumes
    other_requirements = {**REQ, "clearances": ["orders.read", "top.secret"]}
    trace = example() + [submitted(other_requirements, seq=4), admitted(seq=5),
                         resumed({"kind": "task.bound", "seq": 3}, seq=6)]
    assert ("E_REQUIREMENTS_MISMATCH", 6) in errors(verify(trace))
