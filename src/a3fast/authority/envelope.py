"""The A3 Authority Envelope (A3 §8, planned): what a task may use is the intersection of the
clearances the agent holds with the grants of the principal the task comes from.

`admit` computes the `authority_envelope` of a task.admitted record. `check_envelope` and
`envelope_findings` give the verifier an a3fast-specific check, reported as warnings under their
own codes and never as §7 errors: an admitted envelope must lie within the admitted agent's
declared clearances.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from ..errors import Problem, SchemaError, describe, json_path
from ..schema import Declaration, is_identifier, parse_declaration
from .times import parse_instant

__all__ = ["W_ENVELOPE_EXCEEDS_CLEARANCES", "W_ENVELOPE_MALFORMED", "EnvelopeFinding", "admit",
           "check_envelope", "envelope_findings"]

#: A task.admitted envelope holds a clearance the admitted agent does not declare.
W_ENVELOPE_EXCEEDS_CLEARANCES = "W_ENVELOPE_EXCEEDS_CLEARANCES"
#: A task.admitted envelope is present but not `{clearances: [identifier...], expires?}`.
W_ENVELOPE_MALFORMED = "W_ENVELOPE_MALFORMED"


class EnvelopeFinding(NamedTuple):
    """A warning about one task.admitted record (`seq` is that record's)."""

    code: str
    seq: int | None
    message: str


def _grants(principal_grants: Any) -> tuple[list[str], str]:
    """A principal's grants -> (clearance ids, expires): a list of ids, or an envelope-shaped
    `{clearances, expires?}` (so a sub-task can be admitted under its parent's envelope)."""
    problems = []
    if isinstance(principal_grants, Mapping):
        base, items = "$.clearances", principal_grants.get("clearances")
        expires = principal_grants.get("expires", "")
        if expires != "" and parse_instant(expires) is None:
            problems.append(Problem("$.expires", "\"\" or an RFC 3339 date-time", describe(expires)))
    else:
        base, items, expires = "$", principal_grants, ""
    if not isinstance(items, (list, tuple, set, frozenset)):
        problems.append(Problem(base, "an array of clearance identifiers", describe(items)))
        items = ()
    ids = []
    for i, item in enumerate(items):
        if is_identifier(item):
            ids.append(item)
        else:
            problems.append(Problem(json_path(base, i), "a clearance identifier matching "
                                    "[a-z0-9]+(\\.[a-z0-9-]+)+", describe(item)))
    if problems:
        raise SchemaError(problems)
    return ids, expires


def admit(declaration: Declaration | Mapping[str, Any], principal_grants: Any) -> dict[str, Any]:
    """The `authority_envelope` of task.admitted (A3 §8, §10): the agent's clearances that the
    principal also grants, in the declaration's order, and the grants' `expires` ("" for none).

    `principal_grants` is a list of clearance identifiers or an envelope `{clearances, expires?}`.
    SchemaError for a declaration or grants that do not parse.
    """
    decl = parse_declaration(declaration)
    granted, expires = _grants(principal_grants)
    granted_set = set(granted)
    clearances = [c for c in dict.fromkeys(decl.clearances) if c in granted_set]
    return {"clearances": clearances, "expires": expires}


def check_envelope(admitted_content: Any, declaration: Declaration | Mapping[str, Any]) -> list[tuple[str, str]]:
    """Warnings `(code, message)` for one task.admitted content against the admitted agent's
    declaration. No envelope, or a declaration that does not parse (§7 reports that), gives none."""
    if not isinstance(admitted_content, Mapping) or "authority_envelope" not in admitted_content:
        return []
    try:
        decl = parse_declaration(declaration)
    except SchemaError:
        return []
    envelope = admitted_content["authority_envelope"]
    clearances = envelope.get("clearances") if isinstance(envelope, Mapping) else None
    # `expires` as `admit` reads a principal's: "" (none) or an RFC 3339 date-time; absent is ""
    expires = envelope.get("expires", "") if isinstance(envelope, Mapping) else ""
    if (not isinstance(clearances, list) or not all(is_identifier(c) for c in clearances)
            or (expires != "" and parse_instant(expires) is None)):
        return [(W_ENVELOPE_MALFORMED, "task.admitted authority_envelope is not {clearances: [clearance "
                 f"identifiers], expires}} (found {describe(envelope)}); it cannot be checked against the "
                 "agent's clearances")]
    held = set(decl.clearances)
    extra = [c for c in dict.fromkeys(clearances) if c not in held]
    if not extra:
        return []
    agent = f"{decl.agent.namespace}/{decl.agent.name}"
    return [(W_ENVELOPE_EXCEEDS_CLEARANCES, f"task.admitted authority_envelope holds "
             f"{', '.join(extra)}, which agent {agent} does not declare among its clearances "
             f"({', '.join(decl.clearances) or 'none'}); an envelope is the agent's clearances ∩ the "
             "principal's grants")]


def _agent(value: Any) -> tuple[Any, Any] | None:
    return (value.get("name"), value.get("namespace")) if isinstance(value, Mapping) else None


def envelope_findings(records: Iterable[Any]) -> list[EnvelopeFinding]:
    """Walk a trace (records `{seq, kind, content}`): each task.admitted envelope is checked against
    the declaration in the next task.bound that places the same agent (docs/design.md, reading 8), once.
    Records that are not well formed are skipped: reporting them is the trace verifier's job."""
    findings: list[EnvelopeFinding] = []
    admitted: Mapping[str, Any] | None = None
    for record in records:
        if not isinstance(record, Mapping) or not isinstance(record.get("content"), Mapping):
            continue
        kind, content = record.get("kind"), record["content"]
        if kind == "task.admitted":
            admitted = record
        elif kind == "task.bound" and admitted is not None:
            scheduling = content.get("scheduling")
            declaration = scheduling.get("declaration") if isinstance(scheduling, Mapping) else None
            admitted_agent = _agent(admitted["content"].get("agent"))
            if not isinstance(declaration, Mapping) or admitted_agent is None \
                    or _agent(declaration.get("agent")) != admitted_agent:
                continue  # no declaration of the admitted agent here (§7 reports scope and structure)
            try:
                parsed = parse_declaration(declaration)
            except SchemaError:
                # §7 reports it; the admission waits for a declaration of its agent that parses, as
                # the trace verifier's check does
                continue
            seq = admitted.get("seq")
            seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
            findings += [EnvelopeFinding(code, seq, message)
                         for code, message in check_envelope(admitted["content"], parsed)]
            admitted = None  # checked once; a resumed placement under the same admission adds nothing
    return findings
