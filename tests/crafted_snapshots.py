"""Crafted fleet snapshots: every header field and section of a real snapshot set to wrong types,
huge values, NaN, negative values and empty lists, each written with a correct checksum.

`crafted(base)` yields (label, bytes) for one real snapshot; `check(data)` loads bytes on both
engines and says what differs: each must be refused with SnapshotError on both, with the same
message, or load on both into fleets that answer alike (names, declarations, outcomes, placements).

Run as a script (tests/fleet/test_snapshot_checks.py does, in a subprocess), it first caps its
own address space (RLIMIT_AS), so a load that allocates in proportion to a stated count instead of
the file's size fails with MemoryError, which counts as a failure like any other exception; it
prints one JSON line per failing case and exits 1 if there is any.
"""
from __future__ import annotations

import copy
import resource
import struct
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any, Iterator

import orjson

#: the cap on the checking process's address space: the interpreter, numpy and both engines take
#: about 0.5 GB of it; 10^9 rows of anything would take several times the whole cap
ADDRESS_SPACE = 3 << 30

HUGE = (2**63 - 1, 2**63, 2**64 - 1, 10**9, 2**32, 2**31)
#: JSON values of the wrong type or out of range, for any header field
WRONG: tuple[Any, ...] = (None, True, False, 0, -1, 0.0, 1.0, 0.5, -0.0, 1e308, "x", "", [], {}, [[]], [0], [None],
                          {"a": 1}, *HUGE, -(2**63))
#: JSON texts orjson refuses or reads as non-finite numbers (spliced into the header's text)
RAW = (b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"18446744073709551616")
#: 8-byte words for the binary sections: huge, negative, NaN and infinities as doubles and integers
WORDS8 = (struct.pack("<Q", 2**64 - 1), struct.pack("<Q", 2**63), struct.pack("<q", -1), struct.pack("<Q", 10**9),
          struct.pack("<d", float("nan")), struct.pack("<d", float("inf")), struct.pack("<d", float("-inf")),
          struct.pack("<d", -1.0), struct.pack("<d", -0.0), struct.pack("<Q", 2**53), struct.pack("<Q", 1))
WORDS4 = (struct.pack("<I", 2**32 - 1), struct.pack("<I", 2**31), struct.pack("<I", 10**9), struct.pack("<I", 1),
          struct.pack("<I", 0))


def base_snapshot(directory: Path) -> bytes:
    """A small snapshot that uses every section and header field: removed names, held sessions,
    outcomes of two kinds, substantiated capabilities, every predicate kind."""
    from a3fast.fleet import Fleet
    from a3fast.workload import generate_fleet

    fleet = Fleet("pure")
    decls = generate_fleet(8, seed=11)
    fleet.extend(decls)
    names = fleet.names()
    fleet.remove(names[2])
    fleet.hold_session(names[0], "s1")
    fleet.hold_session(names[1], "s1")
    fleet.hold_session(names[3], "s2")
    fleet.record_outcomes(names[1], "triage", 3, 5)
    fleet.record_outcomes(names[4], "triage", 0, 2)
    fleet.record_outcome(names[5], "audit", True)
    fleet.save(directory / "base")
    return (directory / "base").read_bytes()


def split(data: bytes) -> tuple[int, dict, dict[str, bytes]]:
    from a3fast.snapshot import decode

    header, views = decode(data)
    header.pop("section_starts")
    version = struct.unpack_from("<I", data, 8)[0]
    return version, header, {name: bytes(view) for name, view in views.items()}


def framed(version: int, head_json: bytes, body: bytes) -> bytes:
    """A snapshot's bytes around a header's JSON text and the sections' bytes, checksum recomputed."""
    from a3fast.snapshot import _HEAD, _TRAILER, END, MAGIC

    head_json += b" " * (-(len(head_json) + _HEAD.size) % 8)
    before = _HEAD.pack(MAGIC, version, len(head_json)) + head_json + body
    return before + _TRAILER.pack(len(before), zlib.crc32(before), END)


def encoded(version: int, header: dict, sections: dict[str, bytes]) -> bytes:
    from a3fast.snapshot import encode

    return encode(header, sections, version=version)


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every place in a JSON value: the value itself, then each member and item, recursively."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        # the first and the last item of a list stand for all of its items
        for at in sorted({0, len(value) - 1} & set(range(len(value)))):
            yield from _paths(value[at], (*path, at))


def _set(document: Any, path: tuple, value: Any) -> Any:
    document = copy.deepcopy(document)
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return document


def _label(path: tuple) -> str:
    return "header" + "".join(f"[{k!r}]" for k in path)


