"""OASF records (AGNTCY directory records) -> A3 declarations.

An OASF record describes an agent for a directory: `name`, `version`, `schema_version`, `authors`,
`skills` drawn from the OASF taxonomy (`{"id": 10202, "name":
"natural_language_processing/natural_language_generation/summarization"}`), `domains`,
`locators` (where its source or package is) and `modules` (older records: `extensions`). A record
may embed the agent's A2A Agent Card: a module named `integration/a2a` whose `data.card_data` is
the card (older records: an extension whose name ends in `/a2a`).

What a record gives: the agent's name (the embedded card's, when there is one), a capability per
taxonomy skill, named `oasf.<category>.<class>` (the taxonomy path, §2-normalised under the domain
`oasf`), and, from an embedded card, the card's own skills and endpoint exactly as `a3fast import
a2a` reads them. A record is told from a card by its own fields (`a2a.is_oasf_record`), never by
what it lacks. Like a card, it has no namespace, capability versions or clearances.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import SchemaError, describe, json_path
from .a2a import ENDPOINT, declaration_from_card, is_oasf_record, read_card
from .collect import DeclarationSet, ImportResult
from .naming import normalise_identifier
from .report import ImportReport
from .sources import Document
from .supply import Supplied, text_problem

__all__ = ["TAXONOMY_DOMAIN", "A2A_MODULE", "embedded_card", "import_records"]

TAXONOMY_DOMAIN = "oasf"
A2A_MODULE = "integration/a2a"
ORIGIN = "an OASF record"


def embedded_card(record: Mapping[str, Any], path: str = "$") -> tuple[Any, str] | None:
    """The A2A card a record embeds and its path, or None."""
    for key in ("modules", "extensions"):
        items = record.get(key)
        if not isinstance(items, list):
            continue
        for i, item in enumerate(items):
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                continue
            name = item["name"]
            if name != A2A_MODULE and not name.endswith("/a2a"):
                continue
            data = item.get("data")
            ipath = json_path(json_path(json_path(path, key), i), "data")
            if isinstance(data, Mapping) and "card_data" in data:
                return data["card_data"], json_path(ipath, "card_data")
            if isinstance(data, Mapping) and "skills" in data:
                return data, ipath
    return None


def _taxonomy_name(skill: Any) -> str | None:
    """The taxonomy path of an OASF skill (`name`, or older `category_name`/`class_name`)."""
    if not isinstance(skill, Mapping):
        return None
    if isinstance(skill.get("name"), str) and skill["name"]:
        return skill["name"]
    parts = [skill.get(k) for k in ("category_name", "class_name")]
    return "/".join(p for p in parts if isinstance(p, str) and p) or None


def import_records(documents: Iterable[Document], supplied: Supplied,
                   report: ImportReport | None = None) -> ImportResult:
    """Declarations from OASF records (module doc); every decision is in the report."""
    supplied.check()
    report = report or ImportReport("oasf")
    out = DeclarationSet(report)
    for doc in documents:
        report.read(doc.source)
        record = doc.value
        if not is_oasf_record(record):
            found = "an A2A Agent Card (import it with `a3fast import a2a`)" \
                if isinstance(record, Mapping) and "skills" in record and "schema_version" not in record \
                else describe(record)
            report.skip(doc.source, doc.path, f"expected an OASF record (schema_version with skills, "
                                              f"locators or modules), found {found}")
            continue
        _import_record(record, doc, supplied, out, report)
    declarations = out.declarations()
    return ImportResult(declarations, report, usable=bool(declarations))


def _import_record(record: Mapping[str, Any], doc: Document, supplied: Supplied,
                   out: DeclarationSet, report: ImportReport) -> None:
    name = record.get("name")
    if why := text_problem(name):
        report.skip(doc.source, json_path(doc.path, "name"), f"expected the agent's name ({why}), "
                                                             f"found {describe(name)}")
        return
    assert isinstance(name, str)  # text_problem found none
    embedded = embedded_card(record, doc.path)
    given: list[str] = []
    missing: list[tuple[str, str]] = []
    if embedded is not None:
        card_obj, card_path = embedded
        try:
            card, problems = read_card(card_obj, doc.source, card_path)
        except SchemaError as exc:
            for problem in exc.problems:
                report.skip(doc.source, problem.path, f"expected {problem.expected}, found {problem.found}")
            return
        for problem in problems:
            report.skip(doc.source, problem.path, f"expected {problem.expected}, found {problem.found}")
        decl, given, missing = declaration_from_card(card, supplied, report, doc.source, card_path)
        if decl is None:
            return
        if card.name != name:
            report.note("names", doc.source, doc.path, f"record {name!r} embeds the card of agent "
                                                       f"{card.name!r}; the agent keeps the card's name")
    else:
        if supplied.namespace is None:
            report.skip(doc.source, doc.path, f"no namespace: record {name!r} embeds no Agent Card "
                                              f"with a URL to take a host from, and the caller "
                                              f"supplied none (give --namespace)")
            return
        decl = {"v": "1.0", "agent": {"name": name, "namespace": supplied.namespace},
                "capabilities": [], "clearances": []}
        given = ["namespace"]
        more, absent = supplied.fill(decl, name, ORIGIN)
        given += more
        missing += absent
        missing.append((ENDPOINT, "the record embeds no Agent Card; its locators say where its "
                                  "source or package is, not where the agent answers"))
    taxonomy = _taxonomy_capabilities(record, doc, supplied, decl, report)
    if taxonomy:
        given.append("capability names (OASF taxonomy skills, under the domain oasf)")
    detail = {"shape": f"oasf {record.get('schema_version')}", "embedded_card": embedded is not None,
              "taxonomy_skills": taxonomy, "capabilities": len(decl["capabilities"])}
    out.offer(decl, doc.source, doc.path, supplied=list(dict.fromkeys(given)), missing=missing,
              detail=detail)


def _taxonomy_capabilities(record: Mapping[str, Any], doc: Document, supplied: Supplied,
                           decl: dict[str, Any], report: ImportReport) -> int:
    skills = record.get("skills")
    if not isinstance(skills, list):
        if skills is not None:
            report.skip(doc.source, json_path(doc.path, "skills"), f"expected the record's skills (an array), "
                                                                   f"found {describe(skills)}")
        return 0
    held = {c["name"] for c in decl["capabilities"]}
    added = 0
    for i, skill in enumerate(skills):
        spath = json_path(json_path(doc.path, "skills"), i)
        path_name = _taxonomy_name(skill)
        if path_name is None:
            # A record made from a card may carry a bare placeholder class id: nothing to name.
            report.skip(doc.source, spath, f"expected a taxonomy skill with a name, found {describe(skill)}")
            continue
        capability = normalise_identifier(path_name.replace("/", "."), TAXONOMY_DOMAIN)
        version = supplied.version_for(path_name)
        if capability is None or version is None:
            why = "gives no §2 identifier" if capability is None else "has no major version supplied"
            report.skip(doc.source, spath, f"taxonomy skill {path_name!r} {why}")
            continue
        if capability in held:
            report.skip(doc.source, spath, f"collision: taxonomy skill {path_name!r} gives capability "
                                           f"{capability!r}, already declared")
            continue
        held.add(capability)
        decl["capabilities"].append({"name": capability, "version": version,
                                     "description": f"OASF skill {path_name}"})
        added += 1
    return added
