"""kube-scheduler's HTTP extender client, as pkg/scheduler/extender.go of the kubernetes repository
behaves, for tests.

- URL: strings.TrimRight(urlPrefix, "/") + "/" + verb; POST with Content-Type: application/json.
- Body: json.Marshal of extenderv1.ExtenderArgs {Pod, Nodes, NodeNames}: the Go field names, both
  pointers always present (null when unset); Nodes is a v1.NodeList {"metadata": {}, "items": [...]}.
- Answer: a status other than 200 is an error; the body is decoded with encoding/json into
  extenderv1.ExtenderFilterResult or HostPriorityList (`go_decode`); Filter then fails on a
  non-empty Error and, with nodeCacheCapable, on a returned name that was not sent.

Pods and Nodes are the official client's models (kubernetes.client), serialised as the API server
serialises them (ApiClient.sanitize_for_serialization: camelCase keys, no nulls).
"""
from __future__ import annotations

import json
from typing import Any

import httpx
from kubernetes.client import ApiClient

_API = ApiClient()


class ExtenderFailed(Exception):
    """What kube-scheduler would log as the extender's error for this attempt."""


def serialise(model) -> dict[str, Any]:
    return _API.sanitize_for_serialization(model)


# -- Go's encoding/json into the extender/v1 types --------------------------------------------------
def _field(obj: dict[str, Any], name: str) -> tuple[bool, Any]:
    """encoding/json's field lookup: an exact key, else a case-insensitive one (the last such key
    wins, as each later duplicate overwrites the field)."""
    found, value = False, None
    for key, item in obj.items():
        if key.lower() == name.lower():
            found, value = True, item
    if name in obj:
        return True, obj[name]
    return found, value


def _string(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ExtenderFailed(f"json: cannot unmarshal {type(value).__name__} into Go value of type string ({where})")
    return value


def _int64(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not -2**63 <= value < 2**63:
        raise ExtenderFailed(f"json: cannot unmarshal {value!r} into Go value of type int64 ({where})")
    return value


def _string_map(value: Any, where: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ExtenderFailed(f"json: cannot unmarshal into Go value of type FailedNodesMap ({where})")
    return {k: _string(v, f"{where}[{k}]") for k, v in value.items()}


def go_decode_filter_result(data: bytes) -> dict[str, Any]:
    """extenderv1.ExtenderFilterResult as Go would hold it: None for nil pointers and maps."""
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ExtenderFailed("json: cannot unmarshal into Go value of type ExtenderFilterResult")
    _, nodes = _field(doc, "Nodes")
    if nodes is not None:
        if not isinstance(nodes, dict):
            raise ExtenderFailed("json: cannot unmarshal into Go value of type v1.NodeList")
        items = nodes.get("items") or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ExtenderFailed("json: cannot unmarshal into Go struct field NodeList.items")
        nodes = {"items": items}
    _, names = _field(doc, "NodeNames")
    if names is not None:
        if not isinstance(names, list):
            raise ExtenderFailed("json: cannot unmarshal into Go value of type []string")
        names = [_string(n, "NodeNames") for n in names]
    return {"Nodes": nodes, "NodeNames": names,
            "FailedNodes": _string_map(_field(doc, "FailedNodes")[1], "FailedNodes"),
            "FailedAndUnresolvableNodes": _string_map(_field(doc, "FailedAndUnresolvableNodes")[1],
                                                      "FailedAndUnresolvableNodes"),
            "Error": _string(_field(doc, "Error")[1], "Error")}


def go_decode_priorities(data: bytes) -> list[tuple[str, int]]:
    doc = json.loads(data)
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise ExtenderFailed("json: cannot unmarshal into Go value of type HostPriorityList")
    out = []
    for k, item in enumerate(doc):
        if not isinstance(item, dict):
            raise ExtenderFailed(f"json: cannot unmarshal into Go value of type HostPriority ([{k}])")
        out.append((_string(_field(item, "Host")[1], f"[{k}].Host"), _int64(_field(item, "Score")[1], f"[{k}].Score")))
    return out


class ExtenderClient:
    """HTTPExtender: Filter and Prioritize over one urlPrefix."""

    def __init__(self, url_prefix: str, *, node_cache_capable: bool, filter_verb: str = "filter",
                 prioritize_verb: str = "prioritize", client: httpx.Client | None = None):
        self.url_prefix = url_prefix
        self.node_cache_capable = node_cache_capable
        self.filter_verb = filter_verb
        self.prioritize_verb = prioritize_verb
        self.client = client or httpx.Client(timeout=30.0)
        self.sent: list[tuple[str, bytes]] = []

    def _args(self, pod: dict[str, Any], nodes: list[dict[str, Any]]) -> bytes:
        if self.node_cache_capable:
            args = {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
        else:
            args = {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
        return json.dumps(args, separators=(",", ":")).encode()

    def send(self, verb: str, body: bytes) -> bytes:
        url = self.url_prefix.rstrip("/") + "/" + verb
        self.sent.append((url, body))
        r = self.client.post(url, content=body, headers={"Content-Type": "application/json"})
        if r.status_code != 200:
            raise ExtenderFailed(f"failed {verb} with extender at URL {url}, code {r.status_code}")
        return r.content

    def filter(self, pod: dict[str, Any], nodes: list[dict[str, Any]]):
        """(passed nodes, FailedNodes, FailedAndUnresolvableNodes) or ExtenderFailed."""
        by_name = {n["metadata"]["name"]: n for n in nodes}
        result = go_decode_filter_result(self.send(self.filter_verb, self._args(pod, nodes)))
        if result["Error"] != "":
            raise ExtenderFailed(result["Error"])
        if self.node_cache_capable and result["NodeNames"] is not None:
            passed = []
            for name in result["NodeNames"]:
                if name not in by_name:
                    raise ExtenderFailed(f"extender {self.url_prefix!r} claims a filtered node {name!r} "
                                         f"which is not found in the input node list")
                passed.append(by_name[name])
        elif result["Nodes"] is not None:
            passed = result["Nodes"]["items"]
        else:
            passed = []
        return passed, result["FailedNodes"] or {}, result["FailedAndUnresolvableNodes"] or {}

    def prioritize(self, pod: dict[str, Any], nodes: list[dict[str, Any]]) -> list[tuple[str, int]]:
        return go_decode_priorities(self.send(self.prioritize_verb, self._args(pod, nodes)))
