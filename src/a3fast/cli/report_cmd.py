"""`a3fast report`: a trace as one self-contained HTML page (totals, charts, funnels, findings)."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import printable
from ..files import (STDIN, cannot_read, display_name, input_source, is_special, require_kind, shown_text,
                     why_not_a_file)
from .common import EXIT_OK, BadInput, atomic_output, check_outputs, output_option, progress_bar


@click.command()
@click.argument("trace")
@output_option("Where the page is written (default: TRACE with .html; replaced atomically).", aliases=())
@click.option("--detailed", type=click.IntRange(0), default=None, metavar="N",
              help="Placements kept with funnel, scores and candidates (default 1,000; any with a finding too).")
@click.option("--candidates", type=click.IntRange(1), default=None, metavar="N",
              help="Candidates kept per placement (default 2,000).")
def report(trace, output, detailed, candidates):
    """Write the report of TRACE (spec or compact form) as one HTML file that loads nothing.
    TRACE may be '-' (standard input) when -o names the page's file."""
    from ..report import Limits, ReportInputError, render

    path = Path(trace)
    # standard input, or a pipe given by name (`<(...)`): read once, as it streams
    from_stdin = trace == STDIN or is_special(trace)
    if from_stdin and output is None:
        raise BadInput(f"report needs a trace file, not {'standard input' if trace == STDIN else 'a pipe'} "
                       f"(the page is written beside it); or give the page a file with -o")
    if output == "-":
        raise BadInput("-o -: the page is written to a file, not standard output")
    limits = Limits()
    if detailed is not None or candidates is not None:
        limits = Limits(detailed_placements=limits.detailed_placements if detailed is None else detailed,
                        candidates_per_placement=limits.candidates_per_placement if candidates is None else candidates)
    if not from_stdin and not path.is_file():
        raise BadInput(f"{trace}: cannot read: {why_not_a_file(path)}")
    target = output or str(path.with_suffix(".html"))
    if not from_stdin and Path(target).resolve() == path.resolve():
        raise BadInput(f"{target}: the report must go to a file other than the trace it reads")
    check_outputs([target])  # a bad output path fails before the trace is read
    require_kind(trace, "trace")
    name = display_name(trace) if from_stdin else shown_text(path.name)
    try:
        # the bar (on a terminal only) follows the reading, which is most of the time of a large trace
        with progress_bar(0 if from_stdin else path.stat().st_size, f"reading {printable(name)}") as update:
            source = input_source(trace) if from_stdin else str(path)
            html = render(source, name=name, limits=limits, progress=update, allow_empty=False)
    except ReportInputError as exc:
        raise BadInput(exc.problems) from None
    except OSError as exc:
        raise BadInput(str(cannot_read(trace, exc))) from None
    with atomic_output(target) as out:
        out.write(html.encode("utf-8"))
    # the page shows the name as it is (escaped as HTML); a terminal line shows it on one line
    click.echo(f"{printable(shown_text(target))}: report of {printable(name)} ({len(html) / 1e6:.1f} MB)")
    return EXIT_OK
