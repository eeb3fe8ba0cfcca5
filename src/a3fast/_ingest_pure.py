"""The pure stand-in for `a3fast._ingest`: the same `Batch`, `scan` and `requirements_reader`, but
`scan` vouches for no line, so a pure fleet reads every line of JSON Lines with orjson and
`parse_declaration`, and there is no reader of requirements (the schema's fast path reads them).
`plainly_within`, `lines_array` and `Notes` (`a3fast.seen`'s rule) are the definitions the compiled
ones are held to."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from .document import plainly_within
from .seen import Notes

__all__ = ["Batch", "Vocabulary", "scan", "requirements_reader", "plainly_within", "lines_array", "Notes"]


class Batch:
    """Accepted declarations as columns, in line order (see `a3fast._ingest.Batch`)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.texts: list[bytes] = []
        self.repeated = 0                       # names appended that were in the batch already
        self.defer_texts = False                # no line is vouched for here, so none is deferred
        self._namespaces: dict[str, str] = {}   # name -> namespace
        self._rows: list[int] = []
        self._offsets: list[int] = [0]
        self._costs: list[float] = []

    def __len__(self) -> int:
        return len(self.names)

    def namespace_of(self, name: str) -> str | None:
        return self._namespaces.get(name)

    def append(self, name: str, namespace: str, rows: tuple[int, ...], cost: float, text: bytes) -> None:
        if name in self._namespaces:
            self.repeated += 1
        else:
            self._namespaces[name] = namespace
        self._rows.extend(rows)
        self._offsets.append(len(self._rows))
        self._costs.append(cost)
        self.names.append(name)
        self.texts.append(text)

    def name_ids(self, lo: int, hi: int, first: int) -> dict[str, int]:
        return dict(zip(self.names[lo:hi], range(first, first + hi - lo)))

    def take_spans(self) -> tuple[npt.NDArray[np.int64], bytes]:
        return np.empty(0, dtype=np.int64), b""

    def rows_of(self, j: int) -> tuple[int, ...]:
        return tuple(self._rows[self._offsets[j]:self._offsets[j + 1]])

    def columns(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        return (np.array(self._rows, dtype=np.int32), np.array(self._offsets, dtype=np.int64),
                np.array(self._costs, dtype=np.float64))


class Vocabulary:
    """Rows of declared values by their bytes; the pure reader finds rows from parsed values."""

    def __len__(self) -> int:
        return 0


def scan(data: bytes, pos: int, lineno: int, batch: Batch, vocab: Vocabulary,
         intern: Callable[[int, Any], int], held: dict[str, int]) -> tuple[int, int]:
    """Every line goes to the careful reader: `(pos, lineno)` as given, or the end of the data."""
    return (pos, lineno) if pos < len(data) else (len(data), lineno)


def requirements_reader(requirements: Any, capability: Any, capabilities: dict, names_kept: int,
                        versions_kept: int, derived: dict, derived_limit: int, derived_once: Any) -> None:
    """No reader of requirements here: `schema.parse_requirements` reads a plain dict with its own
    fast path in Python (the same answers, several times slower)."""
    return None


def lines_array(data: bytes, prefix: bytes = b"", suffix: bytes = b"") -> bytes:
    """JSON Lines as one JSON array, the records undecoded: `prefix` + `[` + the lines without
    their final newlines, each newline between them a comma, + `]` + `suffix`."""
    if type(prefix) is not bytes or type(suffix) is not bytes:
        raise TypeError("lines_array's prefix and suffix are bytes")
    return prefix + b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]" + suffix
