"""Fleets from what agents already publish: A2A Agent Cards, MCP tool listings, Kubernetes manifests.

A3 §1 and §8 say these can carry or feed a declaration. What a source says is derived; what it
cannot say is supplied by the caller (`Supplied`) or reported as not derived; what cannot be used
is skipped with the file, the JSON path and the reason. Every declaration returned has passed
`a3fast.schema.parse_declaration`.

    from a3fast.interop import Supplied, import_cards, import_listings, json_documents
    cards = json_documents(open("card.json", "rb").read(), "card.json")
    result = import_cards(cards, Supplied(namespace="travel", capability_version=1, normalise=True,
                                          skill_domain="travel"))
    result.declarations          # list of §3 declarations (dicts), ready for Fleet.add
    print("\\n".join(result.report.lines()))

Modules: `a2a` (cards), `fetch` (cards fetched from agents over HTTP, bounded), `signing` (card
signatures checked against supplied keys), `mcp` (tool listings, draft contracts), `mcp_live`
(tools listed from running MCP servers), `oasf` (AGNTCY directory records), `kubernetes`
(manifests), `kagent` (kagent Agent resources), `crd` (the AgentDeclaration CRD), `supply` (what
the caller supplies), `collect` (the fleet-ready set), `report`, `sources` (reading JSON and YAML
safely), `naming` (§2 normalisation, server names as domains).
"""
from __future__ import annotations

from .a2a import AgentCard, card_shape, import_cards, read_card
from .collect import DeclarationSet, ImportResult
from .kubernetes import ANNOTATION, declarations_from_manifests
from .mcp import HINT_DEFAULTS, INFERRED_FROM, draft_contract, import_listings, read_page
from .naming import normalise_identifier
from .report import ImportReport, Note, Skipped
from .sources import Document, json_document, json_documents, yaml_documents
from .supply import Supplied, read_grants

# The CRD module loads on first use, so `python -m a3fast.interop.crd` runs it fresh.
_LAZY = {name: "crd" for name in ("agent_declaration_crd", "declaration_schema", "json_schema",
                                  "render_crd")}

__all__ = [
    "AgentCard", "card_shape", "import_cards", "read_card",
    "HINT_DEFAULTS", "INFERRED_FROM", "draft_contract", "import_listings", "read_page",
    "declarations_from_manifests", "ANNOTATION", "agent_declaration_crd", "declaration_schema",
    "json_schema", "render_crd",
    "Supplied", "read_grants", "DeclarationSet", "ImportResult", "ImportReport", "Note", "Skipped",
    "Document", "json_document", "json_documents", "yaml_documents", "normalise_identifier",
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'a3fast.interop' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
