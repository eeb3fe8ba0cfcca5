"""Traces (docs/design.md, reading 7): JSON Lines (or a JSON array) of `{"seq", "kind", "content"}` records.

Writing is append-only, one record per line, flushed per record; with `fsync=True` each record is
also forced to disk, so a crash loses at most the record being written. A writer gives seq numbers
and writes a placement's records in spec JSON or in the compact form (docs/compact-format.md),
whose name table it writes once; `read_records` reads either form back as spec records.

Reading streams JSON Lines one line at a time (`a3fast.framing`, the one framing of every input),
so memory does not grow with the trace. Whatever
breaks the format — a line that is not JSON, a record that breaks the document rule
(a3fast.document), a record without `seq`/`kind`/`content`, a `seq` that does not increase — comes
out as a TraceProblem in place, and reading goes on with the records that can still be read; the
verifier reports each as E_TRACE. No input makes a reader raise.
"""
from __future__ import annotations

import operator
import os
from pathlib import Path
from typing import (TYPE_CHECKING, Any, BinaryIO, Callable, Iterable, Iterator, Mapping, NamedTuple, TypeGuard,
                    Union)

import msgspec
import orjson

from . import document
from .document import INT_MAX, INT_MIN, MAX_RECORD_DEPTH
from .errors import A3Error, Problem, describe, json_path
from .framing import ARRAY, LINES, Source, blank, framed
from .record.compact import Decoder, Encoder
from .record.write import admitted_json, rejection_json, scheduling_json, submitted_json

if TYPE_CHECKING:
    from .fleet.placement import Placement

__all__ = ["TraceWriter", "record_line", "record_lines", "placement_lines", "TraceRecord", "TraceProblem", "TraceItem", "read_trace", "read_lines",
           "read_values", "read_records", "TraceContentError", "TraceError", "FORMS"]

#: The forms a TraceWriter writes placements in.
FORMS = ("spec", "compact")

_UNDECODED = object()


#: A record kind's JSON, for the kinds a placement writes (any other kind is encoded when written).
_KIND_JSON = {kind: orjson.dumps(kind) for kind in ("task.submitted", "task.admitted", "task.bound", "task.rejected")}


#: What follows a record's content on its line.
_LINE_END = b"}\n"


def _line_start(seq: int, kind: str) -> bytes:
    """A trace line up to its record's content: `{"seq":N,"kind":K,"content":`."""
    kind_json = _KIND_JSON.get(kind)
    if kind_json is None:
        kind_json = orjson.dumps(kind)
    return b'{"seq":%d,"kind":%b,"content":' % (seq, kind_json)


def record_line(seq: int, kind: str, content_json: bytes) -> bytes:
    """One trace line (newline included): the record `{"seq", "kind", "content"}`, content given as JSON."""
    return b"".join((_line_start(seq, kind), content_json, _LINE_END))


def record_lines(records: Iterable[tuple[str, bytes]], start_seq: int) -> bytes:
    """The trace lines of `(kind, content JSON)` records numbered from `start_seq`, as a TraceWriter
    starting there writes them."""
    return b"".join([record_line(seq, kind, content) for seq, (kind, content) in enumerate(records, start_seq)])


def placement_lines(p: "Placement", seq: int, task: Mapping[str, Any] | None = None) -> tuple[bytes, int]:
    """The spec trace lines of one placement numbered from `seq`, and how many records they are:
    the bytes of `record_lines(placement_records(p, task), seq)`, the large record (the scheduling
    object, or the rejection with its lists) written by the engine into the same buffer as the
    lines before it and its line's own frame, so its tens of kilobytes are copied once. TypeError
    or ValueError for a `seq` no record can carry (its last record numbered past 2^64-1 too)."""
    if type(seq) is not int:
        raise TypeError(f"seq: expected an integer, found {describe(seq)}")
    if seq < INT_MIN:
        raise ValueError(f"seq: expected an integer from -2^63 to 2^64-1, found {describe(seq)}")
    _check_last_seq(seq + (1 if p.resumed else 3 if p.bound else 2) - 1)
    if p.resumed:
        return scheduling_json(p, _line_start(seq, "task.bound") + b'{"resumed":true,"scheduling":',
                               b"}" + _LINE_END), 1
    head = record_line(seq, "task.submitted", submitted_json(p, task))
    if p.bound:
        head += record_line(seq + 1, "task.admitted", admitted_json(p))
        return scheduling_json(p, head + _line_start(seq + 2, "task.bound") + b'{"scheduling":',
                               b"}" + _LINE_END), 3
    return rejection_json(p, head + _line_start(seq + 1, "task.rejected"), _LINE_END), 2


