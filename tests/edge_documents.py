"""Documents on the edges of each rule of §2–§4, shared by the suites that hold two readers to
each other (the parser's fast and careful readings, the compiled JSON Lines reader): full documents,
each of their values replaced by each edge value (`variants`), and valid documents damaged at random
(`damaged`, a Hypothesis strategy)."""
from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

# Values that sit on the edges of each rule: latency classes and near misses, identifiers and near
# misses, versions out of range, texts with control characters or too long, decimals and not.
EDGE_STRINGS = ["", "interactive", "batch", "Interactive", "fast", "1.0", "1.2.3", "2.0", "1", "a.b",
                "A.B", "a", "a.b-c", "a-b.c", "eu", "tab\there", "nul\x00", "del\x7f", "x" * 1025,
                "x" * 1024, "0.75", "-1", "1e3", ".5", "caf\u00e9.x", "a.b\n"]
EDGE_NUMBERS = [0, 1, -1, 2**63 - 1, 2**63, 1.0, 2.5, True, False]
KEYS = ["v", "agent", "name", "namespace", "capabilities", "clearances", "tools", "residency", "model",
        "latency_class", "cost_ceiling_usd", "evaluation", "version", "session", "agentRef", "exclude",
        "kind", "unknown"]
scalar = st.none() | st.sampled_from(EDGE_STRINGS) | st.sampled_from(EDGE_NUMBERS) | st.text(max_size=6)
junk = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3), max_leaves=6)


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += paths(item, prefix + (i,))
    return out


@st.composite
def damaged(draw, documents):
    """A valid document with one to three of its values replaced, removed, or joined by new keys."""
    doc = copy.deepcopy(draw(documents))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from([p for p in paths(doc) if p]))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        op = draw(st.sampled_from(["replace", "delete", "add"]))
        if op == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif op == "add" and isinstance(parent[path[-1]], dict):
            parent[path[-1]][draw(st.sampled_from(KEYS))] = draw(junk)
        else:
            parent[path[-1]] = draw(junk)
    if draw(st.booleans()):
        doc[draw(st.sampled_from(KEYS))] = draw(junk)
    return doc


# Full documents: every member the rules read, each valid.
FULL_REQUIREMENTS = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "clearances": ["r.read"],
                     "tools": ["plain"], "residency": "eu", "model": {"latency_class": "batch"},
                     "session": "s1", "agentRef": "a", "exclude": ["b"], "kind": "k"}
FULL_DECLARATION = {"v": "1.0", "agent": {"name": "a", "namespace": "ns"},
                    "capabilities": [{"name": "a.x", "version": 1, "evaluation": {"score": 0.9}}],
                    "clearances": ["r.read"], "tools": ["plain"], "residency": ["eu"],
                    "model": {"latency_class": "batch", "cost_ceiling_usd": "0.75"}}
EDGE_VALUES = [None, [], {}, [None], ["a.b"], ["x" * 1025], ["nul\x00"], {"name": "a.b", "version": 1},
               *EDGE_STRINGS, *EDGE_NUMBERS]


def variants(doc: dict):
    """The document with each value (at any depth) replaced by each edge value, or removed, and
    with each missing key added at each level, holding each edge value."""
    for path in paths(doc):
        if not path:
            continue
        for value in [*EDGE_VALUES, "remove"]:
            variant = copy.deepcopy(doc)
            parent = variant
            for key in path[:-1]:
                parent = parent[key]
            if value == "remove":
                if isinstance(parent, dict):
                    del parent[path[-1]]
                else:
                    parent.pop(path[-1])
            else:
                parent[path[-1]] = value
            yield f"{path} = {value!r}"[:80], variant
    for path in paths(doc):
        target = doc
        for key in path:
            target = target[key]
        if isinstance(target, dict):
            for key in KEYS:
                if key not in target:
                    for value in EDGE_VALUES:
                        variant = copy.deepcopy(doc)
                        holder = variant
                        for step in path:
                            holder = holder[step]
                        holder[key] = value
                        yield f"{path}+{key} = {value!r}"[:80], variant
