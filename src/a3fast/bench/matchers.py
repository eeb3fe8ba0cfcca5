"""Matchers side by side: the standard workload through each matcher's stdio protocol, beside a3fast
in process and a3fast over the same protocol (`a3fast serve --stdio`), so the protocol's cost is
visible and shared by every protocol subject.

Per subject: fleet load time (the declarations sent in put_agents requests of LOAD_CHUNK), then the
tasks placed one request at a time (request/response, as a scheduler would), each placement's
wall-clock latency measured by the harness; placements per second over the placement phase; and
the peak RSS of the matcher's process tree, polled with psutil. Subjects take turns task by task,
so a burst of load on a shared machine lands on all of them; each subject's time is bounded.
"""
from __future__ import annotations

import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import orjson

from .. import workload
from ..fleet import Fleet
from ..harness.client import MatcherFailure, MatcherProcess

__all__ = ["MatcherRun", "MatcherBench", "run_matcher_bench", "render_matchers", "to_pytest_benchmark",
           "IN_PROCESS", "OVER_PROTOCOL"]

IN_PROCESS = "a3fast (in process)"
OVER_PROTOCOL = "a3fast (stdio protocol)"
LOAD_CHUNK = 1000
#: Placements not counted while caches and allocators warm up.
WARMUP = 10
RSS_POLL_S = 0.02


@dataclass
class MatcherRun:
    subject: str
    command: str | None
    load_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    peak_rss: int | None = None
    failure: str | None = None

    @property
    def p50_us(self) -> float:
        return _quantile(self.latencies_s, 0.5) * 1e6

    @property
    def p99_us(self) -> float:
        return _quantile(self.latencies_s, 0.99) * 1e6

    @property
    def per_second(self) -> float:
        total = sum(self.latencies_s)
        return len(self.latencies_s) / total if total else 0.0


@dataclass
class MatcherBench:
    agents: int
    tasks: int
    started: str
    runs: list[MatcherRun]


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _RssPoller:
    """Peak RSS of a process and its children, polled on a thread until stopped."""

    def __init__(self, pid: int):
        import psutil

        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        import psutil

        try:
            total = self.process.memory_info().rss
            for child in self.process.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            return
        self.peak = max(self.peak, total)

    def _run(self) -> None:
        while not self._stop.wait(RSS_POLL_S):
            self.sample()

    def stop(self) -> int:
        self.sample()
        self._stop.set()
        self._thread.join()
        return self.peak


class _ProtocolSubject:
    def __init__(self, run: MatcherRun, timeout: float):
        self.run = run
        self.process = MatcherProcess(run.command, timeout)
        self.rss = _RssPoller(self.process.pid)

    def load(self, fleet: list[dict[str, Any]]) -> None:
        started = time.perf_counter()
        for k in range(0, len(fleet), LOAD_CHUNK):
            chunk = fleet[k:k + LOAD_CHUNK]
            answer = self.process.request("put_agents", check=False, declarations=chunk)
            if answer.get("ok") is not True:
                for doc in chunk:       # a matcher without put_agents
                    self.process.request("put_agent", name=doc["agent"]["name"], declaration=doc)
        self.run.load_s = time.perf_counter() - started

    def place(self, task: dict[str, Any]) -> float:
        started = time.perf_counter()
        answer = self.process.request("place", requirements=task)
        elapsed = time.perf_counter() - started
        if not isinstance(answer.get("records"), list):
            raise MatcherFailure("malformed", "a place answer without a records list")
        return elapsed

    def close(self) -> None:
        self.run.peak_rss = self.rss.stop()
        self.process.close()


class _InProcessSubject:
    """a3fast's Fleet in this process; a placement includes its §6 record as JSON, as the service
    makes it, so that the protocol subjects add only the protocol."""

    def __init__(self, run: MatcherRun):
        self.run = run
        self.fleet = Fleet()

    def load(self, fleet: list[dict[str, Any]]) -> None:
        started = time.perf_counter()
        self.fleet.extend(fleet)
        self.run.load_s = time.perf_counter() - started

    def place(self, task: dict[str, Any]) -> float:
        started = time.perf_counter()
        p = self.fleet.place(task)
        orjson.dumps(p.scheduling if p.bound else p.rejection)
        return time.perf_counter() - started

    def close(self) -> None:
        pass


def a3fast_command() -> str:
    return f"{sys.executable} -m a3fast serve --stdio"


