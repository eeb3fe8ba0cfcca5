"""The reading of "a rejection whose reason claims no eligible agent" (§7 Rejection; docs/design.md,
reading 6; a3fast.rejection_claims), phrasing by phrasing."""
from __future__ import annotations

import pytest

from a3fast.rejection_claims import claims_no_eligible_agent, names_a_predicate
from a3fast.verify import verify

CLAIMS = [
    "no eligible agent",
    "No eligible agents",
    "Could not find an eligible agent for this task",
    "could not find a suitable agent",
    "couldn't find any agent that satisfies the requirements",
    "unable to find a matching candidate",
    "failed to find an agent",
    "did not find any candidate",
    "found no eligible agents",
    "found no candidates",
    "no suitable agent was found",
    "No agents found",
    "0 eligible agents among 40 candidates",
    "zero eligible agents",
    "zero of the 40 candidates passed",
    "eligible agents: 0",
    "eligible: 0/40",
    "Eligible candidates = none",
    "task cannot be scheduled: every candidate failed the filter",
    "cannot be scheduled",
    "the task could not be scheduled",
    "unable to schedule the task",
    "failed to schedule task-4471",
    "Unschedulable",
    "task is unschedulable",
    "not schedulable on this fleet",
    "no candidates",
    "no candidate passed the filter",
    "No candidates remained after filtering",
    "none of the candidates",
    "none of the 40 agents are eligible",
    "none of the agents matched",
    "not a single candidate qualified",
    "not one agent is eligible",
    "no agent available",
    "No agent available.",
    "no agents satisfy the requirements",
    "no agent is eligible",
    "no agent matched the requirements",
    "no matching agent",
    "no qualified agents in the fleet",
    "no capable agent in namespace support",
    "every candidate failed",
    "all candidates failed at least one predicate",
    "all 40 candidates were filtered out",
    "all of the agents were rejected by the filter",
    "each candidate was ineligible",
    "every agent did not pass the filters",
    "all agents are excluded by the task",
    "agents were weighed; none were eligible",
    "Could not\nfind an eligible\tagent",
    "No agent can run this task",
    "No agent can handle the task",
    "No agent could take the task",
    "Unable to place: no agents",
    "failed to place the task",
    "cannot place task-7",
    "Task could not be placed on any agent",
    "the task could not be placed anywhere",
    "Could not place onto any agent",
    "qualified: 0",
    "matching: 0",
    "available agents: 0",
    "Agents available: 0",
    "no agents left after filtering",
    "no candidates remain",
    "none eligible",
    "None of the agents qualify",
    "No agent fulfils the requirements",
    "no agents fulfill the task's requirements",
    "Nobody can take this task",
    "no one can run this task",
    "no one is eligible",
    "No agent has the required capability",
    "no agents offer the requested tools",
    # phrasings a hunt found unread
    "0/12 agents eligible",
    "there is no agent that can do this",
    "There are no agents that can take it",
    "No agent has the capability order.investigate",
    "scheduling failed: no agent",
    "No worker available",
    "0 of 12 candidates qualify",
]

