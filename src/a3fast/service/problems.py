"""Errors the service answers with: an HTTP status and the library's problems (path, expected,
found), never a traceback. Also the bounds every request body is held to."""
from __future__ import annotations

from typing import Any

import orjson

from ..errors import FleetError, Problem, SchemaError, describe
from ..document import loads

__all__ = ["ServiceError", "problem", "from_library", "library_problems", "journal_failed", "too_large", "parse_json", "query_int",
           "MAX_DEPTH", "MAX_STRING"]

#: Deepest nesting of arrays and objects a request may have (A3 documents need about 5).
MAX_DEPTH = 32
#: Longest string a request may hold (names are at most 1,024 characters; this bounds the rest).
MAX_STRING = 65_536


#: Problems a refusal lists, at most: the rest are counted in one more (a body of many bad lines
#: or members was answered thirty to a hundred times its size, made in one piece on the loop).
MAX_PROBLEMS = 100
#: Characters of a problem's path, expected or found text kept: a request's own value is echoed no
#: longer than this.
MAX_PROBLEM_TEXT = 1000


class ServiceError(Exception):
    """A request the service refuses: `status` (4xx) and problems as dicts, bounded: the first
    MAX_PROBLEMS, then one that counts the rest, each text cut at MAX_PROBLEM_TEXT characters."""

    def __init__(self, status: int, problems: list[dict[str, Any]]):
        problems = _bounded(problems)
        super().__init__("; ".join(f"{p['path']}: expected {p['expected']}, found {p['found']}"
                                   for p in problems))
        self.status = status
        self.problems = problems

    def body(self) -> dict[str, Any]:
        return {"problems": self.problems}


def problem(path: str, expected: str, found: str, **extra: Any) -> dict[str, Any]:
    return {"path": path, "expected": expected, "found": found, **extra}


def _bounded(problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(problems) > MAX_PROBLEMS:
        more = len(problems) - MAX_PROBLEMS
        problems = problems[:MAX_PROBLEMS] + [problem("$", f"a request with at most {MAX_PROBLEMS} problems listed",
                                                      f"{more:,} more problems, not listed")]
    if all(type(v) is not str or len(v) <= MAX_PROBLEM_TEXT for p in problems for v in p.values()):
        return problems
    return [{key: _cut(value) if type(value) is str else value for key, value in p.items()} for p in problems]


def _cut(text: str) -> str:
    if len(text) <= MAX_PROBLEM_TEXT:
        return text
    return f"{text[:MAX_PROBLEM_TEXT]}… ({len(text) - MAX_PROBLEM_TEXT:,} more characters)"


def from_library(exc: Exception, status: int = 400, **extra: Any) -> ServiceError:
    """A library error as a ServiceError: SchemaError keeps its problems; FleetError names the agent."""
    return ServiceError(status, library_problems(exc, **extra))


def library_problems(exc: Exception, **extra: Any) -> list[dict[str, Any]]:
    """The problems `from_library` answers with, every one: for a refusal that gathers the problems
    of many documents (each line of a body) and is bounded once, whole."""
    if isinstance(exc, SchemaError):
        return [problem(p.path, p.expected, p.found, **extra) for p in exc.problems]
    if isinstance(exc, FleetError):
        return [problem("$", "an agent the fleet can take", str(exc), **extra)]
    return [problem("$", "a request the library accepts", str(exc), **extra)]


def journal_failed(why: str) -> ServiceError:
    """503 for every request once the journal could not be written (a3fast.durable.journal,
    JournalFailed): the service answers nothing more until it is restarted."""
    return ServiceError(503, [problem("$", "a service whose journal and trace can be written",
                                      f"{why}; the service accepts nothing more until it is restarted")])


def too_large(limit: int, found: str = "more") -> ServiceError:
    """413: a body (or stdio line) over the limit that applies to it."""
    return ServiceError(413, [problem("$", f"a body of at most {limit} bytes", found)])


#: Digits a query integer may have: a uint64 has at most 20, as many as a number stdio's JSON takes,
#: so what is refused for its value is refused in the same words on both; a longer one is refused
#: before it is converted (a 5,000-digit number would make int() raise, or cost quadratic time).
MAX_QUERY_DIGITS = 20


#: A trace's `since`: a seq, which records hold as an int64 (0 to 2^63-1), whichever way it is asked
#: for (a query string's digits, a stdio line's JSON number), refused in the same words past that.
SINCE_EXPECTED = "a seq (an integer from 0 to 2^63-1)"
MAX_SEQ = 2**63 - 1


def since_seq(value: int, found: str, path: str = "$.since") -> int:
    """A seq asked for (a trace's `since`, a replay's `since` or `until`), held to a seq's range:
    400 at `path` otherwise, `found` shown."""
    if not 0 <= value <= MAX_SEQ:
        raise ServiceError(400, [problem(path, SINCE_EXPECTED, found)])
    return value


def query_since(text: str) -> int:
    """A trace's `since` from its query text, refused as stdio refuses the same JSON number: an
    integer's text (a negative one, one past a seq) shown as it is, anything else quoted."""
    digits = text[1:] if text[:1] == "-" else text
    if digits.isascii() and digits.isdigit() and len(digits) <= MAX_QUERY_DIGITS:
        return since_seq(int(text), text)
    return query_int(text, "$.since", SINCE_EXPECTED)


def query_int(value: str, path: str, expected: str) -> int:
    """A query parameter as a non-negative integer: ASCII digits only (str.isdigit also accepts
    '²' and other digits int() refuses), at most MAX_QUERY_DIGITS of them; 400 otherwise."""
    if not (value.isascii() and value.isdigit() and len(value) <= MAX_QUERY_DIGITS):
        raise ServiceError(400, [problem(path, expected, repr(value[:40]) + ("..." if len(value) > 40 else ""))])
    return int(value)


def parse_json(data: bytes, path: str = "$") -> Any:
    """JSON text within the service's bounds; SchemaError (via the library's parser) otherwise."""
    value = loads(data, limit=MAX_DEPTH)     # the service's bound, in the library's words
    # A text shorter than MAX_STRING holds no longer string, and one with at most MAX_DEPTH brackets
    # nests no deeper (brackets inside strings only overcount): the walk is needed only past that.
    if len(data) > MAX_STRING or data.count(b"{") + data.count(b"[") > MAX_DEPTH:
        check_bounds(value, path)
    return value


def check_bounds(value: Any, path: str = "$") -> None:
    """Nesting at most MAX_DEPTH and strings at most MAX_STRING characters (iterative: a hostile
    document cannot exhaust the stack)."""
    stack = [(value, path, 0)]
    problems: list[Problem] = []
    while stack and len(problems) < 10:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            if len(item) > MAX_STRING:
                problems.append(Problem(where, f"a string of at most {MAX_STRING} characters",
                                        f"{len(item)} characters"))
        elif isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                problems.append(Problem(where, f"at most {MAX_DEPTH} nested arrays and objects", describe(item)))
                continue
            if isinstance(item, dict):
                for key, child in item.items():
                    if len(key) > MAX_STRING:
                        problems.append(Problem(where, f"keys of at most {MAX_STRING} characters",
                                                f"{len(key)} characters"))
                    if isinstance(child, (str, dict, list)):
                        stack.append((child, f"{where}.{key}" if key.isidentifier() else f"{where}[{key[:40]!r}]",
                                      depth + 1))
            else:
                for k, child in enumerate(item):
                    if isinstance(child, (str, dict, list)):
                        stack.append((child, f"{where}[{k}]", depth + 1))
    if problems:
        raise SchemaError(problems)


def error_json(status: int, problems: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"problems": problems})
