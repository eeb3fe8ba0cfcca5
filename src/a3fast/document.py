"""What a JSON document may contain, stated once and applied wherever JSON or a Python document
enters a3fast (declarations, requirements, trace records).

The rule:

- **Nesting:** at most `MAX_DEPTH` (128) arrays/objects deep for a document (a declaration, a
  requirements document, a record's content), at most `MAX_RECORD_DEPTH` (144) for a whole trace
  record. orjson refuses to write anything nested deeper than 254 (its recursion limit), and
  msgspec and orjson raise RecursionError when they read a few hundred to a thousand levels; a
  document is wrapped a few levels deeper when it is recorded (record → content → scheduling →
  declaration, or the compact member), so 128 for documents and 128 + 16 for records leave every
  accepted value writable and readable with room to spare.
- **Integers** from -2^63 to 2^64-1: what orjson and msgspec can write (a signed or unsigned 64-bit
  integer). Python's unbounded ints would otherwise be accepted here and refused later.
- **Floats** finite: JSON has no NaN or Infinity, and orjson would write them as null.
- **Strings** valid Unicode: no lone surrogates (Python's '\\ud800'), which cannot be encoded as
  UTF-8 and so cannot be written.
- **Objects** keyed by strings; arrays are lists (or tuples); no other Python types, except that
  a document itself may be any Mapping (a3fast copies its items into a dict when it records it).

`cut_deeper_than` makes JSON text nested past any reader's recursion limit readable, for a reader
that must name the object that holds it rather than fail its whole input (a list of the cluster's
objects); what it keeps is still past the rule, which then names it.

`check` walks a decoded value iteratively (no recursion, so it cannot itself hit RecursionError) and
names each problem as a `Problem(path, expected, found)`. `conforms` answers the same question fast,
letting orjson's C writer do the walk — it refuses ints beyond 64 bits, lone surrogates, non-string
keys and other types — and bounding the depth by the brackets it wrote (or, past the limit, by its
own recursion limit); only a value `conforms` refuses need be walked by `check`. `loads` decodes
bytes under the rule and raises nothing but SchemaError.
"""
from __future__ import annotations

import re
import threading
from typing import Any, Mapping

import msgspec
import orjson

from .errors import Problem, SchemaError, describe, json_path

__all__ = ["MAX_DEPTH", "MAX_RECORD_DEPTH", "INT_MIN", "INT_MAX", "check", "conforms", "validate", "plainly_within",
           "syntax_error", "loads", "decode_problem", "cut_deeper_than", "READABLE_DEPTH"]

MAX_DEPTH = 128
#: Bytes `cut_deeper_than` scans at a time (its arrays are a few times this, never the text's size).
CUT_PIECE = 1 << 20
#: The nesting `cut_deeper_than` keeps: readable by orjson (1,024 levels), msgspec and Python's json
#: (a thread's recursion limit of 1,000, less the frames below the reader), and still four times
#: MAX_DEPTH, so a document cut there breaks the rule as the text did
READABLE_DEPTH = 512
MAX_RECORD_DEPTH = MAX_DEPTH + 16
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
#: Problems reported per value: a hostile document with a million bad leaves gets a bounded answer.
MAX_PROBLEMS = 20

_EXPECTED_INT = "an integer from -2^63 to 2^64-1"
_EXPECTED_FLOAT = "a finite number"
_EXPECTED_STR = "a valid Unicode string (no lone surrogates)"
_EXPECTED_KEY = "object keys that are strings"
_SCALARS = (str, int, float, bool, type(None))


def _depth_expected(limit: int) -> str:
    return f"at most {limit} nested arrays and objects"


