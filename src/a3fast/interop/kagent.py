"""kagent `Agent` resources (`kagent.dev/v1alpha1`, `v1alpha2`) -> A3 declarations.

kagent runs agents on Kubernetes from an `Agent` custom resource. What it publishes of the agent
over A2A is in the resource: the skills of its Agent Card (`spec.a2aConfig.skills` in v1alpha1,
`spec.declarative.a2aConfig.skills` in v1alpha2), and the MCP tools it is bound to
(`tools[].mcpServer.toolNames`, naming the tool server resource). So a resource gives the agent's
name and namespace (its metadata), a capability per skill (read exactly as a card's skills are),
and its tool bindings, with the servers under `tool_servers`. kagent serves the agent's A2A
endpoint through its controller, so the resource names none: fetch the served card
(`a3fast import a2a URL`) to record it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import SchemaError, describe, json_path
from .a2a import declaration_from_card, read_card
from .collect import DeclarationSet
from .report import ImportReport
from .supply import Supplied, text_problem

__all__ = ["GROUP", "is_kagent_agent", "read_kagent_agent"]

GROUP = "kagent.dev"
VERSIONS = ("v1alpha1", "v1alpha2")


def is_kagent_agent(obj: Mapping[str, Any]) -> bool:
    api = obj.get("apiVersion")
    return obj.get("kind") == "Agent" and isinstance(api, str) and api.partition("/")[0] == GROUP


def _spec_parts(spec: Mapping[str, Any], spath: str) -> list[tuple[Mapping[str, Any], str]]:
    """The parts of a spec that may hold a2aConfig and tools (v1alpha2 nests them by type)."""
    parts = [(spec, spath)]
    for key in ("declarative", "byo"):
        if isinstance(spec.get(key), Mapping):
            parts.append((spec[key], json_path(spath, key)))
    return parts


def read_kagent_agent(obj: Mapping[str, Any], path: str, source: str, supplied: Supplied,
                      out: DeclarationSet, report: ImportReport) -> None:
    version = obj["apiVersion"].partition("/")[2]
    found = obj.get("metadata")
    metadata = found if isinstance(found, Mapping) else {}
    name = metadata.get("name")
    if version not in VERSIONS:
        report.skip(source, json_path(path, "apiVersion"), f"expected {GROUP}/{' or '.join(VERSIONS)} "
                                                           f"(the kagent Agent versions read), found "
                                                           f"{describe(obj['apiVersion'])}")
        return
    spath = json_path(path, "spec")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        report.skip(source, spath, f"expected the Agent's spec (an object), found {describe(spec)}")
        return
    skills: list[Any] = []
    skills_path = json_path(json_path(spath, "a2aConfig"), "skills")
    tools: list[str] = []
    servers: list[dict[str, Any]] = []
    for part, ppath in _spec_parts(spec, spath):
        config = part.get("a2aConfig")
        if isinstance(config, Mapping) and config.get("skills") is not None:
            here = json_path(json_path(ppath, "a2aConfig"), "skills")
            if not isinstance(config["skills"], list):
                report.skip(source, here, f"expected the skills (an array), found {describe(config['skills'])}")
            elif not skills:
                skills, skills_path = config["skills"], here
        if part.get("tools") is not None and not isinstance(part["tools"], list):
            report.skip(source, json_path(ppath, "tools"), f"expected the tools (an array), "
                                                           f"found {describe(part['tools'])}")
        listed = part.get("tools")
        for i, tool in enumerate(listed if isinstance(listed, list) else ()):
            server = tool.get("mcpServer") if isinstance(tool, Mapping) else None
            if not isinstance(server, Mapping):
                continue
            tools += _tool_names(server.get("toolNames"),
                                 json_path(json_path(json_path(json_path(ppath, "tools"), i), "mcpServer"),
                                           "toolNames"), source, report)
            ref = server.get("name") or server.get("toolServer")
            if isinstance(ref, str):
                entry = {"name": ref, "transport": "kagent",
                         **({"kind": server["kind"]} if isinstance(server.get("kind"), str) else {})}
                if entry not in servers:
                    servers.append(entry)
    card = {"name": name, "skills": skills}
    try:
        parsed, problems = read_card(card, source, path)
    except SchemaError as exc:
        for problem in exc.problems:
            where = json_path(json_path(path, "metadata"), "name") if problem.path.endswith(".name") \
                else skills_path
            report.skip(source, where, f"expected {problem.expected}, found {problem.found}")
        return
    # Skill paths in the report point into the resource, not the card built from it.
    card_skills = json_path(path, "skills")
    parsed = replace(parsed, skills=tuple(replace(s, path=skills_path + s.path[len(card_skills):])
                                          for s in parsed.skills))
    for problem in problems:
        where = skills_path + problem.path[len(card_skills):] if problem.path.startswith(card_skills) \
            else problem.path
        report.skip(source, where, f"expected {problem.expected}, found {problem.found}")
    namespace = metadata.get("namespace")
    own = supplied
    # the resource's own namespace first; --namespace is for a resource that names none
    if isinstance(namespace, str) and namespace:
        own = replace(supplied, namespace=namespace)
        report.note("namespace derived", source, path, f"agent {name!r}: namespace {namespace!r} "
                                                       f"from metadata.namespace")
    decl, given, missing = declaration_from_card(parsed, own, report, source, path)
    if decl is None:
        return
    if own is not supplied:
        given = [g for g in given if g != "namespace"]
    missing = [(what, why) for what, why in missing if what != "endpoint"]
    missing.append(("endpoint", "kagent serves the agent's A2A endpoint through its controller; the "
                                "resource names none (fetch the served card with `a3fast import a2a "
                                "URL` to record it)"))
    if tools:
        decl["tools"] = list(dict.fromkeys(tools))
        given.append("tools (the resource's MCP tool bindings)")
    if servers:
        decl["tool_servers"] = servers
    detail = {"kind": "Agent", "api_version": obj["apiVersion"], "skills": len(skills),
              "capabilities": len(decl["capabilities"]), "tools": len(decl.get("tools", ()))}
    if out.offer(decl, source, path, supplied=given, missing=missing, detail=detail):
        report.derived[decl["agent"]["name"]] = None


def _tool_names(names: Any, where: str, source: str, report: ImportReport) -> list[str]:
    """The tool names of one `mcpServer` binding; what is not a name is a skipped item."""
    if names is None:
        return []
    if not isinstance(names, list):
        report.skip(source, where, f"expected the tool names (an array of strings), found {describe(names)}")
        return []
    kept = []
    for i, name in enumerate(names):
        problem = text_problem(name)
        if problem is None:
            kept.append(name)
        else:       # the tool alone is left out, as an MCP listing leaves out a tool it cannot name
            report.skip(source, json_path(where, i), f"expected a tool name ({problem}), found {describe(name)}")
    return kept
