"""Where `Fleet.load_jsonl`'s CPU time goes, phase by phase, in one process:
`python benchmarks/bench_jsonl_load.py FILE [--pack auto|yes|no]`.

Each phase's function is wrapped in a timer and otherwise left as it is, and timed by the CPU time
of the thread that runs it (`time.thread_time`), so the figures hold on a shared machine where wall
times do not: the main thread's compiled scan (validating each line, finding its rows, the batch's
names), reading the file in chunks, `Index.put_flat`, the id dict and entry lists, the packer's
hand-offs, and the packing thread's zstd. Prints the load's wall and CPU time, its peak RSS, and the
phases, largest first (docs/performance.md, "Fleets of a million", quotes a run at 1,000,000 agents
of the standard workload: `python -m a3fast.bench.large write DIR 1000000 200 0` writes it).
"""
from __future__ import annotations

import argparse
import resource
import time
from typing import Any, Callable, Iterator

import a3fast.fleet.bulk_load as bulk_load
from a3fast import declaration_codec
from a3fast.fleet import Fleet

SCAN = "main: compiled scan (validate, find rows, names)"
READ = "main: reading the file in chunks"
PUT_FLAT = "main: Index.put_flat (names, costs, rows)"
PUT_REST = "main: the id dict and entry lists"
PACKER = "main: the packer's hand-offs and collects, and training its dictionary"
ZSTD = "packing thread: zstd, and a bytes object per frame"


def profile(path: str, pack: bool | None) -> tuple[dict[str, float], float, float, float, int]:
    spent: dict[str, float] = {}

    def add(phase: str, seconds: float) -> None:
        spent[phase] = spent.get(phase, 0.0) + seconds

    def timed(phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                add(phase, time.thread_time() - started)
        return wrapper

    class TimedReader:
        def __init__(self, module: Any):
            self.module = module
            self.scan = timed(SCAN, module.scan)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.module, name)

    ingest_module, chunks_of, put_run = bulk_load.ingest_module, bulk_load.chunks_of, bulk_load._put_run
    codec, packer = declaration_codec.DeclarationCodec, declaration_codec.BatchPacker
    # (an older tree, measured side by side, may lack pack_spans)
    wrapped = [(codec, name, ZSTD) for name in ("pack_spans", "pack_many") if hasattr(codec, name)]
    wrapped += [(packer, "after_chunk", PACKER), (packer, "finish", PACKER)]
    saved = {(owner, name): getattr(owner, name) for owner, name, _ in wrapped}

    def timed_chunks(source: Any) -> Iterator[bytes]:
        chunks = chunks_of(source)
        while True:
            started = time.thread_time()
            chunk = next(chunks, None)
            add(READ, time.thread_time() - started)
            if chunk is None:
                return
            yield chunk

    def timed_put_run(table: Any, rows: Any, batch: Any, lo: int, hi: int) -> None:
        index = rows.index

        class TimedIndex:
            put_flat = staticmethod(timed(PUT_FLAT, index.put_flat))

            def __getattr__(self, name: str) -> Any:
                return getattr(index, name)

        rows.index = TimedIndex()
        started = time.thread_time()
        try:
            put_run(table, rows, batch, lo, hi)
        finally:
            rows.index = index
        add(PUT_REST, time.thread_time() - started)

    bulk_load.ingest_module = lambda engine: TimedReader(ingest_module(engine))
    bulk_load.chunks_of, bulk_load._put_run = timed_chunks, timed_put_run
    for owner, name, phase in wrapped:
        setattr(owner, name, timed(phase, getattr(owner, name)))
    try:
        wall, cpu, main = time.perf_counter(), time.process_time(), time.thread_time()
        fleet = Fleet.load_jsonl(path, "native", pack=pack)
        wall, cpu, main = time.perf_counter() - wall, time.process_time() - cpu, time.thread_time() - main
    finally:
        bulk_load.ingest_module, bulk_load.chunks_of, bulk_load._put_run = ingest_module, chunks_of, put_run
        for (owner, name), value in saved.items():
            setattr(owner, name, value)
    spent[PUT_REST] = spent.get(PUT_REST, 0.0) - spent.get(PUT_FLAT, 0.0)
    spent["main: everything else"] = main - sum(v for k, v in spent.items() if k.startswith("main:"))
    return spent, wall, cpu, main, len(fleet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--pack", choices=("auto", "yes", "no"), default="auto")
    args = parser.parse_args()
    pack = {"auto": None, "yes": True, "no": False}[args.pack]
    spent, wall, cpu, main_thread, agents = profile(args.path, pack)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(f"{agents:,} agents: wall {wall:.2f} s, CPU {cpu:.2f} s (main thread {main_thread:.2f} s), "
          f"peak RSS {peak:,} MiB")
    for phase, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {seconds:6.2f} s  {phase}")


if __name__ == "__main__":
    main()
