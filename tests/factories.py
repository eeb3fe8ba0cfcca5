"""Builders of the documents, fleets and traces tests place on, so that a test states only what its
rule is about.

    declaration("a", capabilities=[("x.y", 1)], clearances=["r.read"], residency=["eu"])
    requirements(capabilities=["x.y/1"], residency="eu")
    fleet_of(engine, [declaration("a"), declaration("b")])
    spec_records(placements)                       # the trace records of placements, as dicts

Documents are plain dicts, written with their members in the order the spec's examples use (`v`,
`agent`, `capabilities`, `clearances`, then the rest in the order given, `model` last when built
from `latency`/`cost`), so a record that carries one is the same JSON a hand-written dict gives.
Every call returns a fresh dict: a test may change what it gets without touching another test.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import orjson

from a3fast import Fleet
from a3fast.record.compact import Encoder
from a3fast.record.write import placement_records

__all__ = ["capabilities", "declaration", "requirements", "fleet_of", "spec_records", "compact_records",
           "section_3_declaration", "section_10_order_analyst", "section_10_summariser",
           "section_10_requirements", "section_10_fleet"]

def capabilities(specs: Iterable[Any], evaluated: Iterable[str] = (),
                 evaluation: Any = "probe") -> list[dict[str, Any]]:
    """§3/§4 capability objects from ("name", version), "name/version" or the object itself; those
    named in `evaluated` carry `evaluation`."""
    evaluated = set(evaluated)
    out = []
    for spec in specs:
        if isinstance(spec, Mapping):
            out.append(dict(spec))
            continue
        if isinstance(spec, str):
            name, _, version = spec.rpartition("/")
            spec = (name, int(version))
        name, version = spec
        entry = {"name": name, "version": version}
        if name in evaluated:
            entry["evaluation"] = evaluation
        out.append(entry)
    return out


_capabilities = capabilities  # the builders below take a parameter of the same name


def declaration(name: str, *, namespace: str = "ns", capabilities: Iterable[Any] = (),
                clearances: Iterable[str] = (), evaluated: Iterable[str] = (), evaluation: Any = "probe",
                latency: str | None = None, cost: str | None = None, **fields: Any) -> dict[str, Any]:
    """A §3 declaration of agent `name`. `fields` are the other members as they are (`residency`,
    `tools`, `model`, or anything a test needs); `latency` and `cost` build `model`."""
    doc: dict[str, Any] = {"v": "1.0", "agent": {"name": name, "namespace": namespace},
                           "capabilities": _capabilities(capabilities, evaluated, evaluation),
                           "clearances": list(clearances), **fields}
    if latency is not None or cost is not None:
        model = dict(doc.get("model") or {})
        if latency is not None:
            model["latency_class"] = latency
        if cost is not None:
            model["cost_ceiling_usd"] = cost
        doc["model"] = model
    return doc


def requirements(*, capabilities: Iterable[Any] = (), clearances: Iterable[str] = (), v: str | None = "1.0",
                 **fields: Any) -> dict[str, Any]:
    """A §4 requirements document: `v` (None leaves it out), the capabilities and clearances when
    there are any, then `fields` as they are (`residency`, `tools`, `agentRef`, `exclude`, …)."""
    doc: dict[str, Any] = {} if v is None else {"v": v}
    caps = _capabilities(capabilities)
    if caps:
        doc["capabilities"] = caps
    clearances = list(clearances)
    if clearances:
        doc["clearances"] = clearances
    doc.update(fields)
    return doc


def fleet_of(engine: str | None, declarations: Iterable[Mapping[str, Any]] = (), *, batch: bool = False,
          **options: Any) -> Fleet:
    """A Fleet on `engine` holding `declarations` in order: added one at a time (`Fleet.add`), or
    in one `Fleet.extend` with `batch=True` — the two paths build the index differently."""
    built = Fleet(engine=engine, **options)
    if batch:
        built.extend(declarations)
    else:
        for doc in declarations:
            built.add(doc)
    return built


def spec_records(placements: Iterable[Any], seq: int = 1) -> list[dict[str, Any]]:
    """The trace records of `placements` in spec form, as dicts, numbered from `seq`."""
    out = []
    for p in placements:
        for kind, content in placement_records(p):
            out.append({"seq": seq, "kind": kind, "content": orjson.loads(content)})
            seq += 1
    return out


def compact_records(placements: Iterable[Any], seq: int = 1,
                    encoder: Encoder | None = None) -> list[dict[str, Any]]:
    """The trace records of `placements` in compact form, as dicts: one Encoder (a new one unless
    `encoder` continues a trace) writes them all."""
    encoder, out = encoder or Encoder(), []
    for p in placements:
        for kind, content in encoder.encode_placement(seq, p):
            out.append({"seq": seq, "kind": kind, "content": orjson.loads(content)})
            seq += 1
    return out


# -- the spec's own examples ------------------------------------------------------------------------

def section_3_declaration() -> dict[str, Any]:
    """§3's example declaration: order-analyst, two capabilities, a model."""
    return declaration("order-analyst", namespace="support",
                       capabilities=[("order.investigate", 2), ("case.summarise", 1)],
                       clearances=["orders.read", "customers.read"], residency=["eu"],
                       latency="interactive", cost="0.75")


def section_10_order_analyst(name: str = "order-analyst", namespace: str = "support",
                             **replaced: Any) -> dict[str, Any]:
    """The declaration in §10's task.bound, under another name if given, with the members in
    `replaced` put in place of its own (a new member goes last)."""
    doc = declaration(name, namespace=namespace, capabilities=[("order.investigate", 2)],
                      clearances=["orders.read", "customers.read"], residency=["eu"])
    return {**doc, **replaced}


def section_10_summariser() -> dict[str, Any]:
    """§10's other candidate, which lacks order.investigate/2."""
    return declaration("summariser", namespace="support", capabilities=[("case.summarise", 1)],
                       clearances=["orders.read"], residency=["eu"])


def section_10_requirements() -> dict[str, Any]:
    """The requirements of §10's task.submitted."""
    return requirements(capabilities=[("order.investigate", 2)], clearances=["orders.read"], residency="eu")


def section_10_fleet(engine: str | None, analyst: Mapping[str, Any] | None = None) -> Fleet:
    """§10's two candidates, order-analyst first (`analyst` replaces its declaration)."""
    return fleet_of(engine, [analyst if analyst is not None else section_10_order_analyst(),
                          section_10_summariser()])