def check(value: Any, path: str = "$", limit: int = MAX_DEPTH) -> list[Problem]:
    """Every way `value` breaks the rule (at most MAX_PROBLEMS), each named by its JSON path.
    A value nested too deeply is reported once, at the first container beyond the limit, and not
    walked further."""
    problems: list[Problem] = []
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack and len(problems) < MAX_PROBLEMS:
        item, where, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and not _encodable(item):
                problems.append(Problem(where, _EXPECTED_STR, "a lone surrogate"))
        elif kind is bool or item is None:
            pass
        elif kind is int:
            if not INT_MIN <= item <= INT_MAX:
                problems.append(Problem(where, _EXPECTED_INT, describe(item)))
        elif kind is float:
            if item != item or item in (float("inf"), float("-inf")):
                problems.append(Problem(where, _EXPECTED_FLOAT, repr(item)))
        elif kind is dict or kind is list or kind is tuple or (depth == 0 and isinstance(item, Mapping)):
            if depth >= limit:
                problems.append(Problem(_shortened(where), _depth_expected(limit), "deeper nesting"))
                continue
            if kind is not list and kind is not tuple:
                children = []
                for key, child in item.items():
                    if type(key) is not str:
                        problems.append(Problem(where, _EXPECTED_KEY, f"key {describe(key)}"))
                        continue
                    if not key.isascii() and not _encodable(key):
                        problems.append(Problem(where, _EXPECTED_STR + " as a key", "a lone surrogate"))
                        continue
                    children.append((child, json_path(where, key), depth + 1))
            else:
                children = [(child, json_path(where, i), depth + 1) for i, child in enumerate(item)]
            stack.extend(reversed(children))
        else:
            problems.append(Problem(where, "a JSON value", f"a Python {kind.__name__}"))
    return problems


def _shortened(path: str) -> str:
    """A path hundreds of levels deep, cut in the middle so that a message stays readable."""
    return path if len(path) <= 100 else f"{path[:60]}…{path[-30:]}"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# orjson writes these natively; the passthrough options make it refuse datetimes, dataclasses and
# subclasses of str/int/dict/list instead, so that what it accepts is (nearly) what `check` accepts.
_WRITE_STRICT = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS


def _writer_depth_limit() -> int:
    """How many arrays deep orjson writes (254 in orjson 3.x), found once at import: the depth
    check wraps a value so that orjson's own limit answers it."""
    value: list[Any] = []
    depth = 1
    while depth < 4096:
        try:
            orjson.dumps(value)
        except orjson.JSONEncodeError:
            return depth - 1
        value = [value]
        depth += 1
    return depth


_WRITER_LIMIT = _writer_depth_limit()


class _Wrappers(threading.local):
    """Per thread, per depth limit: nested lists whose innermost holds the value being checked, so
    that orjson's own recursion limit answers "deeper than limit?"."""

    def __init__(self) -> None:
        self.chains: dict[int, tuple[list[Any], list[Any]]] = {}

    def chain(self, limit: int) -> tuple[list[Any], list[Any]]:
        chain = self.chains.get(limit)
        if chain is None:
            inner: list[Any] = [None]
            outer = inner
            for _ in range(_WRITER_LIMIT - limit - 1):
                outer = [outer]
            chain = self.chains[limit] = (outer, inner)
        return chain


_wrappers = _Wrappers()
_NULL = re.compile(rb"null")


def conforms(value: Any, limit: int = MAX_DEPTH, *, decoded_json: bool = False) -> bool:
    """True when `value` certainly keeps the rule; False when `check` must look (it may then find
    nothing: a null may stand for a NaN orjson wrote as null). Runs in C: orjson writes the value,
    refusing big ints, lone surrogates and non-string keys; if what it wrote holds more opening
    brackets than `limit` (brackets inside strings only over-count), it writes the value again
    wrapped `254 - limit` arrays deep, so that its own limit of 254 answers for the depth.
    `decoded_json`: the value came from a JSON decoder, so a null in it is a null."""
    if decoded_json:  # a decoded value holds no NaN and no surrogate: one wrapped write answers
        return _within_depth(value, limit)
    try:
        data = orjson.dumps(value, option=_WRITE_STRICT)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return False
    if _NULL.search(data) is not None:
        return False
    if data.count(b"[") + data.count(b"{") <= limit:
        return True
    return _within_depth(value, limit)


