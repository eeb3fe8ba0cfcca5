"""`a3fast resolve`: which skills an installation may activate on this host, now, and why not.

Exit 0 when every skill the caller requires resolves (`--require`, repeatable; every skill when
none is named), 1 otherwise, 2 on bad input. An engagement descriptor that is unreadable JSON is bad
input; one that parses as JSON but is malformed, tampered with, wrongly signed or expired is an
answer — it grants nothing, and the output says why.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import click
import orjson

from ..authority import (DEFAULT_SKEW_SECONDS, Resolution, Resolver, load_public_key, parse_connection,
                         parse_contracts, parse_engagement, parse_mappings, parse_policy, parse_skills)
from ..authority.times import current_instant, format_instant
from ..document import loads
from ..errors import Problem, SchemaError, quoted
from ..files import InputError, display_name, json_of, read_bytes, read_json_documents, require_kind, sniff_kind
from ..kinds import wrong_kind
from .common import EXIT_NEGATIVE, EXIT_OK, BadInput, atomic_output, check_not_inputs, check_outputs


def _documents(path: str, parse, what: str) -> tuple:
    """A JSON array or JSON Lines file of documents, parsed with every problem named by file and
    path; each document names each member once, as an engagement, connection or policy must
    (`_one_of`): a contract an experience publishes is read by other hosts' readers too."""
    require_kind(path, what)

    def once_each(data: bytes) -> Any:
        value = loads(data)
        twice = _member_twice(data)
        if twice is not None:
            raise SchemaError([Problem("$", "objects that name each member once",
                                       f"member {quoted(twice)} twice in one object")])
        return value
    docs = read_json_documents(path, decode=once_each)
    try:
        return parse([doc for _, doc in docs], [prefix for prefix, _ in docs])
    except SchemaError as exc:
        raise BadInput.from_error(exc, path) from None


def _document(path: str, parse, what: str) -> Any:
    """One authority document, parsed (SchemaError: bad input naming the file), read as `what`
    whatever else it looks like (`_one_of`)."""
    doc = _one_of(path, parse, what)
    try:
        return parse(doc)
    except SchemaError as exc:
        raise BadInput.from_error(exc, path) from None


def _one_of(path: str, parse, what: str) -> Any:
    """The JSON document of `path`. A document `parse` takes is `what`, whatever kind of a3fast's it
    looks like: an authority document may carry members of its own (kept and ignored), so a
    connection with a `v` and an `agent` object reads like a declaration, a descriptor with
    `content` and `kind` like a trace. One it does not take that looks like another kind (most
    likely that file, given in the wrong place), or is not one JSON value, is told so in one line,
    with what reading it as `what` found; anything else is left to its reader (a connection's
    problems are bad input, a malformed descriptor is an answer)."""
    kind = sniff_kind(path)
    looks = wrong_kind(kind, (what,), display_name(path))
    try:
        data = read_bytes(path)
        doc = json_of(data, path)
    except InputError:
        if looks is not None:
            raise InputError(looks) from None
        raise
    twice = _member_twice(data)
    if twice is not None:
        # JSON leaves duplicate names to the reader (this one keeps the last): signed bytes that
        # two readers read as two documents prove nothing (I-JSON, RFC 7493, forbids them)
        raise InputError(f"{display_name(path)}: member {quoted(twice)} appears twice in one object; "
                         f"{what} must name each member once")
    if looks is None:
        return doc
    try:
        parse(doc)
    except SchemaError as exc:
        first = exc.problems[0] if exc.problems else None
        found = f" (read as {what}: {first.path}: expected {first.expected}, found {first.found})" if first else ""
        raise InputError(looks + found) from None
    return doc


def _member_twice(data: bytes) -> str | None:
    """A member name some object of the JSON text `data` (one the reader took) holds twice, if any."""
    if data.count(b'"') < 4:
        return None
    twice: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [name for name, _ in items]
        if len(set(names)) != len(names) and not twice:
            twice.append(next(n for i, n in enumerate(names) if n in names[:i]))
        return {}
    try:
        json.loads(data, object_pairs_hook=pairs)
    except ValueError:          # nothing the document rule took: its reader has answered already
        return None
    return twice[0] if twice else None