def run_matcher_bench(commands: list[str], agents: int = 1000, tasks: int = 300, seed: int = 0,
                      budget_s: float = 30.0, timeout: float = 30.0,
                      progress: Callable[[str], None] = lambda text: None) -> MatcherBench:
    """Every subject over the same fleet and tasks; a subject that fails is reported with why."""
    fleet = workload.generate_fleet(agents, seed=seed)
    work = workload.generate_tasks(fleet, tasks + WARMUP, seed=seed)
    runs = [MatcherRun(IN_PROCESS, None), MatcherRun(OVER_PROTOCOL, a3fast_command())]
    runs += [MatcherRun(command, command) for command in commands]
    subjects: list[Any] = []
    for run in runs:
        progress(f"loading {agents} agents into {run.subject}")
        try:
            subject = _InProcessSubject(run) if run.command is None else _ProtocolSubject(run, timeout)
        except MatcherFailure as exc:
            run.failure = exc.message
            continue
        try:
            subject.load(fleet)
            subjects.append(subject)
        except MatcherFailure as exc:
            run.failure = exc.message
            subject.close()
    progress(f"placing {tasks} tasks on each subject in turn (at most {budget_s:g} s each)")
    spent = {id(s): 0.0 for s in subjects}
    for k, task in enumerate(work):
        for subject in list(subjects):
            if spent[id(subject)] > budget_s:
                continue
            try:
                elapsed = subject.place(task)
            except MatcherFailure as exc:
                subject.run.failure = exc.message
                subjects.remove(subject)
                subject.close()
                continue
            spent[id(subject)] += elapsed
            if k >= WARMUP:
                subject.run.latencies_s.append(elapsed)
    for subject in subjects:
        subject.close()
    return MatcherBench(agents, tasks, datetime.now(timezone.utc).isoformat(), runs)


def _ratio(run: MatcherRun, base: MatcherRun | None) -> str:
    if base is None or not run.latencies_s or not base.latencies_s:
        return "—"
    return f"{run.p50_us / base.p50_us:.2f}×"


def render_matchers(bench: MatcherBench) -> str:
    """The side-by-side table: ratios are of p50 latency per placement."""
    by = {r.subject: r for r in bench.runs}
    base, proto = by.get(IN_PROCESS), by.get(OVER_PROTOCOL)
    head = ("subject", "load s", "placements/s", "p50 µs", "p99 µs", "peak RSS MiB", "× in process", "× protocol")
    rows = [head]
    for r in bench.runs:
        if r.failure and not r.latencies_s:
            rows.append((r.subject, "—", "—", "—", "—", "—", "—", "—"))
            continue
        rss = f"{r.peak_rss / 2**20:.0f}" if r.peak_rss else "—"
        rows.append((r.subject, f"{r.load_s:.3f}", f"{r.per_second:,.0f}", f"{r.p50_us:,.0f}", f"{r.p99_us:,.0f}",
                     rss, _ratio(r, base), _ratio(r, proto)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [f"Matchers side by side: {bench.agents} agents of the standard workload, "
             f"{len(base.latencies_s) if base else 0} placements each, one request at a time"]
    for j, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    for r in bench.runs:
        if r.failure:
            lines.append(f"{r.subject}: stopped: {r.failure}")
    if base and proto and base.latencies_s and proto.latencies_s:
        overhead = proto.p50_us / base.p50_us - 1
        lines.append(f"protocol overhead for a3fast: {overhead:+.0%} per placement at p50 "
                     f"(target ≤ +10%: {'met' if overhead <= 0.10 else 'missed'})")
    return "\n".join(lines)


def to_pytest_benchmark(bench: MatcherBench) -> dict[str, Any]:
    """pytest-benchmark's JSON format: one benchmark per subject, its samples the placements."""
    from .suite import machine_info

    benchmarks = []
    for r in bench.runs:
        if not r.latencies_s:
            continue
        benchmarks.append({
            "group": f"placement over the protocol @ {bench.agents}", "name": f"place[{r.subject}]",
            "fullname": f"a3fast bench --matcher::place[{r.subject}]",
            "params": {"size": bench.agents, "subject": r.subject}, "param": f"{r.subject}-{bench.agents}",
            "extra_info": {"command": r.command, "load_s": r.load_s, "peak_rss_bytes": r.peak_rss,
                           "p99_s": _quantile(r.latencies_s, 0.99), "failure": r.failure},
            "options": {"disable_gc": False, "timer": "perf_counter", "min_rounds": 1, "max_time": None,
                        "min_time": None, "warmup": False},
            "stats": _stats(r.latencies_s)})
    return {"machine_info": machine_info(), "commit_info": {"project": "a3fast"}, "benchmarks": benchmarks,
            "datetime": bench.started, "version": "4.0.0"}


def _stats(data: list[float]) -> dict[str, Any]:
    ordered = sorted(data)
    n = len(ordered)
    q1, q3 = ordered[n // 4], ordered[(3 * n) // 4]
    mean = statistics.fmean(ordered)
    return {"min": ordered[0], "max": ordered[-1], "mean": mean,
            "stddev": statistics.stdev(ordered) if n > 1 else 0.0, "rounds": n,
            "median": statistics.median(ordered), "iqr": q3 - q1, "q1": q1, "q3": q3,
            "iqr_outliers": 0, "stddev_outliers": 0, "outliers": "0;0", "ld15iqr": ordered[0],
            "hd15iqr": ordered[-1], "ops": 1 / mean if mean else 0.0, "total": sum(ordered),
            "iterations": 1, "data": ordered}
