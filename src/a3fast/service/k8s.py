"""Kubernetes scheduler extender (wire types of k8s.io/kube-scheduler/extender/v1).

The Go types carry no JSON tags, so their keys are the Go field names: ExtenderArgs {Pod, Nodes,
NodeNames}, ExtenderFilterResult {Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error},
HostPriority {Host, Score}, ExtenderBindingArgs {PodName, PodNamespace, PodUID, Node},
ExtenderBindingResult {Error}. The Pod and Node objects inside are core/v1 objects (lower-case keys).

A pod takes part when it carries the annotation `a3.dev/requirements` (requirements JSON); others
pass through untouched. With `Nodes` (nodeCacheCapable: false) each node's declaration is its
annotation `a3.dev/declaration`; with `NodeNames` (nodeCacheCapable: true) a node is the served
fleet's agent of that name. A node failing an A3 predicate is FailedAndUnresolvable (preemption
cannot change what an agent declares), with the predicate as its message. Every filter decision is
a placement in the service's trace, with the pod's UID as the task id.
"""
from __future__ import annotations

from typing import Any

import orjson

from ..errors import A3Error, SchemaError
from ..fleet import Fleet
from ..schema import parse_declaration, parse_requirements
from . import metrics
from .problems import check_bounds
from .state import ServedFleet, ServiceState

__all__ = ["REQUIREMENTS_ANNOTATION", "DECLARATION_ANNOTATION", "MAX_EXTENDER_PRIORITY", "Extender"]

REQUIREMENTS_ANNOTATION = "a3.dev/requirements"
DECLARATION_ANNOTATION = "a3.dev/declaration"
#: extenderv1.MaxExtenderPriority: kube-scheduler scales an extender's score by MaxNodeScore / 10.
MAX_EXTENDER_PRIORITY = 10
NOT_IN_FLEET = "not an agent of the a3fast fleet"


class ExtenderError(Exception):
    """A request the extender cannot act on: answered in the result's Error field."""


def _annotations(obj: Any) -> dict:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    return notes if isinstance(notes, dict) else {}


def _meta(obj: Any, key: str) -> Any:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta.get(key) if isinstance(meta, dict) else None


def pod_requirements(pod: Any):
    """The pod's parsed requirements, or None when it does not take part."""
    text = _annotations(pod).get(REQUIREMENTS_ANNOTATION)
    if text is None:
        return None
    if not isinstance(text, str):
        raise ExtenderError(f"pod annotation {REQUIREMENTS_ANNOTATION} must be a JSON string")
    try:
        doc = orjson.loads(text)
        check_bounds(doc)
        return parse_requirements(doc)
    except orjson.JSONDecodeError as exc:
        raise ExtenderError(f"pod annotation {REQUIREMENTS_ANNOTATION} is not JSON: {exc}") from None
    except SchemaError as exc:
        raise ExtenderError(f"pod annotation {REQUIREMENTS_ANNOTATION}: " + "; ".join(exc.lines())) from None


