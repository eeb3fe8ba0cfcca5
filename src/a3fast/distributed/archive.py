"""Verifying many trace files at once on Ray tasks, one file per task, with the serial verifier's
findings (`a3fast.verify.verify_stream_counted` runs on each file as it would locally).

A trace is verified whole, by one task: §7's checks read what came before — a resumed placement's
`recorded_in` names an earlier task.bound, a task.bound is scoped by the latest task.admitted, the
compact form's fleet snapshots are cited by seq — so cutting one trace by task would need that
state passed along and gives no parallelism a file per task does not already give an archive.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Iterator

from .cluster import connect
from ..verify import Finding, verify_stream_counted

__all__ = ["ArchiveResult", "verify_archive", "verify_one"]


@dataclass(frozen=True)
class ArchiveResult:
    """One trace's verification: its findings and record count, or why it could not be read."""

    path: str
    findings: list[Finding]
    records: int
    #: the reason the file could not be opened or read (then findings is empty), else None
    unreadable: str | None = None


def verify_one(path: str) -> ArchiveResult:
    """Verify one trace file, as `a3fast verify` does serially."""
    try:
        with open(path, "rb") as fh:
            findings, records = verify_stream_counted(fh)
    except OSError as exc:
        return ArchiveResult(path, [], 0, exc.strerror or str(exc))
    return ArchiveResult(path, findings, records)


def verify_archive(paths: Iterable[str | os.PathLike], address: str | None = None,
                   *, in_flight: int | None = None) -> Iterator[ArchiveResult]:
    """Verify trace files on Ray tasks; results come in the order of `paths`.

    Uses the running Ray, or starts (or joins, with `address`) one. At most `in_flight` files are
    verified at once (default: twice the cluster's CPUs), so an archive of any size holds only
    that many results in memory. The files must be readable where the tasks run (on a cluster:
    shared storage)."""
    ray = connect(address)
    task = ray.remote(verify_one)
    limit = in_flight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    pending: list = []
    for path in paths:
        pending.append(task.remote(os.fspath(path)))
        if len(pending) >= limit:
            yield ray.get(pending.pop(0))
    for ref in pending:
        yield ray.get(ref)