NOT_CLAIMS = [
    "3 agents available, but the principal's budget is exhausted",
    "the principal's budget is exhausted; no agent was contacted",
    "no agent was contacted",
    "budget exhausted",
    "the deadline passed before placement",
    "rejected by policy: tasks of kind refunds.issue need approval",
    "the principal lacks clearance orders.issue",
    "duplicate idempotency key",
    "cancelled by the requester",
    "rate limited: 12 candidates were eligible, retry later",
    "approval denied by the reviewer",
    "2 of 40 candidates were eligible, but all were busy",
    "eligible agents exist, but the approval was denied",
    "agents available: 12; rejected by the rate limiter",
    "the requester has no remaining quota; 5 agents were eligible",
    "task expired in the queue",
    "input too large",
    "the session was closed",
    "the principal was revoked",
    "no approval was given",
    "no budget left",
    "no agent was asked; the task was cancelled by its principal",
    "invalid requirements document",
    "the task was withdrawn",
    "40 candidates considered, 3 eligible; the placement was vetoed",
    "the route was disabled",
    "a3fast is shutting down",
    "no retries left",
    "shutting down: no new placements are accepted",
    "the task timed out after 30 s",
    "the engagement descriptor has expired",
    "quota exceeded for namespace support",
    "rejected: the principal is not allowed to submit tasks",
    "the agent declined the task",
    "the chosen agent went offline before binding",
    "the task asks for an unknown capability version format",
    "the idempotency key was reused",
    "manual rejection by an operator",
    "policy forbids placement outside the EU",
    "an agent was eligible but its lease could not be renewed",
    "too many tasks in flight",
    "no agent could be contacted",
    "no agent can be reached right now; the budget is exhausted",
    "none were ineligible; the approval was denied",
    "agents available: 12",
    "budget exhausted: credits available: 0",
    "rate limited (tokens available: 0)",
    "GPU slots available: 0, retry later",
    "quota reached; capacity available: none",
    "failed to place the order: payment declined",
    "no agent has been contacted",
    "no agent has responded yet; the task timed out",
    "nobody approved the task",
    "no one could be reached",
    "no agents were contacted, the budget is exhausted",
    "the principal has no agents of its own on the allow-list and no budget",
    "scheduling failed: 3 agents available, but the principal's budget is exhausted",
    "scheduling failed: budget exhausted",
    "schedule failed validation: deadline in the past",
    "3 agents available, but no budget for agents.",
    "4 eligible agents, but the principal's quota allows 0 agents.",
    "rate limited; no more agents, retry later",
    "principal quota reached: 0 agents",
    "policy denies tasks for principals with no agents",
    "no one can approve this budget",
    "nobody can exceed the budget",
    "no one is available to approve the spend",
    "no agent has the requested budget left",
    "0/3 retries left; the task timed out",
    "there is no agent that could be reached before the deadline",
    "no worker was contacted; the task was cancelled",
    # what the phrasings above must not catch (a review of them)
    "fallback: no agent; task timed out after 30s",
    "no agent has the clearance to approve this budget",
    "no agent has the capability to respond in time; task cancelled",
    "no agent has tools configured; deferred",
    "0 of 3 retries eligible",
    "0/5 approvals eligible",
    "escalation target: no agent",
    "owner: no agent",
    "note: no runner",
    "",
    "no",
]


@pytest.mark.parametrize("reason", CLAIMS)
def test_a_reason_that_says_no_agent_was_eligible_claims_it(reason):
    assert claims_no_eligible_agent({"reason": reason})


@pytest.mark.parametrize("reason", NOT_CLAIMS)
def test_a_reason_that_names_another_obstacle_claims_nothing(reason):
    assert not claims_no_eligible_agent({"reason": reason})


def test_the_tables_are_large_enough_to_mean_something():
    assert len(CLAIMS) >= 40 and len(NOT_CLAIMS) >= 40


def test_code_unschedulable_claims_whatever_the_reason_says():
    assert claims_no_eligible_agent({"code": "unschedulable", "reason": "budget exhausted"})
    assert claims_no_eligible_agent({"code": "unschedulable"})


@pytest.mark.parametrize("reason", [None, 3, ["no eligible agent"], {"x": 1}])
def test_a_reason_that_is_not_text_claims_nothing(reason):
    assert not claims_no_eligible_agent({"reason": reason})


def test_a_predicate_named_in_a_claiming_reason_satisfies_the_rule():
    assert names_a_predicate("no eligible agent: capability:order.investigate/2 failed by summariser")
    assert not names_a_predicate("Could not find an eligible agent for this task")


def _rejection(reason):
    return [{"seq": 1, "kind": "task.submitted", "content": {"requirements": {}}},
            {"seq": 2, "kind": "task.rejected", "content": {"reason": reason}}]


