from typing import Any, Callable

from .schema import Capability, Requirements

import numpy as np
import numpy.typing as npt

CAPABILITY: int
CLEARANCE: int
TOOL: int
RESIDENCY: int
LATENCY: int
EVALUATED: int

class Batch:
    names: list[str]
    texts: list[bytes]
    repeated: int
    defer_texts: bool
    def __len__(self) -> int: ...
    def namespace_of(self, name: str) -> str | None: ...
    def append(self, name: str, namespace: str, rows: tuple[int, ...], cost: float, text: bytes) -> None: ...
    def name_ids(self, lo: int, hi: int, first: int) -> dict[str, int]: ...
    def take_spans(self) -> tuple[npt.NDArray[np.int64], bytes]: ...
    def rows_of(self, j: int) -> tuple[int, ...]: ...
    def columns(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.float64]]: ...

class Vocabulary:
    def __len__(self) -> int: ...

def scan(data: bytes, pos: int, lineno: int, batch: Batch, vocab: Vocabulary,
         intern: Callable[[int, Any], int], held: dict[str, int]) -> tuple[int, int]: ...

class RequirementsReader:
    def read(self, doc: dict[str, Any], decoded: bool = False) -> Requirements | None: ...

def requirements_reader(requirements: type[Requirements], capability: type[Capability],
                        capabilities: dict[tuple[str, int], Capability], memo_limit: int,
                        derived: dict[tuple[Any, ...], tuple[str, ...]],
                        derived_limit: int) -> RequirementsReader: ...