def _key_option(item: str) -> tuple[str, str]:
    """A `--key KID=FILE` value as (kid, path), either empty when it has no "=". A key id and a
    file name may both hold "=": the value is cut where what follows is a file (`-` too), or, when
    no cut is, at its first "=" (that file is then said to be unreadable); a value that two cuts
    read as files is refused as ambiguous."""
    cuts = [(item[:i], item[i + 1:]) for i, ch in enumerate(item) if ch == "="]
    files = [(kid, path) for kid, path in cuts if kid and path and (path == "-" or os.path.isfile(path))]
    if len(files) > 1:
        raise BadInput(f"--key {item!r}: ambiguous: both {files[0][1]!r} and {files[1][1]!r} are files; "
                       f"name the key file by another path")
    return files[0] if files else cuts[0] if cuts else ("", "")


def _trust(connection, keys: tuple[str, ...]):
    """The connection with the `--key KID=FILE` keys added to those it trusts."""
    extra, bad = dict(connection.keys), []
    for item in keys:
        kid, path = _key_option(item)
        if not kid or not path:
            bad.append(f"--key {item!r}: expected KID=FILE")
            continue
        if kid in connection.keys:
            bad.append(f"--key {kid}: the connection already trusts a key with this id")
            continue
        if kid in extra:        # one key per key id, as a connection's own keys are
            bad.append(f"--key {kid}: given twice; one key per key id")
            continue
        try:
            extra[kid] = load_public_key(read_bytes(path))
        except InputError:
            raise
        except ValueError as exc:
            bad.append(f"--key {kid}: {path}: expected {exc}")
    if bad:
        raise BadInput(bad)
    return dataclasses.replace(connection, keys=extra)


def _reasons(reasons) -> str:
    return "; ".join(r.message for r in reasons)


def _text(resolution: Resolution, required: set[str], now: str) -> list[str]:
    authority = resolution.authority
    connection, check = authority.connection, authority.engagement
    revoked_at = connection.revoked_at if authority.revoked else None  # revoked: it has a revoked_at
    status = f"revoked at {format_instant(revoked_at)}" if revoked_at is not None else "active"
    lines = [f"connection {connection.id} with {connection.experience}: {status}"]
    e = check.engagement
    if check.valid and e is not None:  # a valid check holds its engagement
        lines.append(f"engagement {e.context} from {e.experience}: valid until {format_instant(e.expires)} "
                     f"(key {e.signature.kid}; checked at {now})")
    else:
        lines.append(f"engagement: rejected, grants nothing: {check.summary()}")
    counts = authority.counts()
    lines.append(f"authority: {counts['granted']} granted, {counts['confirm']} with confirmation, "
                 f"{counts['denied']} denied")
    for result in resolution:
        mark = " (required)" if result.skill in required else ""
        lines.append(f"skill {result.skill}: {'available' if result.available else 'unavailable'}{mark}")
        for binding in result.bindings:
            lines.append(_binding(binding, "  "))
        for unmet in result.unmet:
            lines.append(f"  {unmet.capability}: {_reasons(unmet.reasons)}")
        for binding in result.optional:
            lines.append(_binding(binding, "  optional "))
        for unmet in result.optional_unmet:
            lines.append(f"  optional {unmet.capability}: {_reasons(unmet.reasons)}")
    return lines


def _binding(binding, indent: str) -> str:
    text = f"{indent}{binding.capability} -> {binding.tool} ({binding.transport})"
    if binding.confirmation:
        text += f", needs confirmation: {_reasons(binding.confirmation)}"
    return text


def _json(resolution: Resolution, required: set[str], ok: bool, now: str) -> dict[str, Any]:
    authority = resolution.authority
    connection, check = authority.connection, authority.engagement
    engagement: dict[str, Any] = {"valid": check.valid, "reasons": [r.to_dict() for r in check.reasons]}
    if check.engagement is not None and check.valid:
        e = check.engagement
        engagement.update(experience=e.experience, context=e.context, kid=e.signature.kid,
                          expires=format_instant(e.expires))
    skills = []
    for result in resolution:
        entry = result.to_dict()
        entry["required_by_caller"] = result.skill in required
        skills.append(entry)
    return {
        "ok": ok, "now": now,
        "connection": {"id": connection.id, "experience": connection.experience, "revoked": authority.revoked},
        "engagement": engagement,
        "authority": authority.to_dict(),
        "skills": skills,
    }


@click.command("resolve")
@click.option("--contracts", "contracts_path", required=True, metavar="FILE",
              help="Capability contracts (a JSON array or JSON Lines).")