@pytest.mark.parametrize("reason", CLAIMS[:10])
def test_a_claiming_reason_without_a_predicate_is_E_REJECTION_REASON(reason):
    assert [(f.code, f.seq) for f in verify(_rejection(reason))] == [("E_REJECTION_REASON", 2)]


@pytest.mark.parametrize("reason", NOT_CLAIMS[:10])
def test_a_reason_that_claims_nothing_is_not_held_to_the_rule(reason):
    assert verify(_rejection(reason)) == []


# -- a §5 predicate inside free text ----------------------------------------------------------------

@pytest.mark.parametrize("reason", [
    "no eligible agent: clearance:orders.read failed by b", "failed tool:mcp:github/create_issue, by a",
    "failed residency:eu; by a", "agentRef:order-analyst failed", "anti-affinity:summariser",
    "model.latency_class:batch failed by 3", "capability:order.investigate/0", "capability:a.b-c/10 failed",
    "(tool:x)", "\tclearance:a.b"])
def test_every_kind_of_predicate_is_found_inside_a_reason(reason):
    assert names_a_predicate(reason)


@pytest.mark.parametrize("reason", [
    "xcapability:a.b/1", ".clearance:a.b", "-tool:x", "capability:a.b/01", "capability:A.B/1", "capability:ab/1",
    "clearance:orders", "clearance:Orders.read", "tool:", "tool: x", "residency:", "agentRef:,x", "anti-affinity:;",
    "model.latency_class: batch", "capability:a.b/", "capability:a.b/x", "capability: a.b/1"])
def test_a_string_that_only_looks_like_a_predicate_is_not_one(reason):
    assert not names_a_predicate(reason)


def test_docs_verify_states_the_tables_sizes():
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "verify.md").read_text().split())
    found = re.search(r"holds the reading to (\d+) claiming and (\d+) non-claiming phrasings", text)
    assert found and (int(found.group(1)), int(found.group(2))) == (len(CLAIMS), len(NOT_CLAIMS))


@pytest.mark.parametrize("engine", ["pure", "native"])
@pytest.mark.parametrize("form", ["spec", "compact"])
@pytest.mark.parametrize("requirements", [{"residency": " eu"}, {"residency": ","}, {"tools": [";"]},
                                          {"tools": ["x y"]}, {"agentRef": ","}])
def test_rule_rejection_reason_a_predicate_of_the_task_as_written_is_named(engine, form, requirements):
    # §7 Rejection: the reason names a predicate string of §5; a residency label or tool may hold
    # a space, a comma or a semicolon (§2: opaque strings), and a3fast's own reason names it whole
    import io

    import a3fast
    from a3fast.verify import verify_bytes

    fleet = a3fast.Fleet(engine=engine)
    fleet.add({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []})
    placement = fleet.place(requirements)
    assert not placement.bound
    out = io.BytesIO()
    a3fast.TraceWriter(out, form=form).write(placement)
    assert [f.code for f in verify_bytes(out.getvalue())] == []


@pytest.mark.parametrize("engine", ["pure", "native"])
@pytest.mark.parametrize("form", ["spec", "compact"])
def test_rule_rejection_reason_a_task_asking_nothing_of_an_empty_fleet_has_no_predicate_to_name(engine, form):
    import io

    import a3fast
    from a3fast.verify import verify_bytes

    placement = a3fast.Fleet(engine=engine).place({})
    out = io.BytesIO()
    a3fast.TraceWriter(out, form=form).write(placement)
    assert [f.code for f in verify_bytes(out.getvalue())] == []
    # with a candidate, a task asking nothing has every agent eligible: a claim of none is held
    # to the rule (it can name no predicate, because it is false)
    claim = [{"seq": 1, "kind": "task.submitted", "content": {"requirements": {}}},
             {"seq": 2, "kind": "task.rejected", "content": {"reason": "no eligible agent", "candidates": ["a"]}}]
    assert [f.code for f in verify(claim)] == ["E_REJECTION_REASON"]
