"""Kubernetes manifests -> A3 declarations (A3 §1: "a Kubernetes manifest can carry one").

A manifest carries a declaration in one of two ways:

- the annotation `a3.dev/declaration` on any object with `metadata` (a Deployment, a Service, a
  kagent Agent, ...), whose value is the declaration as JSON;
- a custom resource `kind: AgentDeclaration` (group `a3.dev`, see `crd.py`) whose `spec` is the
  declaration.

Either way the agent's name and namespace, when the declaration leaves them out, are the object's
`metadata.name` and `metadata.namespace`; a manifest applied with `kubectl -n` often has no
namespace, and then the caller's is used (and reported as supplied). Multi-document YAML and
`List` kinds (`kind: List`, `kind: DeploymentList`, ... with `items`) are read; every value is
copied to plain JSON under a budget first (`sources.to_json`), since manifests are hostile input.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import SchemaError, describe, json_path
from ..schema import loads
from .collect import DeclarationSet, ImportResult
from .crd import ANNOTATION, GROUP, KIND, VERSIONS
from .report import ImportReport, under
from .sources import Document, to_json
from .supply import Supplied

__all__ = ["declarations_from_manifests", "fill_agent", "MAX_LIST_DEPTH"]

#: Lists inside lists are followed this deep (a YAML alias can make a List contain itself).
MAX_LIST_DEPTH = 8


def fill_agent(decl: dict[str, Any], metadata: Mapping[str, Any],
               namespace: str | None) -> tuple[dict[str, Any], list[str], list[str]]:
    """`decl` with its agent's missing name/namespace taken from `metadata` (or the caller's
    `namespace`). Returns (declaration, fields filled from metadata, fields supplied by the caller).
    A present value is never overridden, and an `agent` that is not an object is left for the
    parser to report."""
    agent = decl.get("agent", {})
    if not isinstance(agent, dict):
        return decl, [], []
    agent = dict(agent)
    derived, supplied = [], []
    if "name" not in agent and isinstance(metadata.get("name"), str):
        agent["name"] = metadata["name"]
        derived.append("agent.name")
    if "namespace" not in agent:
        if isinstance(metadata.get("namespace"), str):
            agent["namespace"] = metadata["namespace"]
            derived.append("agent.namespace")
        elif namespace is not None:
            agent["namespace"] = namespace
            supplied.append("namespace")
    ordered = {"v": decl["v"]} if "v" in decl else {}
    ordered["agent"] = agent
    ordered.update((key, value) for key, value in decl.items() if key not in ("v", "agent"))
    return ordered, derived, supplied


def declarations_from_manifests(documents: Iterable[Document], supplied: Supplied | None = None,
                                report: ImportReport | None = None) -> ImportResult:
    """Declarations carried by the objects of Kubernetes manifests (module doc). Objects that carry
    none are counted, not reported one by one; a declaration that does not parse is skipped with
    the problems at their paths in the manifest."""
    supplied = (supplied or Supplied()).check()
    report = report or ImportReport("k8s")
    out = DeclarationSet(report)
    for doc in documents:
        report.read(doc.source)
        for obj, path in _objects(doc.value, doc.path, doc.source, report, 0, set()):
            _read_object(obj, path, doc.source, supplied, out, report)
    declarations = out.declarations()
    return ImportResult(declarations, report, usable=bool(declarations))


def _objects(value: Any, path: str, source: str, report: ImportReport, depth: int,
             seen: set[int]) -> Iterable[tuple[Mapping[str, Any], str]]:
    """The objects of a document: the document itself, or the items of a List kind."""
    if not isinstance(value, Mapping):
        report.skip(source, path, f"expected a Kubernetes object (a mapping), found {describe(value)}")
        return
    kind = value.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in value:
        if depth >= MAX_LIST_DEPTH or id(value) in seen:
            report.skip(source, path, f"expected Lists nested at most {MAX_LIST_DEPTH} deep, found "
                                      f"deeper nesting (or a List that contains itself)")
            return
        items = value["items"]
        if not isinstance(items, list):
            report.skip(source, json_path(path, "items"), f"expected the List's items (an array), "
                                                          f"found {describe(items)}")
            return
        seen = seen | {id(value)}
        for i, item in enumerate(items):
            yield from _objects(item, json_path(json_path(path, "items"), i), source, report,
                                depth + 1, seen)
        return
    yield value, path


def _read_object(obj: Mapping[str, Any], path: str, source: str, supplied: Supplied,
                 out: DeclarationSet, report: ImportReport) -> None:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        report.count("objects without metadata (ignored)")
        return
    annotations = metadata.get("annotations")
    annotation = annotations.get(ANNOTATION) if isinstance(annotations, Mapping) else None
    api_version = obj.get("apiVersion")
    group = api_version.partition("/")[0] if isinstance(api_version, str) and "/" in api_version else None
    if obj.get("kind") == KIND and group == GROUP:
        if annotation is not None:
            report.note("annotation ignored", source, _annotation_path(path),
                        f"an {KIND} carries its declaration in spec; the annotation is not read")
        _read_resource(obj, metadata, path, source, supplied, out, report)
        return
    if obj.get("kind") == KIND:
        report.note("not ours", source, json_path(path, "apiVersion"),
                    f"kind {KIND} of apiVersion {describe(api_version)} is not group {GROUP}'s; "
                    f"read only if it carries the {ANNOTATION} annotation")
    if annotation is None:
        report.count("objects without a declaration")
        return
    apath = _annotation_path(path)
    if not isinstance(annotation, str):
        report.skip(source, apath, f"expected the declaration as a JSON string, found {describe(annotation)}")
        return
    try:
        decl = loads(annotation)
    except SchemaError as exc:
        report.skip(source, apath, f"expected the declaration as JSON: {exc.problems[0].found}")
        return
    # Problems inside the annotation's JSON are reported at their path within it.
    _offer(decl, metadata, source, f"{apath} (JSON) $", supplied, out, report, kind=obj.get("kind"))


def _read_resource(obj: Mapping[str, Any], metadata: Mapping[str, Any], path: str, source: str,
                   supplied: Supplied, out: DeclarationSet, report: ImportReport) -> None:
    version = obj["apiVersion"].partition("/")[2]
    if version not in VERSIONS:
        report.skip(source, json_path(path, "apiVersion"),
                    f"expected {GROUP}/{' or '.join(VERSIONS)} (the versions of {KIND} this build "
                    f"reads), found {describe(obj['apiVersion'])}")
        return
    spath = json_path(path, "spec")
    if "spec" not in obj:
        report.skip(source, spath, "expected the declaration (the resource's spec), found nothing")
        return
    try:
        spec = to_json(obj["spec"], spath)
    except SchemaError as exc:
        for problem in exc.problems:
            report.skip(source, problem.path, f"expected {problem.expected}, found {problem.found}")
        return
    _offer(spec, metadata, source, spath, supplied, out, report, kind=KIND)


def _offer(decl: Any, metadata: Mapping[str, Any], source: str, path: str, supplied: Supplied,
           out: DeclarationSet, report: ImportReport, kind: Any) -> None:
    if not isinstance(decl, dict):
        report.skip(source, path, f"expected a declaration (an object), found {describe(decl)}")
        return
    filled, derived, given = fill_agent(decl, metadata, supplied.namespace)
    agent = filled.get("agent")
    if isinstance(agent, dict) and "namespace" not in agent:
        report.skip(source, under(path, "$.agent.namespace"),
                    "no namespace: the declaration has none, metadata.namespace is absent, and the "
                    "caller supplied none")
        return
    detail = {"kind": kind if isinstance(kind, str) else None, "from_metadata": derived}
    if out.offer(filled, source, path, supplied=given, detail=detail) and derived:
        report.count("agent fields filled from metadata", len(derived))


def _annotation_path(path: str) -> str:
    return json_path(json_path(json_path(path, "metadata"), "annotations"), ANNOTATION)
