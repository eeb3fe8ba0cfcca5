"""`a3fast encode` and `a3fast decode`: between spec JSON traces and compact ones (docs/compact-format.md)."""
from __future__ import annotations

import click
import orjson

from ..compact import Encoder
from .common import atomic_output
from .trace_input import read_records


def _write(records, out_path) -> None:
    with atomic_output(out_path) as out:
        for seq, kind, content in records:
            out.write(orjson.dumps({"seq": seq, "kind": kind, "content": content}) + b"\n")


@click.command()
@click.argument("trace", default="-")
@click.option("--out", "out_path", default=None, metavar="FILE", help="Output file (default: standard output).")
def encode(trace, out_path):
    """Rewrite a trace with compact placement records (lossless; others stay as they are)."""
    encoder = Encoder()
    _write(((seq, kind, encoder.encode(seq, kind, content)) for seq, kind, content in read_records(trace)), out_path)


@click.command()
@click.argument("trace", default="-")
@click.option("--out", "out_path", default=None, metavar="FILE", help="Output file (default: standard output).")
def decode(trace, out_path):
    """Rewrite a compact trace in the spec's JSON form (exactly the records it was made from)."""
    _write(read_records(trace, decode=True), out_path)
