"""Whether a task.rejected "claims no eligible agent" (§7 Rejection; docs/design.md, reading 6), and whether
its reason names a §5 predicate.

The reading, in one paragraph (docs/verify.md says the same): a rejection claims no eligible agent
when its `code` is "unschedulable", or when its `reason` (read case-blind, whitespace collapsed)
says one of four things. (1) *The task cannot be scheduled*: "unschedulable", "not schedulable",
"cannot / could not / unable to / failed to … schedule(d)", "… place(d)" the task, nothing named,
on any agent or anywhere (never "place the order").
(2) *An empty set of candidates*: a zero word ("no", "zero", "0", "none of the", "not one", "not a
single", "not any", "without any") followed within three words by "candidate(s)" — a candidate is an agent weighed for eligibility, so
no candidate is no eligible agent; or by "agent(s)" *with an eligibility word* (eligible, suitable,
matching, matched, qualified, capable, compatible, available, satisfying, passing, …) among those
words or within four words after it ("no agent available", "0 eligible agents among 40
candidates", "no agents satisfy …"); agents that can or could do something ("no agent can run
this task", never "could be …"), or that were left ("no agents left", "no candidates remain");
"agents available: 0". (3) *A failed search*: "could not / did not / failed to /
unable to find … agent|candidate", "found no … agent|candidate", "no … agent|candidate … found".
(4) *Every candidate failed*: "every / each / all (of) (the) (N) agent(s)|candidate(s)" followed by
failed, was/were rejected, filtered (out), ineligible, excluded, or did not pass / match / satisfy /
qualify; and "none (was/were) eligible …". A reason that counts agents that were available and
names another obstacle ("3 agents available, but the budget is exhausted"), or says what was not
done to agents ("no agent was contacted"), makes no such claim.

Also read as claims (2): "nobody / no one" who can take (run, handle, ...) the task or is
eligible (qualified, suitable, capable); agents none of which has the (required, requested, needed)
capability, clearance, tool, residency, model, latency class or skill, or the capability or
clearance named by its identifier; agents "that" can take it; none of N agents or candidates ("0/12
agents eligible"); "no agent" after a failed scheduling, placement or assignment ("scheduling
failed: no agent"); "worker", "executor" or "runner" for an agent beside an eligibility word ("no
worker available"); and "qualify" and "fulfil(l)s" among the eligibility words.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

__all__ = ["claims_no_eligible_agent", "names_a_predicate"]

_ELIGIBILITY = (r"(?:eligible|suitable|matching|matched|matches|match|qualified|qualifying|qualifies|qualify|"
                r"fulfil(?:s|led|ling)?|fulfill(?:s|ed|ing)?|"
                r"capable|compatible|available|satisf(?:y|ies|ied|ying)|pass(?:es|ed|ing)?|"
                r"meets?|meeting|fits?|fitting|viable|valid)")
_ZERO = (r"(?:no|zero|0|none\s+of\s+the|none\s+of|not\s+one|not\s+a\s+single|not\s+any|without\s+any|"
         r"without\s+an?)")
_WORD = r"[\w./:-]+"
_AGENT = r"agents?\b"
_CANDIDATE = r"candidates?\b"
_NOUN = r"(?:agents?|candidates?)\b"
#: what a scheduler of agents may call an agent when it says none is available ("no worker available")
_AGENT_LIKE = r"(?:agents?|workers?|executors?|runners?)\b"

_CLAIMS = re.compile("|".join([
    # (1) the task cannot be scheduled (or placed)
    r"\bunschedulable\b",
    r"\bnot\s+schedulable\b",
    r"\b(?:cannot|can't|can\s+not|could\s+not|couldn't|unable\s+to|failed\s+to|fails\s+to|impossible\s+to)"
    r"\s+(?:be\s+)?schedul(?:e|ed|ing)\b",
    # ... placed: the task, or nothing named ("unable to place: no agents"; not "place the order")
    r"\b(?:cannot|can't|can\s+not|could\s+not|couldn't|unable\s+to|failed\s+to|fails\s+to|impossible\s+to)"
    r"\s+(?:be\s+)?plac(?:e|ed|ing)(?:\s*[:;,.]|\s*$|\s+(?:the\s+|this\s+|a\s+)?(?:task|it)\b|"
    r"\s+(?:on|onto|to|with)\s+(?:any|an?|the|one)\b|\s+anywhere\b)",
    # (2) zero ... agent(s) that can or could take it: "no agent can run this task"
    rf"\b{_ZERO}\s+(?:{_WORD}\s+){{0,2}}?{_NOUN}\s+(?:(?:that|which|who)\s+)?(?:can|could|is\s+able\s+to|"
    r"are\s+able\s+to|was\s+able\s+to|were\s+able\s+to)\s+(?!be\b)\w+",
    # (2) nobody can take the task: "nobody can run this task", "no one is eligible"
    r"\b(?:nobody|no\s+one|no-one)\s+(?:can|could|is\s+able\s+to|was\s+able\s+to)\s+"
    r"(?:take|run|handle|accept|serve|execute|perform|process|do|place|schedule)\s+(?:the|this|that|it)\b",
    r"\b(?:nobody|no\s+one|no-one)\s+(?:is|was)\s+(?:eligible|qualified|suitable|capable)\b",
    # (2) zero ... agent(s) that have what the task requires: "no agent has the required capability"
    rf"\b{_ZERO}\s+(?:{_WORD}\s+){{0,2}}?{_AGENT}\s+(?:has|have|had|holds?|held|offers?|provides?|supports?|"
    r"declares?)\s+(?:(?:the|a|an|any|all)\s+)?(?:required|requested|needed|necessary)\s+"
    r"(?:capabilit(?:y|ies)|clearances?|tools?|residency|model|latency\s+class|skills?)\b",
    # (2) ... or the capability or clearance named: "no agent has the capability order.investigate"
    rf"\b{_ZERO}\s+(?:{_WORD}\s+){{0,2}}?{_AGENT}\s+(?:has|have|had|holds?|held|offers?|provides?|supports?|"
    r"declares?)\s+(?:(?:the|a|an|any)\s+)?(?:capability|clearance)\s+[a-z0-9]+(?:\.[a-z0-9-]+)+",
    # (2) zero ... agent(s) left after the filter: "no agents left", "no candidates remain"
    rf"\b{_ZERO}\s+(?:{_WORD}\s+){{0,3}}?{_NOUN}\s+(?:(?:were|was|are|is)\s+)?"
    r"(?:left|remain(?:ed|s|ing)?)\b",
    # (2) an empty set: zero ... candidate(s)
    rf"\b{_ZERO}\s+(?:{_WORD}\s+){{0,3}}?{_CANDIDATE}",
    # (2) zero ... <eligibility> ... agent(s)
    rf"\b{_ZERO}\s+(?:{_WORD}\s+){{0,2}}?{_ELIGIBILITY}\s+(?:{_WORD}\s+){{0,2}}?{_AGENT}",
    # (2) zero ... agent(s) ... <eligibility> within four words ("no worker available" too)
    rf"\b{_ZERO}\s+(?:{_WORD}\s+){{0,3}}?{_AGENT_LIKE}[\s,]+(?:{_WORD}\s+){{0,3}}?{_ELIGIBILITY}\b",
    # (2) none of N: "0/12 agents eligible", "0 of 12 candidates qualify"
    rf"\b0\s*(?:/|of|out\s+of)\s*\d+\s+{_AGENT_LIKE}\s+(?:{_WORD}\s+){{0,1}}?{_ELIGIBILITY}\b",
    rf"\b0\s*(?:/|of|out\s+of)\s*\d+\s+{_CANDIDATE}",
    # (2) a placement that failed for want of an agent: "scheduling failed: no agent"
    r"\b(?:schedul\w*|plac(?:e|ed|ing|ement)|assign\w*|match\w*|dispatch\w*)\s+(?:failed|error)\s*:\s*"
    rf"no\s+{_AGENT_LIKE}\s*(?:[.;,!]|$)",
    # (2) "eligible agents: 0", "eligible: 0/40", "agents available: 0" (never "credits available: 0")
    rf"\b(?:eligible|qualified|suitable|matching|matched|capable|compatible)(?:\s+{_NOUN})?\s*[:=]\s*(?:0|none)\b",
    rf"\b{_ELIGIBILITY}\s+{_NOUN}\s*[:=]\s*(?:0|none)\b",
    rf"\b{_NOUN}\s+{_ELIGIBILITY}\s*[:=]\s*(?:0|none)\b",
    # (3) a failed search
    rf"\b(?:could\s+not|couldn't|cannot|can't|did\s+not|didn't|failed\s+to|unable\s+to|fails\s+to)\s+"
    rf"(?:find|locate|identify)\s+(?:{_WORD}\s+){{0,3}}?{_NOUN}",
    rf"\bfound\s+no\s+(?:{_WORD}\s+){{0,3}}?{_NOUN}",
    rf"\bno\s+(?:{_WORD}\s+){{0,3}}?{_NOUN}\s+(?:(?:was|were|could\s+be)\s+)?found\b",
    # (4) every candidate failed
    rf"\b(?:every|each|all(?:\s+of)?(?:\s+the)?)\s+(?:\d+\s+)?(?:{_WORD}\s+)?{_NOUN}\s+"
    r"(?:(?:was|were|is|are|has\s+been|have\s+been)\s+)?"
    r"(?:failed|fail|fails|rejected|filtered|ineligible|excluded|unsuitable|"
    r"(?:did\s+not|didn't|does\s+not|doesn't|do\s+not|don't)\s+(?:pass|match|satisfy|qualify|meet))\b",
    rf"\bnone\s+(?:(?:was|were|is|are)\s+)?(?:{_ELIGIBILITY})\b",
]), re.IGNORECASE)

#: A §5 predicate string inside free text.
_PREDICATE_IN_TEXT = re.compile(
    r"(?<![\w.-])(?:"
    r"capability:[a-z0-9]+(?:\.[a-z0-9-]+)+/(?:0|[1-9][0-9]*)(?![0-9])"
    r"|clearance:[a-z0-9]+(?:\.[a-z0-9-]+)+"
    r"|(?:tool|residency|agentRef|anti-affinity):[^\s,;]+"
    r"|model\.latency_class:[^\s,;]+)")
_SPACE = re.compile(r"\s+")


def claims_no_eligible_agent(content: Mapping[str, Any]) -> bool:
    """Whether a task.rejected says no agent was eligible (the reading above)."""
    if content.get("code") == "unschedulable":
        return True
    reason = content.get("reason")
    if not isinstance(reason, str):
        return False
    return _CLAIMS.search(_SPACE.sub(" ", reason)) is not None


def names_a_predicate(reason: Any) -> bool:
    """Whether a reason contains at least one predicate string of §5."""
    return isinstance(reason, str) and _PREDICATE_IN_TEXT.search(reason) is not None