@click.option("--mappings", "mappings_path", required=True, metavar="FILE",
              help="This host's mappings of capabilities to tools (a JSON array or JSON Lines).")
@click.option("--skills", "skills_path", required=True, metavar="FILE",
              help="Skills and the capabilities they require (a JSON array or JSON Lines).")
@click.option("--connection", "connection_path", required=True, metavar="FILE",
              help="The connection: the paired installation, what it may ever do, the keys it trusts.")
@click.option("--engagement", "engagement_path", required=True, metavar="FILE",
              help="The signed engagement descriptor for this experience and context.")
@click.option("--policy", "policy_path", required=True, metavar="FILE", help="The local runtime policy.")
@click.option("--require", "required", multiple=True, metavar="SKILL",
              help="A skill the caller needs (repeatable); exit 1 unless each resolves. Default: every skill.")
@click.option("--now", metavar="INSTANT", help="Check expiry and revocation at this RFC 3339 instant "
              "instead of this host's clock.")
@click.option("--skew", "skew_seconds", type=click.IntRange(0, 3600), default=DEFAULT_SKEW_SECONDS,
              show_default=True, help="Seconds an engagement's issued_at may be ahead of this clock.")
@click.option("--context", metavar="CONTEXT", help="The operating context this host is in: an engagement "
              "for another grants nothing. Without it, the engagement's context is not checked.")
@click.option("--key", "keys", multiple=True, metavar="KID=FILE",
              help="Also trust this engagement-signing key (Ed25519; PEM or base64url raw) under KID.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: boundaries, authority, skills.")
@click.option("-o", "--output", metavar="FILE", help="Write here instead of standard output.")
def resolve(contracts_path, mappings_path, skills_path, connection_path, engagement_path, policy_path,
            required, now, skew_seconds, context, keys, as_json, output) -> None:
    """Resolve skills against connection ∩ engagement ∩ runtime policy and this host's tools.

    Prints, per skill, whether it is available, the tool bound to each capability (and whether each
    use needs confirmation), and for each unmet requirement every reason: not granted by the
    connection or the engagement, denied by a runtime policy rule, no contract, no host mapping,
    connection revoked, engagement rejected.
    """
    inputs = {"--contracts": contracts_path, "--mappings": mappings_path, "--skills": skills_path,
               "--connection": connection_path, "--engagement": engagement_path, "--policy": policy_path}
    from_stdin = [option for option, path in inputs.items() if path == "-"]
    from_stdin += [f"--key {kid}" for kid, path in map(_key_option, keys) if path == "-"]
    if len(from_stdin) > 1:
        raise BadInput(f"standard input is read once: {' and '.join(from_stdin)} each ask for it; give all but "
                       f"one as a file")
    # a bad output path fails before anything is read, and an input is never replaced by the answer
    check_outputs([output])
    check_not_inputs([output], {**inputs, **{f"--key {kid}": path for kid, path in map(_key_option, keys)}})
    try:
        at = current_instant(now)
    except ValueError:
        raise BadInput(f"--now: expected an RFC 3339 date-time with an offset, found {now!r}") from None
    contracts = _documents(contracts_path, parse_contracts, "contracts")
    mappings = _documents(mappings_path, parse_mappings, "mappings")
    skills = _documents(skills_path, parse_skills, "skills")
    connection = _trust(_document(connection_path, parse_connection, "a connection"), keys)
    policy = _document(policy_path, parse_policy, "a policy")
    # the descriptor as received: it is judged in the resolution (a malformed one is an answer)
    engagement = _one_of(engagement_path, parse_engagement, "an engagement")
    known = {skill.id for skill in skills}
    unknown = [s for s in dict.fromkeys(required) if s not in known]
    if unknown:
        raise BadInput([f"--require {s}: no skill with this id in {skills_path}" for s in unknown])
    resolution = Resolver(contracts, mappings, skills).resolve(connection, engagement, policy, now=at,
                                                               skew_seconds=skew_seconds, context=context)
    required_ids = set(required) if required else known
    ok = all(resolution.is_available(s) for s in required_ids)
    stamp = format_instant(at)
    with atomic_output(output, "wb") as out:
        if as_json:
            out.write(orjson.dumps(_json(resolution, required_ids, ok, stamp)) + b"\n")
        else:
            out.write(("\n".join(_text(resolution, required_ids, stamp)) + "\n").encode())
    raise SystemExit(EXIT_OK if ok else EXIT_NEGATIVE)