class TraceContentError(A3Error):
    """A record whose content is valid JSON syntax but cannot be decoded (a number out of range)."""


class TraceError(A3Error):
    """A trace that `read_records` cannot read as records; the message names the line (or the
    record's place) and what is wrong with it."""


def _json_of(value: Any, what: str) -> bytes:
    """`value` as JSON, as orjson writes it, refusing what it would write wrongly: NaN and infinity,
    which it writes as null (ValueError naming `what` and the place). Only a text holding "null"
    is walked for them."""
    try:
        data = orjson.dumps(value)
    except TypeError as exc:       # a key that is not a string, an integer past 64 bits, a set...
        raise ValueError(f"{what}: {exc} (JSON cannot carry it)") from None
    if b"null" in data:
        where = _non_finite_at(value)
        if where is not None:
            raise ValueError(f"{what}: {where}: expected a finite number, found NaN or infinity (JSON has neither)")
    return data


def _utf8_writable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:      # a lone surrogate
        return False
    return True


def _non_finite_at(value: Any) -> str | None:
    """The JSON path of the first NaN or infinity in `value`, or None (iterative: no stack limit).
    Narrower than `document.check`, which also refuses types orjson writes (dates, ordered dicts)."""
    stack = [(value, "$")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                return where
        elif isinstance(item, Mapping):
            stack.extend((child, json_path(where, key)) for key, child in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((child, json_path(where, i)) for i, child in enumerate(item))
    return None


def _check_last_seq(seq: int) -> None:
    """A record numbered past what the document rule lets a seq be is refused before it is written
    (the verifier would refuse the line; a trace's numbers are not cut or wrapped)."""
    if seq > INT_MAX:
        raise ValueError(f"seq: a trace's records are numbered to 2^64-1 at most; this write would number "
                         f"one {seq}")


def _check_placement(placement: Any, task: Any, placement_is: str, task_is: str) -> None:
    """TypeError or ValueError, naming it, for a placement `TraceWriter` cannot write or a task
    whose members cannot be added to its task.submitted; checked before anything moves."""
    from .fleet.placement import Placement, check_built

    if not isinstance(placement, Placement):
        raise TypeError(f"{placement_is}: expected a Placement, found {describe(placement)}")
    check_built(placement, placement_is)
    if task is not None:
        if not isinstance(task, Mapping) or not all(type(key) is str for key in task):
            raise TypeError(f"{task_is}: expected a JSON object of members to add to task.submitted, "
                            f"found {describe(task)}")
        _json_of(task, task_is)     # refused before anything moves; the writers write it again


class TraceWriter:
    """Append records to a trace: the records of a placement (`write`), or any record (`append`).
    Both return seq numbers, counted from `start_seq`.

    `form` is "spec" (§6 JSON) or "compact": compact placements refer to a name table written once,
    in the first placement record that needs it, so one writer writes one trace. A path is opened
    for appending; a binary file is written as it is and left open.
    """

    def __init__(self, target: str | os.PathLike | BinaryIO, *, form: str = "spec", fsync: bool = False,
                 start_seq: int = 1):
        if form not in FORMS:
            raise ValueError(f"form: expected one of {', '.join(FORMS)}, found {form!r}")
        if isinstance(start_seq, bool) or not hasattr(type(start_seq), "__index__"):
            raise TypeError(f"start_seq: expected an integer, found {describe(start_seq)}")
        start_seq = operator.index(start_seq)      # numpy's integers too
        if not INT_MIN <= start_seq <= INT_MAX:
            raise ValueError(f"start_seq: expected an integer from -2^63 to 2^64-1, found {start_seq}")
        if not isinstance(target, (str, os.PathLike)) and not callable(getattr(target, "write", None)):
            raise TypeError(f"target: expected a path or a binary file, found {describe(target)}")
        self.form = form
        self._encoder = Encoder() if form == "compact" else None
        if isinstance(target, (str, os.PathLike)):
            # unbuffered: a write that fails is cut back from the file, never left in a buffer
            # to reach it at the next flush
            self._fh: BinaryIO = open(Path(target), "ab", buffering=0)
            self._owned = True
        else:
            self._fh = target
            self._owned = False
        self._fsync = fsync
        self.next_seq = start_seq
        #: why a caller's file failed: what it then holds is not known, so nothing more is written
        self._broken: str | None = None

    def append(self, kind: str, content: Any = None, *, content_json: bytes | None = None) -> int:
        """Write one record; `content_json` passes content already encoded as JSON bytes (a JSON
        object, which is not parsed again). TypeError or ValueError naming `kind` or `content` for a
        record no trace reader would take, before anything is written."""
        if type(kind) is not str or not kind or not _utf8_writable(kind):
            raise TypeError(f"kind: expected a record kind (a non-empty string UTF-8 can write), found {describe(kind)}")
        seq = self.next_seq
        _check_last_seq(seq)
        if content_json is None:
            if not isinstance(content, Mapping):
                raise TypeError(f"content: expected a JSON object (a mapping), found {describe(content)}")
            content_json = _json_of(content, "content")
        elif not isinstance(content_json, (bytes, bytearray, memoryview)) \
                or bytes(content_json[:1]) != b"{" or bytes(content_json[-1:]) != b"}":
            raise ValueError(f"content_json: expected a JSON object's bytes, found {describe(content_json, 60)}")
        elif b"\n" in (bytes(content_json) if type(content_json) is memoryview else content_json):
            # a record is one line of JSON Lines: a newline between tokens would cut it in two (a
            # memoryview is read as bytes: its `in` looks for an int)
            raise ValueError("content_json: expected a JSON object on one line, found one with a newline in it")
        self._emit(record_line(seq, kind, content_json))
        self.next_seq = seq + 1
        return seq

    def write(self, placement: "Placement", task: Mapping[str, Any] | None = None) -> list[int]:
        """Write the records of one placement — task.submitted, then task.admitted + task.bound,
        or task.rejected; a resumed placement is one task.bound — and return their seqs. `task`
        adds members to task.submitted (goal, inputs, …). The placement is told the seq of its
        last record (`placement.seq`, its task.bound or task.rejected), so `fleet.resume(p)` of a
        placement written here cites the task.bound that holds its explanation, as
        `fleet.resume(p, seq=N)` does with N the last seq `write` returned for `p`.

        All or nothing: a write that fails (a full disk, a record that cannot be written) leaves
        the writer where it was, and a file it opened as it was (a caller's file cannot be cut
        back: the writer then refuses to write more to it)."""
        _check_placement(placement, task, "placement", "task")
        seq = self.next_seq
        mark = self._encoder.mark() if self._encoder is not None else None
        try:
            if self._encoder is not None:
                lines, count = self._encoder.encode_placement_lines(seq, placement, task)
            else:
                lines, count = placement_lines(placement, seq, task)
            _check_last_seq(seq + count - 1)
            self._emit(lines)
        except BaseException:
            if self._encoder is not None and mark is not None:
                self._encoder.rewind(mark)    # the name table it would have sent was not written
            raise
        self.next_seq = seq + count
        placement.seq = self.next_seq - 1
        return list(range(seq, self.next_seq))

    def write_many(self, placements: Iterable["Placement"],
                   tasks: Iterable[Mapping[str, Any] | None] | None = None) -> list[list[int]]:
        """`write` of each placement in order (`tasks` beside them, each None or members to add to its
        task.submitted), in one write to the file: each placement's seqs. The bytes are those of
        `write` one at a time; in compact form the engine gathers and writes each run of usual
        placements in one call (`Encoder.encode_placements_lines`). Every placement and task is
        checked before anything is written, and the batch is all or nothing, as `write` is: a failed
        write leaves the writer, and a file it opened, as they were, and no placement's `seq` moved."""
        placements = list(placements)
        task_list: list[Mapping[str, Any] | None] = [None] * len(placements) if tasks is None else list(tasks)
        if len(task_list) != len(placements):
            raise ValueError(f"tasks: {len(task_list)} for {len(placements)} placements")
        for i, (placement, task) in enumerate(zip(placements, task_list)):
            _check_placement(placement, task, f"placements[{i}]", f"tasks[{i}]")
        self._refuse_if_broken()        # an empty batch too, as any write to such a file
        if not placements:
            return []
        seq = self.next_seq
        mark = self._encoder.mark() if self._encoder is not None else None
        try:
            if self._encoder is not None:
                lines, counts = self._encoder.encode_placements_lines(seq, placements, task_list)
            else:
                parts, counts, at = [], [], seq
                for placement, task in zip(placements, task_list):
                    written, count = placement_lines(placement, at, task)
                    parts.append(written)
                    counts.append(count)
                    at += count
                lines = b"".join(parts)
            _check_last_seq(seq + sum(counts) - 1)
            self._emit(lines)
        except BaseException:
            if self._encoder is not None and mark is not None:
                self._encoder.rewind(mark)    # the name table it would have sent was not written
            raise
        out = []
        for placement, count in zip(placements, counts):
            out.append(list(range(seq, seq + count)))
            seq += count
            placement.seq = seq - 1
        self.next_seq = seq
        return out

    def _refuse_if_broken(self) -> None:
        if self._broken is not None:
            raise ValueError(f"TraceWriter: an earlier write to its file failed ({self._broken}); what the file "
                             f"holds after it is not known: start a new trace")

    def _emit(self, data: bytes) -> None:
        self._refuse_if_broken()
        fh = self._fh
        if not self._owned:
            try:
                fh.write(data)
                fh.flush()
                if self._fsync:
                    os.fsync(fh.fileno())
            except BaseException as exc:
                self._broken = f"{type(exc).__name__}: {exc}"
                raise
            return
        fd = fh.fileno()
        start = os.fstat(fd).st_size      # read each time: another writer, or a rotation, may move it
        try:
            view = memoryview(data)
            while view:
                view = view[fh.write(view):]
            if self._fsync:
                os.fsync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, start)
            except OSError:
                self._broken = "it could not be cut back after a failed write"
            raise

    def close(self) -> None:
        if self._owned:
            self._fh.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# Reading (docs/design.md, reading 7)


class TraceRecord:
    """One readable record. `content` is decoded on first use: the verifier reads a large task.bound
    with a typed decoder straight from its line (`typed`) and never builds its content whole.

    `line` is the record's line in a JSON Lines trace (None in a JSON array or a list of values);
    `index` its 1-based position among the trace's records and unreadable lines.
    """

    __slots__ = ("seq", "kind", "line", "index", "typed", "_content", "_content_source")

    def __init__(self, seq: int, kind: str, line: int | None, index: int,
                 content: Any = _UNDECODED, typed: Any = None, source: bytes | None = None):
        self.seq = seq
        self.kind = kind
        self.line = line
        self.index = index
        #: the content as decoded by a caller's typed decoder (see `read_lines`), else None
        self.typed = typed
        self._content = content
        self._content_source = source  # the whole line, for a record read by a typed decoder

    @property
    def content(self) -> Any:
        """The decoded content; TraceContentError if it is JSON no decoder can hold (1e400) or, for
        a record a typed decoder accepted but whose content is needed whole, if it breaks the
        document rule (the other records were held to it when read)."""
        if self._content is _UNDECODED:
            # only a record read by a typed decoder is undecoded: take its content from the line
            assert self._content_source is not None  # kept for every typed record
            try:
                content = _ANY.decode(_ENVELOPE.decode(self._content_source).content)
            except (msgspec.MsgspecError, RecursionError) as exc:
                raise TraceContentError("the record's content cannot be read: "
                                        f"{_decode_error(self._content_source, exc)}") from None
            problems = document.validate(content, "$.content", MAX_RECORD_DEPTH - 1, decoded_json=True)
            if problems:
                raise TraceContentError(_rule_message(problems))
            self._content = content
        return self._content

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "kind": self.kind, "content": self.content}

    def __repr__(self) -> str:
        return f"TraceRecord(seq={self.seq}, kind={self.kind!r}, line={self.line})"


