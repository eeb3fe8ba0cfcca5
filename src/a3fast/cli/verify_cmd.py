"""`a3fast verify`: check traces per §7 (docs/design.md, "Contracts other programs rely on").

Human-readable by default; `--json` prints one object per trace per line:
`{"path", "valid", "records", "errors": [{"code", "seq", "line", "message"}], "warnings": [...]}`.
Exit 0 when every trace is valid, 1 when some is invalid, 2 when some is unreadable: it cannot be
opened, or nothing in it reads as a record (empty, not JSON, or JSON that holds no record). A trace
with records and some lines that break the format is invalid (E_TRACE), exit 1.

`--ray [ADDRESS]` verifies the files on Ray tasks (a3fast.distributed.verify_archive), one file per
task, with the same findings, output and exit code as serially.
"""
from __future__ import annotations

import os
import sys
import re
from typing import BinaryIO, Iterator

import click
import orjson

from ..errors import printable
from ..files import InputError, input_source, require_kind
from ..verify import Finding, is_valid, summarise, verify_stream_counted
from .common import EXIT_BAD_INPUT, EXIT_NEGATIVE, EXIT_OK, say, shown, stderr_is_terminal

#: Below this size a trace verifies in well under a second: no progress bar.
PROGRESS_MIN_BYTES = 16 * 1024 * 1024


#: What `--ray` reads as a cluster address rather than as the first trace.
_ADDRESS = re.compile(r"^(auto|local|ray://\S+|[A-Za-z0-9.\-\[\]:]+:\d+)$")


@click.command()
@click.argument("traces", nargs=-1, metavar="[TRACE ...|-]")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per trace per line, for machines.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None,
              metavar="[ADDRESS]",
              help="Verify the files on Ray tasks, one per file: ADDRESS is auto, ray://HOST:PORT or "
                   "HOST:PORT of a running cluster; without it, or with 'local', a local Ray.")
def verify(traces: tuple[str, ...], as_json: bool, ray_address: str | None) -> None:
    """Verify traces (JSON Lines or a JSON array of records; '-' or nothing for standard input)
    by the procedure of §7, reporting every error with its code, seq and line.

    Exit 0 all valid, 1 some invalid, 2 unreadable input.
    """
    if ray_address is not None and (not _ADDRESS.match(ray_address) or os.path.exists(ray_address)):
        # `--ray trace.jsonl ...`: no address given, the word is the first trace
        traces, ray_address = (ray_address, *traces), "local"
    exit_code = EXIT_OK
    for path, outcome in _results(traces or ("-",), ray_address):
        if isinstance(outcome, (InputError, str)):
            # a file of another kind a3fast writes (one line), or one that cannot be opened
            why = str(outcome) if isinstance(outcome, InputError) else f"{shown(path)}: cannot read: {outcome}"
            say(f"a3fast: {printable(why)}")
            if as_json:  # every trace named gets its result, so machines can tell which failed
                _write_json(result_json(path, [], 0, unreadable=why, valid=False))
            exit_code = EXIT_BAD_INPUT
            continue
        findings, records = outcome
        if not records:
            label = "standard input" if path == "-" else shown(path)
            why = f"{label}: unreadable: {_no_records(findings)}"
            if as_json:
                _write_json(result_json(path, findings, records, unreadable=why))
            say(f"a3fast: {printable(why)}")
            exit_code = EXIT_BAD_INPUT
            continue
        if as_json:
            _write_json(result_json(path, findings, records))
        if not is_valid(findings) and exit_code == EXIT_OK:
            exit_code = EXIT_NEGATIVE
        if not as_json:
            click.echo(summarise(findings, "standard input" if path == "-" else shown(path)))
    sys.exit(exit_code)


def _results(paths: tuple[str, ...], ray_address: str | None
             ) -> Iterator[tuple[str, tuple | str | InputError]]:
    """Per path in order: (findings, records), why it could not be read, or the InputError of a
    file of another kind."""
    if ray_address is None:
        for path in paths:
            try:
                require_kind(path, "trace")
                yield path, _verify_path(path)
            except InputError as exc:
                yield path, exc
            except OSError as exc:
                yield path, exc.strerror or str(exc)
        return
    if "-" in paths:
        raise click.UsageError("--ray verifies files; standard input ('-') cannot be sent to Ray tasks")
    # each path in its place: a file of another kind is refused here, the rest go to Ray, and the
    # results come back in the order of the paths sent
    refused: list[InputError | None] = []
    for path in paths:
        try:
            require_kind(path, "trace")
            refused.append(None)
        except InputError as exc:
            # a file that cannot be read goes too: the Ray run says why, as the serial one does
            refused.append(exc if os.path.isfile(path) else None)
    sent = tuple(path for path, refusal in zip(paths, refused) if refusal is None)
    try:
        from ..distributed import verify_archive
        results = iter(verify_archive(sent, None if ray_address == "local" else ray_address) if sent else ())
        for path, refusal in zip(paths, refused):
            if refusal is not None:
                yield path, refusal
                continue
            result = next(results)
            yield result.path, (result.unreadable or (result.findings, result.records))
    except ImportError as exc:
        say(f"a3fast: --ray: {exc}")
        sys.exit(EXIT_BAD_INPUT)
    except ConnectionError as exc:
        say(f"a3fast: --ray {ray_address}: cannot reach the Ray cluster: {exc}")
        sys.exit(EXIT_BAD_INPUT)


def _no_records(findings: list[Finding]) -> str:
    if not findings:
        return "no records (the input is empty)"
    return f"no records: not a trace of {{seq, kind, content}} records ({findings[0]})"


def _write_json(line: bytes) -> None:
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.buffer.flush()


def result_json(path: str, findings: list[Finding], records: int | None = None, *,
                unreadable: str | None = None, valid: bool | None = None) -> bytes:
    """The `--json` result form for one trace (what `a3fast conformance --verifier` reads).

    `unreadable` says why the CLI exits 2 for it. An empty trace stays valid (§7 finds nothing in
    it, as the conformance vectors expect), with `"records": 0`; a file that could not be read at
    all has no verdict but `valid=False`."""
    return orjson.dumps({
        "path": shown(path),
        "valid": is_valid(findings) if valid is None else valid,
        **({} if records is None else {"records": records}),
        **({} if unreadable is None else {"unreadable": unreadable}),
        "errors": [f.to_dict() for f in findings if f.is_error],
        "warnings": [f.to_dict() for f in findings if not f.is_error],
    })


def _verify_path(path: str) -> tuple[list[Finding], int]:
    source = input_source(path)
    if not isinstance(source, str):  # standard input, or a pipe given by name: one stream, looked at already
        return _verify_with_progress(source, "standard input" if path == "-" else path)  # type: ignore[arg-type]
    with open(path, "rb") as fh:
        return _verify_with_progress(fh, path)


def _verify_with_progress(stream: BinaryIO, label: str) -> tuple[list[Finding], int]:
    """Verify, drawing a progress bar on standard error for a long trace when it is a terminal."""
    size = _size(stream)
    if size < PROGRESS_MIN_BYTES or not stderr_is_terminal():
        return verify_stream_counted(stream)
    with click.progressbar(length=size, label=f"verifying {label}", file=sys.stderr,
                           show_eta=True, show_percent=True) as bar:
        return verify_stream_counted(stream, progress=bar.update)


def _size(stream: BinaryIO) -> int:
    """The stream's size if it is a regular file (a pipe has none)."""
    try:
        return os.fstat(stream.fileno()).st_size
    except (OSError, ValueError, AttributeError):
        return 0