def _within_depth(value: Any, limit: int) -> bool:
    if _WRITER_LIMIT <= limit:  # an orjson without a recursion limit: no fast answer
        return False
    outer, inner = _wrappers.chain(limit)
    inner[0] = value
    try:
        orjson.dumps(outer, option=_WRITE_STRICT)
    except TypeError:
        return False
    finally:
        inner[0] = None
    return True


def validate(value: Any, path: str = "$", limit: int = MAX_DEPTH, *,
             decoded_json: bool = False) -> list[Problem]:
    """`check`, after the fast `conforms` (the usual case: no problem, found in C)."""
    if conforms(value, limit, decoded_json=decoded_json):
        return []
    return check(value, path, limit)


_DECODER = msgspec.json.Decoder()
#: bytes -> every ASCII digit "0", anything else " ": a run of 19 digits is then found by `in`,
#: several times faster than the regular expression on a request line
_DIGITS_ONLY = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_NINETEEN = b"0" * 19
_LONG_DIGITS_STR = re.compile(r"\d{19}")


def plainly_within(data: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON text msgspec decoded certainly keeps the rule, judged from the text alone:
    at most `limit` opening brackets (so no deeper nesting) and no run of 19 digits (so no integer
    beyond 64 bits). Brackets and digits inside strings only over-count; then the value is checked."""
    if type(data) is bytes:
        return data.count(b"[") + data.count(b"{") <= limit and _NINETEEN not in data.translate(_DIGITS_ONLY)
    if type(data) is str:
        return data.count("[") + data.count("{") <= limit and _LONG_DIGITS_STR.search(data) is None
    return False


def decode_problem(data: bytes | str, limit: int = MAX_DEPTH) -> tuple[Any, list[Problem]]:
    """(value, problems) of JSON text under the rule; the value is None when there are problems.
    msgspec refuses lone surrogates and numbers no double can hold; what it accepts is checked."""
    try:
        value = _DECODER.decode(data)
    except RecursionError:
        return None, [Problem("$", _depth_expected(limit), "deeper nesting")]
    except (msgspec.MsgspecError, UnicodeError) as exc:
        if str(exc).startswith(_OUT_OF_RANGE):
            problems = _numbers_past_doubles(data, limit)
            if problems:
                return None, problems
        return None, [Problem("$", "valid JSON", syntax_error(data, exc))]
    if plainly_within(data, limit):
        return value, []
    problems = validate(value, "$", limit, decoded_json=True)
    return (None if problems else value), problems


#: msgspec's words for a number no double holds (`1e400`, an integer of thousands of digits): valid
#: JSON, which the rule refuses where it stands
_OUT_OF_RANGE = ("Number out of range", "Integer value out of range")
#: digits of an integer literal read as itself; a longer one stands in as a power of ten of its
#: length (Python refuses to turn more than 4,300 digits into an int, and the rule needs its size)
_DIGITS_READ = 4000


def _numbers_past_doubles(data: bytes | str, limit: int) -> list[Problem] | None:
    """The problems of JSON text whose numbers msgspec could not hold, each at its member: the text
    read again by Python's `json`, which takes any number (NaN and Infinity, which are no JSON,
    refused), and held to the rule. None when that reader refuses the text too."""
    import json

    def integer(text: str) -> int:
        digits = len(text.lstrip("-"))
        if digits <= _DIGITS_READ:
            return int(text)
        return (-1 if text.startswith("-") else 1) * 10 ** (digits - 1)

    def constant(text: str) -> Any:
        raise ValueError(text)

    try:
        value = json.loads(data, parse_int=integer, parse_constant=constant)
    except (ValueError, RecursionError):
        return None
    return check(value, "$", limit) or None


def syntax_error(data: bytes | str, exc: Exception) -> str:
    """orjson's account of a syntax error, which names the line and column (msgspec reports a lone
    surrogate escape as "truncated"); msgspec's when orjson reads the text after all."""
    if type(data) is bytes:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            # orjson says "surrogates not allowed" at line 1 column 1 whatever the byte and wherever
            line = data.count(b"\n", 0, bad.start) + 1
            line_start = data.rfind(b"\n", 0, bad.start) + 1
            column = len(data[line_start:bad.start].decode("utf-8")) + 1   # in characters, as orjson counts
            return (f"text that is not UTF-8: the byte {data[bad.start]:#04x} at line {line} column {column} "
                    f"(byte {bad.start})")
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as orjson_exc:
        return str(orjson_exc)
    except RecursionError:
        pass
    return str(exc).removeprefix("JSON is malformed: ")


