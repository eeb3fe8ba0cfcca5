"""Random fleets and tasks for the property tests (hypothesis), shared by every suite that needs them.

Names include ones JSON must escape and ones that sort differently in UTF-8 and UTF-16; tools hold
':' and '/'; agents may lack residency, model or tools; tasks may name or exclude agents, known or not.
"""
from __future__ import annotations

from hypothesis import strategies as st

# Names that JSON must escape, that sort differently in UTF-8 and UTF-16, and plain ones.
NAMES = ["a", "b", "agent-1", 'say "hi"', "back\\slash", "é", "\uff5a", "\U0001F600", "z"]
CAPS = ["a.x", "a.y", "b.x"]
CLEARANCES = ["r.read", "r.write", "s.read"]
TOOLS = ["plain", "mcp:github/create_issue", "a/b:c"]
LABELS = ["eu", "us", "eu:west"]
CEILINGS = ["0", "0.1", "0.75", "1", "2.5", "0.333", "10"]
SESSIONS = ["s1", "s2"]

capability = st.builds(lambda n, v: {"name": n, "version": v}, st.sampled_from(CAPS), st.integers(1, 2))
declared_capability = st.builds(lambda c, e: {**c, "evaluation": "probe"} if e else c,
                                capability, st.booleans())


@st.composite
def declarations(draw, name=None):
    doc = {"v": "1.0",
           "agent": {"name": name or draw(st.sampled_from(NAMES)), "namespace": "ns"},
           "capabilities": draw(st.lists(declared_capability, max_size=3)),
           "clearances": draw(st.lists(st.sampled_from(CLEARANCES), max_size=3))}
    if draw(st.booleans()):
        doc["tools"] = draw(st.lists(st.sampled_from(TOOLS), max_size=3))
    if draw(st.booleans()):
        doc["residency"] = draw(st.lists(st.sampled_from(LABELS), max_size=2))
    if draw(st.booleans()):
        model = {"latency_class": draw(st.sampled_from(["interactive", "batch"]))}
        if draw(st.booleans()):
            model["cost_ceiling_usd"] = draw(st.sampled_from(CEILINGS))
        doc["model"] = model
    return doc


@st.composite
def requirements(draw):
    doc = {"capabilities": draw(st.lists(capability, max_size=2)),
           "clearances": draw(st.lists(st.sampled_from(CLEARANCES), max_size=2)),
           "tools": draw(st.lists(st.sampled_from(TOOLS), max_size=1))}
    if draw(st.booleans()):
        doc["residency"] = draw(st.sampled_from(LABELS))
    if draw(st.integers(0, 2)) == 0:
        doc["model"] = {"latency_class": draw(st.sampled_from(["interactive", "batch"]))}
    if draw(st.integers(0, 4)) == 0:
        doc["agentRef"] = draw(st.sampled_from(NAMES + ["stranger"]))
    if draw(st.integers(0, 3)) == 0:
        doc["exclude"] = draw(st.lists(st.sampled_from(NAMES + ["stranger"]), max_size=2))
    if draw(st.integers(0, 2)) == 0:
        doc["session"] = draw(st.sampled_from(SESSIONS))
    return doc