class Extender:
    """The three extender verbs over one service state."""

    def __init__(self, state: ServiceState):
        self.state = state

    def _args(self, body: Any) -> tuple[Any, list | None, list | None]:
        if not isinstance(body, dict):
            raise ExtenderError("expected ExtenderArgs, a JSON object")
        pod = body.get("Pod")
        if not isinstance(pod, dict):
            raise ExtenderError("ExtenderArgs.Pod is missing")
        nodes = body.get("Nodes")
        items = None
        if nodes is not None:
            items = nodes.get("items") if isinstance(nodes, dict) else None
            if not isinstance(items, list):
                raise ExtenderError("ExtenderArgs.Nodes must be a NodeList with items")
        names = body.get("NodeNames")
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise ExtenderError("ExtenderArgs.NodeNames must be a list of strings")
        if items is None and names is None:
            raise ExtenderError("ExtenderArgs has neither Nodes nor NodeNames")
        return pod, items, names

    def _node_fleet(self, items: list) -> tuple[Fleet, dict[str, str]]:
        """A fleet of the nodes' declarations; nodes without a usable one -> failure message."""
        fleet = Fleet(self.state.engine)
        unusable: dict[str, str] = {}
        for node in items:
            name = _meta(node, "name")
            if not isinstance(name, str):
                raise ExtenderError("a node in ExtenderArgs.Nodes has no metadata.name")
            text = _annotations(node).get(DECLARATION_ANNOTATION)
            if text is None:
                unusable[name] = f"node has no {DECLARATION_ANNOTATION} annotation"
                continue
            try:
                doc = orjson.loads(text) if isinstance(text, str) else None
                if not isinstance(doc, dict):
                    raise ValueError("not a JSON object")
                check_bounds(doc)
                decl = parse_declaration(doc)
                if decl.agent.name != name:
                    unusable[name] = f"{DECLARATION_ANNOTATION} declares agent {decl.agent.name!r}, not {name!r}"
                    continue
                fleet.add(decl)
            except (ValueError, A3Error) as exc:
                first = exc.lines()[0] if isinstance(exc, SchemaError) else str(exc)
                unusable[name] = f"{DECLARATION_ANNOTATION} is not a valid declaration: {first}"
        return fleet, unusable

    def _decide(self, body: Any):
        """(pod, items, names, placement or None, unusable) — the placement is recorded in the trace."""
        pod, items, names = self._args(body)
        requirements = pod_requirements(pod)
        if requirements is None:
            return pod, items, names, None, {}
        uid = _meta(pod, "uid")
        task = {"id": uid if isinstance(uid, str) else None,
                "pod": {"namespace": _meta(pod, "namespace"), "name": _meta(pod, "name")}}
        if items is not None:
            fleet, unusable = self._node_fleet(items)
            p, _ = self.state.place(requirements, task=task, fleet=fleet)
        else:
            unusable = {}
            p, _ = self.state.place(requirements, task=task, compact=True)
        metrics.count_placement(p)
        return pod, items, names, p, unusable

    async def filter(self, body: Any) -> dict[str, Any]:
        try:
            _, items, names, p, unusable = self._decide(body)
        except ExtenderError as exc:
            return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                    "Error": str(exc)}
        await self.state.durable()
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = dict(unusable)
        if p is not None:
            eligible = set(p.eligible)
            first_failed = p.first_failed() if len(eligible) < p.explanation.candidates_count else {}
            candidates = [_meta(n, "name") for n in items] if items is not None else names
            for name in candidates:
                if name in eligible or name in unresolvable:
                    continue
                predicate = first_failed.get(name)
                if predicate is None:
                    failed[name] = NOT_IN_FLEET
                else:
                    unresolvable[name] = predicate
        passed = lambda name: name not in failed and name not in unresolvable  # noqa: E731
        result: dict[str, Any] = {"FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
        if items is not None:
            result["Nodes"] = {"metadata": {}, "items": [n for n in items if passed(_meta(n, "name"))]}
            result["NodeNames"] = None
        else:
            result["Nodes"] = None
            result["NodeNames"] = [n for n in names if passed(n)]
        return result

    async def prioritize(self, body: Any) -> list[dict[str, Any]]:
        """HostPriorityList: the A3 score total of each eligible node scaled to 0..10; ineligible
        nodes score 0; a pod without requirements scores every node 0 (no preference)."""
        try:
            pod, items, names = self._args(body)
            requirements = pod_requirements(pod)
        except ExtenderError:
            raise
        hosts = [_meta(n, "name") for n in items] if items is not None else names
        assert hosts is not None  # _args refuses a body with neither
        if requirements is None:
            return [{"Host": h, "Score": 0} for h in hosts]
        fleet: ServedFleet = self._node_fleet(items)[0] if items is not None else self.state.fleet
        p = fleet.place(requirements, remember_session=False)
        totals = _totals(p)
        return [{"Host": h, "Score": int(round(totals.get(h, 0.0) * MAX_EXTENDER_PRIORITY))} for h in hosts]

    async def bind(self, body: Any) -> dict[str, Any]:
        """ExtenderBindingResult. a3fast does not bind pods itself (the scheduler's default binder
        does); a bind request naming a node that is not a live agent is refused in Error, and the
        pod's session (when its requirements name one) is held by the agent."""
        if not isinstance(body, dict):
            return {"Error": "expected ExtenderBindingArgs, a JSON object"}
        missing = [k for k in ("PodName", "PodNamespace", "PodUID", "Node") if not isinstance(body.get(k), str)]
        if missing:
            return {"Error": "ExtenderBindingArgs needs " + ", ".join(missing)}
        node = body["Node"]
        if self.state.fleet.get(node) is None:
            return {"Error": f"node {node!r} is {NOT_IN_FLEET}"}
        return {"Error": ""}


def _totals(p) -> dict[str, float]:
    if not p.bound:
        return {}
    scores = p.scheduling["scores"] if len(p.eligible) < 64 else None
    if scores is not None:
        return {name: entry["total"] for name, entry in scores.items()}
    return dict(zip(p.eligible, p.scores.total))