def within_line(found: str) -> str:
    """A syntax error's account (`syntax_error`) of one line of JSON Lines, whose reader names the
    line: the decoder counted within that line alone, so its "line 1" would point at the first."""
    return found.replace(" at line 1 column ", " at column ").replace(": line 1 column ", ": column ")


def loads(data: bytes | str, source: str | None = None, limit: int = MAX_DEPTH) -> Any:
    """Decode JSON text under the rule; SchemaError naming the source and every problem."""
    if isinstance(data, str) and not data.isascii() and not _encodable(data):
        raise SchemaError([Problem("$", _EXPECTED_STR, "a lone surrogate")], source)
    value, problems = decode_problem(data, limit)
    if problems:
        raise SchemaError(problems, source)
    return value


def cut_deeper_than(text: bytes, depth: int = READABLE_DEPTH) -> bytes:
    """JSON `text` with every array or object that opens deeper than `depth` levels replaced by
    `null`, found without reading the text as JSON: a scan of its brackets outside strings, in
    numpy's loops over pieces of CUT_PIECE bytes (its memory a few times a piece's, whatever the
    text's length). Text whose brackets do not pair (not JSON) is given back as it is; within a
    value that is cut, only the pairing of brackets is looked at (a reader refuses the rest)."""
    import numpy as np

    starts: list[int] = []
    ends: list[int] = []
    inside, run, level, lowest = 0, 0, 0, 0      # what one piece hands the next
    for base in range(0, len(text), CUT_PIECE):
        data = np.frombuffer(text, dtype=np.uint8, count=min(CUT_PIECE, len(text) - base), offset=base)
        n = len(data)
        position = np.arange(n, dtype=np.int64)
        # a quote ends or starts a string unless an odd run of backslashes comes before it (a run
        # may begin in the pieces before: it counts from a position before this piece's first)
        others = np.where(data != 0x5C, position, -1 - run)
        last_other = np.maximum.accumulate(others)
        quotes = np.flatnonzero(data == 0x22)
        run_before = np.where(quotes > 0, quotes - 1 - last_other[np.maximum(quotes - 1, 0)], run)
        toggles = np.zeros(n, dtype=np.int8)
        toggles[quotes[run_before % 2 == 0]] = 1
        outside = ((np.cumsum(toggles, dtype=np.int32) + inside) & 1) == 0
        step = (((data == 0x7B) | (data == 0x5B)) & outside).astype(np.int8)
        step -= (((data == 0x7D) | (data == 0x5D)) & outside).astype(np.int8)
        levels = np.cumsum(step, dtype=np.int32) + level      # the depth after each byte
        starts.extend((np.flatnonzero((step == 1) & (levels == depth + 1)) + base).tolist())
        ends.extend((np.flatnonzero((step == -1) & (levels == depth)) + base).tolist())
        lowest = min(lowest, int(levels.min()))
        inside = int((int(toggles.sum()) + inside) & 1)
        level = int(levels[-1])
        run = int(n - 1 - last_other[-1])
    if not starts or level != 0 or lowest < 0 or len(ends) != len(starts) \
            or any(s >= e for s, e in zip(starts, ends)) or any(e >= s for e, s in zip(ends, starts[1:])):
        return text
    pieces, at = [], 0
    for start, end in zip(starts, ends):
        pieces.append(text[at:start])
        pieces.append(b"null")
        at = end + 1
    pieces.append(text[at:])
    return b"".join(pieces)
