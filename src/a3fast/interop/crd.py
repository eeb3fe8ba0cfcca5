"""The AgentDeclaration custom resource: its OpenAPI schema, built from the parser's own rules.

Kubernetes validates a custom resource against the OpenAPI v3 schema of its CRD before a3fast ever
reads it. That schema is generated here from the constants `a3fast.schema` parses with (the §2
identifier grammar, the schema-version pattern, the latency classes, the decimal form of costs,
the bounds on versions and names), so the cluster and the parser accept the same declarations;
`deploy/agentdeclaration-crd.yaml` is this module's output (`python -m a3fast.interop.crd`), and a
test keeps the two equal.

A resource's `spec` is a §3 declaration whose `agent` may be left out: `metadata.name` and
`metadata.namespace` fill it (see `kubernetes.py`). Fields the schema does not define are kept,
as the parser keeps them.
"""
from __future__ import annotations

import copy
import sys
from typing import Any

import yaml

from ..schema import CONTROL, DECIMAL, IDENTIFIER, LATENCY_CLASSES, MAX_TEXT, MAX_VERSION, SCHEMA_VERSION
from .kubernetes import ANNOTATION, GROUP, KIND, PLURAL, VERSIONS

__all__ = ["GROUP", "KIND", "PLURAL", "VERSIONS", "ANNOTATION", "declaration_schema",
           "json_schema", "agent_declaration_crd", "render_crd"]

KEEP = {"x-kubernetes-preserve-unknown-fields": True}


def _anchored(pattern: str) -> str:
    # The parser uses fullmatch; OpenAPI patterns search, so anchor them. `$` ends the text in
    # ECMA-262 and in RE2 (what the API server runs).
    return f"^(?:{pattern})$"


def _text(what: str) -> dict[str, Any]:
    """A §3 name or label: non-empty, bounded, no control characters (schema._Reader.text)."""
    if not (CONTROL.pattern.startswith("[") and CONTROL.pattern.endswith("]")):
        raise RuntimeError("schema.CONTROL is no longer a character class; update crd._text")
    return {"type": "string", "description": what, "minLength": 1, "maxLength": MAX_TEXT,
            "pattern": f"^[^{CONTROL.pattern[1:-1]}]*$"}


def _identifier(what: str) -> dict[str, Any]:
    return {"type": "string", "description": f"{what} (§2: lowercase, dot-separated)",
            "pattern": _anchored(IDENTIFIER.pattern)}


def declaration_schema(*, agent_required: bool = True) -> dict[str, Any]:
    """The OpenAPI v3 (Kubernetes structural) schema of a §3 declaration.

    With `agent_required=False` it is a resource's `spec`, whose agent (or either half of it)
    may come from the resource's metadata.
    """
    agent = {"type": "object", "description": "The agent: name, and the namespace it is unique in (§3).",
             "properties": {"name": _text("The agent's name."),
                            "namespace": _text("The scope the name is unique in: a tenant, project or team.")},
             **KEEP}
    if agent_required:
        agent["required"] = ["name", "namespace"]
    capability = {
        "type": "object",
        "required": ["name", "version"],
        "properties": {
            "name": _identifier("Capability name"),
            "version": {"type": "integer", "format": "int64", "minimum": 0, "maximum": MAX_VERSION,
                        "description": "Major version; a new major version is a different capability."},
            "description": {"description": "Free text.", **KEEP},
            "inputs": {"description": "JSON Schema of the inputs.", **KEEP},
            "outputs": {"description": "JSON Schema of the outputs.", **KEEP},
            "evaluation": {"description": "A reference to the probe that substantiates the claim.", **KEEP},
        },
        **KEEP,
    }
    model = {
        "type": "object", "nullable": True,
        "properties": {
            "latency_class": {"type": "string", "nullable": True, "enum": list(LATENCY_CLASSES)},
            "cost_ceiling_usd": {"type": "string", "nullable": True,
                                 "pattern": _anchored(DECIMAL.pattern),
                                 "description": "A decimal string such as \"0.75\"."},
        },
        **KEEP,
    }
    required = ["v", "capabilities", "clearances"]
    if agent_required:
        required.insert(1, "agent")
    return {
        "type": "object",
        "description": "An A3 Capability Schema 1.0 declaration (§3): what an agent can do and "
                       "what it has been granted.",
        "required": required,
        "properties": {
            "v": {"type": "string", "description": "Schema version (1.x).",
                  "pattern": _anchored(SCHEMA_VERSION.pattern)},
            "agent": agent,
            "capabilities": {"type": "array", "items": capability},
            "clearances": {"type": "array", "items": _identifier("Clearance identifier")},
            "residency": {"type": "array", "nullable": True, "items": _text("A residency label."),
                          "description": "Labels the runtime satisfies; absent means unconstrained."},
            "tools": {"type": "array", "nullable": True, "items": _text("A tool name.")},
            "model": model,
        },
        **KEEP,
    }


def json_schema(openapi: dict[str, Any]) -> dict[str, Any]:
    """The same schema as JSON Schema (draft 2020-12): `nullable` becomes a type list and a null
    enum member; Kubernetes' own keywords are dropped. For validating documents outside a cluster."""
    out = copy.deepcopy(openapi)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.pop("nullable", False) and "type" in node:
                node["type"] = [node["type"], "null"]
                if "enum" in node:
                    node["enum"] = [*node["enum"], None]
            node.pop("x-kubernetes-preserve-unknown-fields", None)
            node.pop("format", None)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **out}


def agent_declaration_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of `AgentDeclaration` (apiextensions.k8s.io/v1)."""
    spec = declaration_schema(agent_required=False)
    spec["description"] += (" The agent's name and namespace, when left out, are the resource's "
                            "metadata.name and metadata.namespace.")
    version = {
        "name": VERSIONS[0], "served": True, "storage": True,
        "schema": {"openAPIV3Schema": {
            "type": "object",
            "description": "An agent's A3 declaration, for schedulers that place work on agents.",
            "required": ["spec"],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"type": "object"}, "spec": spec},
        }},
        "additionalPrinterColumns": [
            {"name": "Agent", "type": "string", "jsonPath": ".spec.agent.name",
             "description": "The declared name (empty: metadata.name)."},
            {"name": "Schema", "type": "string", "jsonPath": ".spec.v"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL,
                      "singular": KIND.lower(), "shortNames": ["a3decl"]},
            "versions": [version],
        },
    }


def render_crd() -> str:
    """The CRD as the YAML shipped in deploy/ (stable key order, so a diff shows real changes)."""
    header = ("# Generated by `python -m a3fast.interop.crd` from a3fast.schema; do not edit.\n"
              "# kubectl apply -f agentdeclaration-crd.yaml\n")
    return header + yaml.safe_dump(agent_declaration_crd(), sort_keys=False, allow_unicode=True, width=100)


if __name__ == "__main__":
    sys.stdout.write(render_crd())
