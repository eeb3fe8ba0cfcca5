"""Reading whole traces for the commands that transform or explain them (not the verifier, which
reports a broken trace as findings instead of refusing it)."""
from __future__ import annotations

from typing import Iterator

from ..record.compact import CompactError, Decoder
from ..trace import TraceProblem, TraceContentError, read_trace
from ..files import cannot_read, input_source, require_kind
from .common import BadInput


def read_records(path: str, *, decode: bool = False) -> Iterator[tuple[int, str, object]]:
    """(seq, kind, content) of every record; a trace that breaks its format is BadInput, naming
    every problem. With `decode`, compact records come back in spec form."""
    require_kind(path, "trace")
    source = input_source(path)
    decoder = Decoder() if decode else None
    problems = []
    try:
        items = list(read_trace(source))
    except OSError as exc:
        raise cannot_read(path, exc) from None
    records = []
    for item in items:
        if isinstance(item, TraceProblem):
            problems.append(f"{path}: {item.where}: {item.message}")
            continue
        try:
            content = item.content
            if decoder is not None:
                content = decoder.decode_content(item.seq, item.kind, content)
        except (TraceContentError, CompactError) as exc:
            where = f"line {item.line}" if item.line is not None else f"record {item.index}"
            problems.append(f"{path}: {where}: {exc}")  # the message names the seq
            continue
        records.append((item.seq, item.kind, content))
    if problems:
        raise BadInput(problems)
    return iter(records)
