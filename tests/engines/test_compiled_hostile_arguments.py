"""The compiled core given arguments whose conversion runs Python code that changes what is being
read (a list that grows or shrinks, an iterable that says one length and gives another): each call
refuses or reads what it was given once, and never reads or writes past what it allocated. These
are the compiled modules' own classes, which the fleet gives only plain tuples and lists; each case
crashed the process before (run in a process of its own, so that a crash fails only its case)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from a3fast.engines import NATIVE_AVAILABLE

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the native engine is not built")

CASES = {
    "explain-rows-growing": ("""
from a3fast._core import Index, NO_AGENT_REF
ix = Index(); r = ix.add_row(); ix.put(0, "a", [r], 0.0)
rows = []
class I:
    def __index__(self):
        rows.extend([0] * 200000); return 0
rows.append(I())
try:
    ix.explain(rows, NO_AGENT_REF, [])
except ValueError as exc:
    print(exc)
""", "the rows changed while they were read"),
    "wave-rows-longer-than-their-length": ("""
from a3fast._core import Index, NO_AGENT_REF
ix = Index(); r = ix.add_row(); ix.put(0, "a", [r], 0.0)
class Rows:
    def __len__(self): return 1
    def __iter__(self): return iter([0] * 200000)
try:
    ix.place_batch([(None, Rows(), NO_AGENT_REF, [], [], -1, -1)], (1.0, 1.0, 1.0, 1.0))
except ValueError as exc:
    print(exc)
""", "the rows changed while they were read"),
    "put-rows-read-twice": ("""
from a3fast._core import Index
ix = Index(); ix.add_row()
class Rows:
    n = 0
    def __iter__(self):
        Rows.n += 1
        return iter([0] if Rows.n == 1 else [10**7])
ix.put(0, "a", Rows(), 0.0)
print("read", Rows.n, "time")
""", "read 1 time"),
    "score-eval-rows-shrinking": ("""
from a3fast._core import Index, NO_AGENT_REF
ix = Index(); r = ix.add_row(); ix.put(0, "a", [r], 0.0)
e = ix.explain([r], NO_AGENT_REF, [])
ev = []
class I:
    def __index__(self):
        ev.clear(); return 0
ev.extend([I()] + [0] * 1000)
try:
    ix.score(e, ev, -1, -1, (1.0, 1.0, 1.0, 1.0))
except ValueError as exc:
    print(exc)
""", "the eval rows changed while they were read"),
    "batch-names-cleared": ("""
from a3fast._ingest import Batch
b = Batch()
for i in range(100):
    b.append(f"n{i}", "ns", (), 0.0, b"{}")
b.names.clear()
try:
    b.namespace_of("n99")
except RuntimeError as exc:
    print(exc)
""", "the batch's names were changed"),
    "batch-rows-longer-than-their-length": ("""
from a3fast._ingest import Batch
b = Batch()
class Rows:
    def __len__(self): return 0
    def __iter__(self): return iter([7] * 500000)
b.append("a", "ns", Rows(), 0.0, b"{}")
print("appended", len(b.rows_of(0)))
""", "appended 500000"),
    "put-many-rows-read-twice": ("""
from a3fast._core import Index
ix = Index(); r = ix.add_row()
class Rows:
    n = 0
    def __iter__(self):
        Rows.n += 1
        return iter([r] if Rows.n == 1 else [50_000_000])
ix.put_many([0], ["a"], [Rows()], [1.0])
print("read", Rows.n, "time", ix.n_live if hasattr(ix, "n_live") else "")
""", "read 1 time"),
    "put-many-cost-changing-the-rows": ("""
from a3fast._core import Index
ix = Index(); r = ix.add_row()
rows = [[r]]
class Cost:
    def __float__(self):
        rows[0].append(50_000_000); return 1.0
ix.put_many([0], ["a"], rows, [Cost()])
print("put with the rows read before", rows)
""", "put with the rows read before [[0, 50000000]]"),
    "put-flat-rows-changed-by-its-names": ("""
import numpy as np
from a3fast._core import Index
ix = Index(); r = ix.add_row()
rows = np.array([r], dtype=np.int32)
class Names(list):
    def __iter__(self):
        rows[0] = 200_000_000
        return list.__iter__(self)
try:
    ix.put_flat(Names(["a"]), rows, np.array([0, 1], dtype=np.int64), np.array([1.0]))
    print("put")
except IndexError as exc:
    print(exc)
""", "row 200000000 does not exist"),
    "wave-explanation-from-before-agents-joined": ("""
from a3fast import Fleet
from a3fast._core import NO_AGENT_REF
f = Fleet(engine="native")
def decl(i):
    return {"v": "1.0", "agent": {"name": f"a{i}", "namespace": "ns"},
            "capabilities": [{"name": "x.y", "version": 1}], "clearances": []}
f.add(decl(0))
old = f.explain({"capabilities": [{"name": "x.y", "version": 1}]})
f.extend(decl(i) for i in range(1, 20000))
e, s = f.index.place_batch([(old, [], NO_AGENT_REF, [], [], -1, -1)], (1.0, 1.0, 1.0, 1.0))[0]
print("scored", list(s.ids), s.best)
""", "scored [0] 0"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_compiled_core_reads_what_it_was_given_once_and_never_past_it(name):
    code, printed = CASES[name]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.startswith(printed), done.stdout