class TraceProblem(NamedTuple):
    """A place where the trace breaks its format (E_TRACE): a line that is not JSON, a record without
    `seq`/`kind`/`content`, or a `seq` that does not increase. `seq` is the record's, when it has one."""

    line: int | None
    index: int  # type: ignore[assignment]  # the record's position, as TraceRecord.index; shadows tuple.index
    seq: int | None
    message: str

    @property
    def where(self) -> str:
        return f"line {self.line}" if self.line is not None else f"record {self.index}"


TraceItem = Union[TraceRecord, TraceProblem]


class _Envelope(msgspec.Struct, gc=False):
    # The fast shape of a record; anything else is read again generically to say what is wrong.
    seq: int
    kind: str
    content: msgspec.Raw


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_ANY = msgspec.json.Decoder()


def _is_seq(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class _Sequencer:
    """Checks the record format and that seq increases; numbers the items it hands out."""

    def __init__(self) -> None:
        self.last_seq: int | None = None
        self.index = 0

    def value(self, value: Any, line: int | None) -> Iterator[TraceItem]:
        """A record given as a decoded JSON value (a JSON array's element, or a caller's dict)."""
        self.index += 1
        if not isinstance(value, Mapping):
            yield TraceProblem(line, self.index, None,
                               f"expected a record {{seq, kind, content}}, found {describe(value)}")
            return
        missing = [key for key in ("seq", "kind", "content") if key not in value]
        seq = value.get("seq")
        seq = seq if _is_seq(seq) else None
        if missing:
            yield TraceProblem(line, self.index, seq,
                               f"the record has no {' / '.join(repr(k) for k in missing)}")
            return
        if seq is None:
            yield TraceProblem(line, self.index, None,
                               f"the record's seq must be an integer, found {describe(value['seq'])}")
            return
        if not isinstance(value["kind"], str):
            yield TraceProblem(line, self.index, seq,
                               f"the record's kind must be a string, found {describe(value['kind'])}")
            return
        yield from self._order(seq, line)
        if not isinstance(value["content"], Mapping):
            yield TraceProblem(line, self.index, seq, "the record's content must be an object, "
                               f"found {describe(value['content'])}")
            return
        yield TraceRecord(seq, value["kind"], line, self.index, content=value["content"])

    def _order(self, seq: int, line: int | None) -> Iterator[TraceProblem]:
        last = self.last_seq
        if last is not None and seq <= last:
            yield TraceProblem(line, self.index, seq,
                               f"seq {seq} does not increase (an earlier record has seq {last})")
        else:
            self.last_seq = seq


#: How far into a line to look for its kind when choosing a typed decoder.
_KIND_PEEK = 160


def read_lines(lines: Iterable[bytes], *, first_line: int = 1,
               typed: Mapping[str, msgspec.json.Decoder] | None = None) -> Iterator[TraceItem]:
    """Records of a JSON Lines trace, one line at a time (constant memory); blank lines are skipped.

    Every other line is decoded whole and held to the document rule (a3fast.document: nesting at
    most MAX_RECORD_DEPTH deep, integers within 64 bits); a line that breaks it is a TraceProblem.

    `typed` maps a kind to a decoder of a whole record `{seq: int, kind: str, content: <Struct>}`:
    a line whose first bytes name that kind is tried with it first, one pass, and its TraceRecord
    carries the result in `typed`. The bytes only choose which decoder tries: a record's kind is
    always the one a decoder parsed, and a line the typed decoder refuses, or whose parsed kind is
    another, is read the ordinary way, and so is a line that is not UTF-8 throughout (a typed
    decoder does not look inside what it skips). A record a typed decoder accepts is held to the
    rule in what it types (its types bound the depth and the integers) and is not checked again:
    members it skips are not held to the depth and number rules. A reader that must check every
    member (`verify`) gives no typed decoders, or ones that forbid fields they do not type.
    """
    return _read_numbered(((n, line) for n, line in enumerate(lines, first_line) if not blank(line)),
                          typed)


def _utf8(line: bytes) -> bool:
    """Whether a line is UTF-8 throughout (ASCII, as most are, told at once)."""
    if line.isascii():
        return True
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _read_numbered(lines: Iterable[tuple[int, bytes]],
                   typed: Mapping[str, msgspec.json.Decoder] | None) -> Iterator[TraceItem]:
    """`read_lines` over numbered non-blank lines (as `a3fast.framing` cuts them)."""
    seq_check = _Sequencer()
    hints = [(b'"kind":"%s"' % kind.encode(), kind, decoder) for kind, decoder in (typed or {}).items()]
    for lineno, line in lines:
        if hints:
            head = line[:_KIND_PEEK]
            record = None
            for needle, kind, decoder in hints:
                if needle in head:
                    try:
                        record = decoder.decode(line)
                    except (msgspec.MsgspecError, RecursionError):
                        record = None
                    if record is not None and (record.kind != kind or not _utf8(line)):
                        record = None
                    break
            if record is not None:   # a record decoded whole (its content is a Struct, hence an object)
                seq_check.index += 1
                seq = record.seq
                last = seq_check.last_seq
                if last is not None and seq <= last:
                    yield TraceProblem(lineno, seq_check.index, seq,
                                       f"seq {seq} does not increase (an earlier record has seq {last})")
                else:
                    seq_check.last_seq = seq
                yield TraceRecord(seq, record.kind, lineno, seq_check.index, typed=record.content, source=line)
                continue
        value, problems = _decode_record(line)
        if problems:
            seq_check.index += 1
            yield TraceProblem(lineno, seq_check.index, _seq_of(value), _rule_message(problems))
            continue
        if type(value) is dict:  # the usual shape, without the questions value() asks of others
            seq, record_kind, content = value.get("seq"), value.get("kind"), value.get("content")
            if type(seq) is int and type(record_kind) is str and type(content) is dict:
                seq_check.index += 1
                last = seq_check.last_seq
                if last is not None and seq <= last:
                    yield TraceProblem(lineno, seq_check.index, seq,
                                       f"seq {seq} does not increase (an earlier record has seq {last})")
                else:
                    seq_check.last_seq = seq
                yield TraceRecord(seq, record_kind, lineno, seq_check.index, content=content)
                continue
        yield from seq_check.value(value, lineno)


#: Up to this length a line is held to the rule by looking at its text (cheaper than at its value).
_SMALL_LINE = 4096


def _decode_record(line: bytes) -> tuple[Any, list[Problem]]:
    """A line decoded under the document rule; (value, []) or (the value if JSON at all, problems)."""
    try:
        value = _ANY.decode(line)
    except RecursionError:
        return None, [Problem("$", f"at most {MAX_RECORD_DEPTH} nested arrays and objects",
                              "nesting too deep to read")]
    except msgspec.MsgspecError as exc:  # not JSON, or valid syntax with a number out of range
        return None, [Problem("$", "JSON", f"not JSON: {document.within_line(_decode_error(line, exc))}")]
    if len(line) <= _SMALL_LINE and line.count(b"[") + line.count(b"{") <= MAX_RECORD_DEPTH:
        # the usual small record: too few brackets to nest too deeply, so only integers are in
        # question, and orjson refuses to write one beyond 64 bits
        try:
            orjson.dumps(value)
            return value, []
        except TypeError:
            pass
    return value, document.validate(value, "$", MAX_RECORD_DEPTH, decoded_json=True)


def _seq_of(value: Any) -> int | None:
    """The record's seq for a finding, when it has a usable one."""
    if isinstance(value, Mapping):
        seq = value.get("seq")
        if _is_seq(seq) and INT_MIN <= seq <= INT_MAX:
            return seq
    return None


def _rule_message(problems: list[Problem]) -> str:
    """A TraceProblem's message for a record that is not JSON or breaks the document rule."""
    if len(problems) == 1 and problems[0].expected == "JSON":
        return problems[0].found
    return "the record breaks the document rule (a3fast.document): " + "; ".join(map(str, problems))


def read_values(values: Iterable[Any], *, decoded_json: bool = False) -> Iterator[TraceItem]:
    """Records given as values, e.g. a list of dicts; each that breaks the document rule is a
    TraceProblem in its place (`decoded_json`: the values came from a JSON decoder)."""
    seq_check = _Sequencer()
    for value in values:
        problems = document.validate(value, "$", MAX_RECORD_DEPTH, decoded_json=decoded_json)
        if problems:
            seq_check.index += 1
            yield TraceProblem(None, seq_check.index, _seq_of(value), _rule_message(problems))
            continue
        yield from seq_check.value(value, None)


def read_trace(source: Source,
               progress: Callable[[int], None] | None = None,
               typed: Mapping[str, msgspec.json.Decoder] | None = None) -> Iterator[TraceItem]:
    """Read a trace from a path, a binary file or bytes, framed by `a3fast.framing`: JSON Lines,
    streamed line by line, or a JSON array of records (read whole). `progress(n)` is told of every
    n bytes consumed; `typed` is as in `read_lines`."""
    framing = framed(source, progress=progress)
    try:
        if framing.form == ARRAY:
            yield from _read_array(framing.whole(), framing.first_line)
        elif framing.form == LINES:
            yield from _read_numbered(framing.lines(), typed)
    finally:
        framing.close()


def read_records(source: "str | os.PathLike | BinaryIO | bytes | Iterable[Mapping[str, Any]]", *,
                 spec: bool = True) -> Iterator[dict[str, Any]]:
    """The records of a trace as dicts `{seq, kind, content}`, from a path, a binary file, bytes
    (JSON Lines or a JSON array) or records already read. With `spec` (the default) compact
    placements come back in spec form, exactly as they were written; `spec=False` gives them as
    stored. TraceError at the first place the trace breaks its format, naming it; CompactError
    (naming the seq and member) for a compact member outside its format."""
    if isinstance(source, (bytes, bytearray, memoryview, str, os.PathLike)) or hasattr(source, "read"):
        items = read_trace(source)  # type: ignore[arg-type]
    else:
        items = read_values(source)
    decoder = Decoder() if spec else None
    for item in items:
        if isinstance(item, TraceProblem):
            raise TraceError(f"{item.where}: {item.message}")
        try:
            content = item.content
        except TraceContentError as exc:
            where = f"line {item.line}" if item.line is not None else f"record {item.index}"
            raise TraceError(f"{where}, seq {item.seq}: {exc}") from None
        if decoder is not None:
            content = decoder.decode_content(item.seq, item.kind, content)
        yield {"seq": item.seq, "kind": item.kind, "content": content}


def _read_array(data: bytes, first_line: int) -> Iterator[TraceItem]:
    try:
        values = _ANY.decode(data)
    except RecursionError:
        yield TraceProblem(first_line, 1, None, "not a JSON array of records: nested more than "
                           f"{MAX_RECORD_DEPTH} arrays and objects deep, too deep to read")
        return
    except msgspec.MsgspecError as exc:
        yield TraceProblem(first_line, 1, None, f"not a JSON array of records: {_decode_error(data, exc)}")
        return
    if not isinstance(values, list):  # e.g. "[1] [2]" fails above; this is a safeguard
        yield TraceProblem(first_line, 1, None, "expected a JSON array of records")
        return
    yield from read_values(values, decoded_json=True)


def _decode_error(data: bytes, exc: Exception) -> str:
    """What is wrong with text the decoder refused, where (`document.syntax_error`: msgspec calls a
    lone surrogate escape "truncated")."""
    return document.syntax_error(data, exc)
