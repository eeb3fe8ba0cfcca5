"""The journal against SQLite in WAL mode: acknowledged writes per second with group commit, in the
same run on the same disk. `python benchmarks/bench_journal.py [--seconds S] [--writers W] [--runs R]`.

Both sides take the same entries (a service change: one declaration, about 250 bytes) from `W`
concurrent writers on one event loop, each waiting for its entry to be durable before sending the
next, and both commit in groups: whatever arrived while the previous commit's fsync ran goes into
the next one, on one writer thread.

- journal: a3fast.durable.journal.Journal, fsync="group" (one write and one fsync per commit);
- sqlite: one table (seq INTEGER PRIMARY KEY, payload BLOB), journal_mode=WAL, synchronous=FULL
  (in WAL mode, an fsync of the WAL per commit), one transaction per group.

Prints each side's medians over `R` runs of `S` seconds, side by side, and the ratio.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from a3fast.durable.journal import Journal, encode_change

DECL = {"v": "1.0", "agent": {"name": "bench-agent-000001", "namespace": "bench"},
        "capabilities": [{"name": "order.investigate", "version": 2}],
        "clearances": ["orders.read", "customers.read"], "residency": ["eu"],
        "model": {"latency_class": "interactive", "cost_ceiling_usd": 0.02}}
PAYLOAD = encode_change("put", decls=[DECL])


class SqliteGroupLog:
    """Group commit over SQLite: append to a list, `durable()` waits for a transaction covering it."""

    def __init__(self, path: Path):
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
        self.pending: list[bytes] = []
        self.appended = 0
        self.committed = 0
        self.commit: asyncio.Future | None = None
        self.writer = ThreadPoolExecutor(1)

    def append(self, payload: bytes) -> None:
        self.pending.append(payload)
        self.appended += 1

    def _write(self, batch: list[bytes]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO log (payload) VALUES (?)", [(p,) for p in batch])
        self.db.execute("COMMIT")

    async def _run(self) -> None:
        try:
            batch, self.pending = self.pending, []
            ticket = self.committed + len(batch)
            await asyncio.get_running_loop().run_in_executor(self.writer, self._write, batch)
            self.committed = ticket
        finally:
            self.commit = None

    async def durable(self) -> None:
        ticket = self.appended
        while self.committed < ticket:
            if self.commit is None:
                self.commit = asyncio.ensure_future(self._run())
            await asyncio.shield(self.commit)

    def close(self) -> None:
        self.writer.shutdown(wait=True)
        self.db.close()


async def _load(log, seconds: float, writers: int) -> int:
    acknowledged = 0
    deadline = time.monotonic() + seconds

    async def writer() -> None:
        nonlocal acknowledged
        while time.monotonic() < deadline:
            log.append(PAYLOAD)
            await log.durable()
            acknowledged += 1

    await asyncio.gather(*(writer() for _ in range(writers)))
    return acknowledged


def run_journal(directory: Path, seconds: float, writers: int) -> float:
    journal = Journal(directory / "journal.00000001", fsync="group")
    try:
        started = time.monotonic()
        n = asyncio.run(_load(journal, seconds, writers))
        return n / (time.monotonic() - started)
    finally:
        journal.close()


def run_sqlite(directory: Path, seconds: float, writers: int) -> float:
    log = SqliteGroupLog(directory / "log.sqlite")
    try:
        started = time.monotonic()
        n = asyncio.run(_load(log, seconds, writers))
        return n / (time.monotonic() - started)
    finally:
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--writers", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"journal": [], "sqlite": []}
    for _ in range(args.runs):          # interleaved, so both see the same disk and neighbours
        for name, run in (("journal", run_journal), ("sqlite", run_sqlite)):
            with tempfile.TemporaryDirectory(prefix=f"a3fast-bench-{name}-", dir=os.environ.get("TMPDIR")) as d:
                results[name].append(run(Path(d), args.seconds, args.writers))
    journal, sqlite = (statistics.median(results[k]) for k in ("journal", "sqlite"))
    print(orjson.dumps({"writers": args.writers, "seconds": args.seconds, "runs": args.runs,
                        "entry_bytes": len(PAYLOAD), "sqlite_version": sqlite3.sqlite_version,
                        "acknowledged_per_s_median": {"journal": round(journal), "sqlite_wal": round(sqlite)},
                        "all_runs": {k: [round(v) for v in vs] for k, vs in results.items()},
                        "journal_over_sqlite": round(journal / sqlite, 2)}, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    sys.exit(main())