def crafted(base: bytes) -> Iterator[tuple[str, bytes]]:
    version, header, sections = split(base)
    # header fields, and the section table, each set to every wrong value
    with_table = dict(header)
    from a3fast.snapshot import decode
    full = orjson.loads(base[16:16 + struct.unpack_from("<I", base, 12)[0]])
    body = base[16 + struct.unpack_from("<I", base, 12)[0]:-16]
    for path in _paths(full):
        if not path:
            continue
        for value in WRONG:
            yield f"{_label(path)} = {value!r}", framed(version, orjson.dumps(_set(full, path, value)), body)
        marker = "\x00marker\x00"
        text = orjson.dumps(_set(full, path, marker))
        for raw in RAW:
            yield f"{_label(path)} = {raw.decode()}", framed(version, text.replace(orjson.dumps(marker), raw), body)
    for key in list(full):
        without = {k: v for k, v in full.items() if k != key}
        yield f"header without {key!r}", framed(version, orjson.dumps(without), body)
    yield "header with an unknown field", framed(version, orjson.dumps({**full, "extra": 1}), body)
    yield "header is a list", framed(version, orjson.dumps([full]), body)
    # sections: emptied, missing, added, shortened and lengthened by one element, each element set
    # to huge, negative and non-finite values
    for name, data in sections.items():
        width = 4 if name in ("live", "row_ids") else 24 if name == "outcomes" else 8
        others = {k: v for k, v in sections.items() if k != name}
        yield f"section {name} missing", encoded(version, header, others)
        yield f"section {name} empty", encoded(version, header, {**sections, name: b""})
        yield f"section {name} one element short", encoded(version, header, {**sections, name: data[:-width]})
        yield f"section {name} one element long", encoded(version, header, {**sections, name: data + data[-width:] if data else bytes(width)})
        if name in ("names", "declarations", "declaration_dictionary"):
            continue
        words = WORDS4 if width == 4 else WORDS8
        step = len(words[0])
        count = len(data) // step
        for at in sorted({0, 1, count // 2, count - 1} & set(range(count))):
            at *= step
            for word in words:
                changed = data[:at] + word + data[at + step:]
                yield f"section {name} bytes {at}.. = {word.hex()}", encoded(version, header, {**sections, name: changed})
    for text in (b"[]", b"{}", b"null", b"[1]", b'"a"', b"[" + b'"a",' * 5 + b'"a"]', b"[[]]", b"NaN", b"[" * 2000):
        yield f"section names = {text[:20]!r}", encoded(version, header, {**sections, "names": text})
    yield "extra section", encoded(version, header, {**sections, "extra": b"12345678"})
    yield "declaration_dictionary without a codec", encoded(version, header, {**sections, "declaration_dictionary": b"x"})
    # declarations altered in place (lengths kept): garbage, another agent's, not canonical
    decls = sections["declarations"]
    for at in (0, 1, len(decls) // 2, len(decls) - 1):
        for byte in (b" ", b"}", b"\xff", b"0"):
            yield f"section declarations byte {at} = {byte!r}", encoded(
                version, header, {**sections, "declarations": decls[:at] + byte + decls[at + 1:]})


def _outcome(fleet) -> Any:
    return [(name, kind, fleet.outcomes(name, kind)) for name in fleet.names() for kind in ("triage", "audit")]


def _behaviour(path: Path, engine: str) -> tuple[str, Any]:
    """("refused", message) or ("loaded", what the fleet answers); any other exception propagates."""
    from a3fast import SnapshotError
    from a3fast.fleet import Fleet
    from a3fast.workload import generate_fleet, generate_tasks

    try:
        fleet = Fleet.load(path, engine)
        answers: list[Any] = [fleet.names(), fleet.weights, _outcome(fleet)]
        answers.append([fleet.get(name).doc for name in fleet.names()])
        for task in generate_tasks(generate_fleet(8, seed=11), 6, seed=3):
            placed = fleet.place(task)
            content = dict(placed.scheduling if placed.bound else placed.rejection)
            content.pop("timings", None)
            answers.append((placed.agent, content))
    except SnapshotError as exc:
        return "refused", str(exc)
    return "loaded", answers


def check(data: bytes, directory: Path) -> str | None:
    """None when both engines refuse `data` alike or load it into fleets that answer alike; else
    what went wrong."""
    path = directory / "crafted"
    path.write_bytes(data)
    results = []
    for engine in ("native", "pure"):
        try:
            results.append(_behaviour(path, engine))
        except BaseException as exc:   # noqa: BLE001 - anything but SnapshotError is the failure sought
            return f"{engine}: {type(exc).__name__}: {str(exc)[:300]}"
    if results[0] != results[1]:
        return f"the engines differ: native {str(results[0])[:300]} / pure {str(results[1])[:300]}"
    return None


def main() -> int:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    failures = 0
    cases = 0
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        base = base_snapshot(directory)
        assert check(base, directory) is None, "the base snapshot must load alike"
        for label, data in crafted(base):
            cases += 1
            problem = check(data, directory)
            if problem is not None:
                failures += 1
                print(orjson.dumps({"case": label, "problem": problem}).decode(), flush=True)
    print(orjson.dumps({"cases": cases, "failures": failures}).decode(), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
