"""`a3fast encode` and `a3fast decode`: between spec JSON traces and compact ones (docs/compact-format.md)."""
from __future__ import annotations

import click
import orjson

from ..compact import Encoder
from .common import atomic_output, output_option, progress
from .trace_input import read_records


def _write(records, count, label, out_path) -> None:
    with atomic_output(out_path) as out, progress(records, count, label) as items:
        for seq, kind, content in items:
            out.write(orjson.dumps({"seq": seq, "kind": kind, "content": content}) + b"\n")


@click.command()
@click.argument("trace", default="-")
@output_option("Output file (default: standard output).")
def encode(trace, output):
    """Rewrite a trace with compact placement records (lossless; others stay as they are)."""
    encoder = Encoder()
    records = list(read_records(trace))
    _write(((seq, kind, encoder.encode(seq, kind, content)) for seq, kind, content in records),
           len(records), "encoding", output)


@click.command()
@click.argument("trace", default="-")
@output_option("Output file (default: standard output).")
def decode(trace, output):
    """Rewrite a compact trace in the spec's JSON form (exactly the records it was made from)."""
    records = list(read_records(trace, decode=True))
    _write(records, len(records), "writing", output)
