"""`a3fast encode` and `a3fast decode`: between spec JSON traces and compact ones (docs/compact-format.md).

Both rewrite only the content of placement records and keep every record whole — members other
than seq/kind/content too, in their order — so decoding an encoded trace gives back its input.
Bad input is refused before anything is written: one line per problem naming the line and the
record's seq and member, exit 2, and an existing output file is left as it was.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import click
import msgspec
import orjson

from ..record.compact import CompactError, Decoder, Encoder
from ..trace import TraceProblem, read_values
from ..framing import NOT_DOCUMENTS, iter_documents
from ..document import syntax_error, within_line
from ..errors import Problem, SchemaError
from ..files import cannot_read, input_source, require_kind
from .common import BadInput, atomic_output, check_not_inputs, check_outputs, output_option, progress

_JSON = msgspec.json.Decoder()


def read_whole_records(path: str) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(where, record) for every readable record of a JSON Lines trace or a JSON array of records,
    each the whole object it is, and a line for every place that breaks the trace format (docs/design.md,
    reading 7, checked by the same rules as every other command's reading). The documents are
    framed by a3fast.framing; a record is decoded as msgspec reads it, since a trace may
    hold what the document rule refuses and rewriting must keep it."""
    require_kind(path, "trace")
    values: list[Any] = []
    wheres: list[str] = []
    places: list[int] = []          # each value's line (or its place in an array), for the problems' order
    problems: list[tuple[int, str]] = []
    try:
        for document in iter_documents(input_source(path), decode=_decode):
            if document.problems:
                found = document.problems[0].found
                if document.line is not None:
                    problems.append((document.line, f"{path}: line {document.line}: not JSON: {found}"))
                elif document.problems[0].expected == NOT_DOCUMENTS:
                    raise BadInput(f"{path}: expected a JSON array of records or JSON Lines")
                else:
                    raise BadInput(f"{path}: not a JSON array of records: {found}")
                continue
            values.append(document.value)
            wheres.append(f"line {document.line}" if document.line is not None else f"record {len(values)}")
            places.append(document.line if document.line is not None else len(values))
    except OSError as exc:
        raise cannot_read(path, exc) from None
    records = []
    for item in read_values(values):
        where = wheres[item.index - 1]
        if isinstance(item, TraceProblem):
            problems.append((places[item.index - 1], f"{path}: {where}: {item.message}"))
        else:
            records.append((where, values[item.index - 1]))
    # in the order of the lines, as every other command lists them (a line that is not JSON is
    # found while framing, before the records are read)
    return records, [text for _, text in sorted(problems, key=lambda problem: problem[0])]


def _decode(data: bytes) -> Any:
    try:
        return _JSON.decode(data)
    except msgspec.MsgspecError as exc:
        # in the words every reader uses: orjson's, which name where (msgspec calls a lone surrogate
        # "truncated"), and a byte that is not UTF-8 named with its column, as `verify` names it
        why = within_line(syntax_error(data, exc))
    except RecursionError:
        why = "nested too deeply to read"
    raise SchemaError([Problem("$", "JSON", why)])


def _rewrite(trace: str, out_path: str | None, content_of: Callable[[int, str, Any], Any],
             label: str) -> None:
    """Every record of `trace` with its content replaced by `content_of(seq, kind, content)`,
    written only when every record was rewritten. A file is written as the records are rewritten
    (a decoded trace can be hundreds of times its compact size) and put in place at the end;
    standard output, which cannot take back a line, gets the lines once all were made."""
    check_outputs([out_path])
    check_not_inputs([out_path], {trace: trace})
    records, problems = read_whole_records(trace)
    with atomic_output(out_path) as out:
        held: list[bytes] | None = [] if out is sys.stdout.buffer else None
        with progress(records, len(records), label) as items:
            for where, record in items:
                lines = _rewritten(trace, where, record, content_of, problems)
                if held is None:
                    out.writelines(lines)
                else:
                    held += lines
        if problems:
            raise BadInput(problems)      # the file written so far is removed, never put in place
        if held:
            out.writelines(held)


def _rewritten(trace: str, where: str, record: dict[str, Any],
               content_of: Callable[[int, str, Any], Any], problems: list[str]) -> list[bytes]:
    try:
        content = content_of(record["seq"], record["kind"], record["content"])
    except CompactError as exc:
        problems.append(f"{trace}: {where}: {exc}")
        return []
    return [_json_line({**record, "content": content}, f"{trace}: {where}")]


def _json_line(record: dict[str, Any], where: str) -> bytes:
    try:
        return orjson.dumps(record) + b"\n"
    except TypeError:  # beyond orjson: an integer over 64 bits, nesting deeper than 255 levels
        pass
    try:
        return msgspec.json.encode(record) + b"\n"
    except (msgspec.MsgspecError, RecursionError, TypeError, ValueError) as exc:
        raise BadInput(f"{where}: the record cannot be written as JSON: {exc}") from None


@click.command()
@click.argument("trace", default="-")
@output_option("Output file (default: standard output).")
def encode(trace, output):
    """Rewrite a trace with compact placement records (lossless: a record that cannot be encoded
    exactly, and every other record, is written as it is)."""
    _rewrite(trace, output, Encoder().encode, "encoding")


@click.command()
@click.argument("trace", default="-")
@output_option("Output file (default: standard output).")
def decode(trace, output):
    """Rewrite a compact trace in the spec's JSON form (exactly the records it was made from)."""
    _rewrite(trace, output, Decoder().decode_content, "decoding")
