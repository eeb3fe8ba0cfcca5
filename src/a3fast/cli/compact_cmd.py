"""`a3fast encode` and `a3fast decode`: between spec JSON traces and compact ones (docs/compact-format.md).

Both rewrite only the content of placement records and keep every record whole — members other
than seq/kind/content too, in their order — so decoding an encoded trace gives back its input.
Bad input is refused before anything is written: one line per problem naming the line and the
record's seq and member, exit 2, and an existing output file is left as it was.
"""
from __future__ import annotations

from typing import Any, Callable

import click
import msgspec
import orjson

from ..record.compact import CompactError, Decoder, Encoder
from ..trace import TraceProblem, read_values
from .common import BadInput, atomic_output, output_option, progress, read_bytes

_JSON = msgspec.json.Decoder()


def read_whole_records(path: str) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(where, record) for every readable record of a JSON Lines trace or a JSON array of records,
    each the whole object it is, and a line for every place that breaks the trace format (docs/design.md,
    reading 7, checked by the same rules as every other command's reading)."""
    data = read_bytes(path)
    values: list[Any] = []
    wheres: list[str] = []
    problems: list[str] = []
    if data.lstrip()[:1] == b"[":
        values = _decode(data, f"{path}: not a JSON array of records", problems)
        if not isinstance(values, list):
            raise BadInput(problems or [f"{path}: expected a JSON array of records or JSON Lines"])
        wheres = [f"record {i}" for i in range(1, len(values) + 1)]
    else:
        for lineno, line in enumerate(data.split(b"\n"), 1):
            if line.strip():
                value = _decode(line, f"{path}: line {lineno}: not JSON", problems)
                if value is not _UNREADABLE:
                    values.append(value)
                    wheres.append(f"line {lineno}")
    records = []
    for item in read_values(values):
        where = wheres[item.index - 1]
        if isinstance(item, TraceProblem):
            problems.append(f"{path}: {where}: {item.message}")
        else:
            records.append((where, values[item.index - 1]))
    return records, problems


_UNREADABLE = object()


def _decode(data: bytes, what: str, problems: list[str]) -> Any:
    try:
        return _JSON.decode(data)
    except msgspec.MsgspecError as exc:
        problems.append(f"{what}: {str(exc).removeprefix('JSON is malformed: ')}")
    except RecursionError:
        problems.append(f"{what}: nested too deeply to read")
    return _UNREADABLE


def _rewrite(trace: str, out_path: str | None, content_of: Callable[[int, str, Any], Any],
             label: str) -> None:
    """Every record of `trace` with its content replaced by `content_of(seq, kind, content)`,
    written only when every record was rewritten."""
    records, problems = read_whole_records(trace)
    lines = []
    with progress(records, len(records), label) as items:
        for where, record in items:
            lines += _rewritten(trace, where, record, content_of, problems)
    if problems:
        raise BadInput(problems)
    with atomic_output(out_path) as out:
        out.writelines(lines)


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
