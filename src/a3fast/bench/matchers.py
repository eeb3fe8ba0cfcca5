"""Matchers side by side: the standard workload through each matcher's stdio protocol, beside a3fast
in process and a3fast over the same protocol (`a3fast serve --stdio`), so the protocol's cost is
visible and shared by every protocol subject.

Per subject: fleet load time (the declarations sent in put_agents requests of LOAD_CHUNK), then the
tasks placed one request at a time (request/response, as a scheduler would), each placement's
wall-clock latency measured by the harness; placements per second over the placement phase; and
the peak RSS of the matcher's process tree, polled with psutil. Subjects take turns task by task,
so a burst of load on a shared machine lands on all of them; each subject's time is bounded.

The record form (`record`, default "compact") is asked of every protocol subject, as the stdio place
op's `record` field — for "compact", `compact-stream` first (the bench reads every answer in order,
so a fleet snapshot need go down the stream only once), then `compact`; a matcher that answers a form
with a problem at `$.record` is asked again with the next, then without any, and a matcher that
ignores it answers spec records, which are timed as they come. a3fast in
process makes its records in the same form, by the same code as the service, so that the difference
between the two a3fast rows is the protocol alone: the request and answer as JSON, two pipe hops,
the service's trace write, and the client's reading of the answer. The client decodes only what the
bench checks (that the answer echoes the id and holds one task.bound or task.rejected record), with
msgspec structs whose record contents are left undecoded; after each window, outside its time, it
reads each answer's decision (the task.admitted agent, else the spec task.bound's declaration) and
holds it to the agents a3fast in process finds eligible for the task (`_hold_to_hard_filter`).
"""
from __future__ import annotations

import statistics
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import msgspec
import orjson

from .. import workload
from ..fleet import Fleet
from ..harness.client import PIPELINE_WINDOW, MatcherFailure, MatcherProcess, echoes
from ..record.compact import Encoder
from ..service.operations import STREAM as STREAM_FORM
from ..trace import placement_lines

__all__ = ["MatcherRun", "MatcherBench", "run_matcher_bench", "render_matchers", "to_pytest_benchmark",
           "bench_harness_overhead",
           "IN_PROCESS", "OVER_PROTOCOL", "RECORD_FORMS"]

IN_PROCESS = "a3fast (in process)"
OVER_PROTOCOL = "a3fast (stdio protocol)"
LOAD_CHUNK = 1000
#: Placements not counted while caches and allocators warm up.
WARMUP = 10
RSS_POLL_S = 0.02
#: The record forms a bench can ask for (the stdio place op's `record` field).
RECORD_FORMS = ("compact", "spec")


@dataclass
class MatcherRun:
    subject: str
    command: str | None
    load_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    peak_rss: int | None = None
    failure: str | None = None
    #: placements whose decision was held to the hard filter (`_hold_to_hard_filter`), how many of
    #: them broke it, and the first that did, in words; and answers whose decision could not be read
    checked: int = 0
    broke: int = 0
    first_broken: str | None = None
    unread: int = 0

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
    record: str = "compact"
    #: requests sent before their answers are read
    window: int = 1


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


class _Record(msgspec.Struct):
    kind: str
    content: msgspec.Raw = msgspec.Raw(b"null")


class _Problem(msgspec.Struct):
    path: Any = None


class _PlaceAnswer(msgspec.Struct):
    """What the bench reads of a place answer; other members are skipped, contents left as raw JSON."""
    id: Any = None
    ok: Any = None
    records: list[_Record] | None = None
    problems: list[_Problem] | None = None


_read_place_answer = msgspec.json.Decoder(_PlaceAnswer).decode


class _Named(msgspec.Struct):
    name: Any = None


class _WithAgent(msgspec.Struct):
    """A task.admitted record's content, and a declaration: both name their agent in `agent`."""
    agent: _Named | None = None


class _Scheduling(msgspec.Struct):
    declaration: _WithAgent | None = None


class _Bound(msgspec.Struct):
    scheduling: _Scheduling | None = None


_read_admitted = msgspec.json.Decoder(_WithAgent).decode
_read_bound = msgspec.json.Decoder(_Bound).decode
#: a decision the answer's records do not say in a form the bench reads
UNREAD = object()


def _admitted_agent(content: msgspec.Raw) -> _Named | None:
    return _read_admitted(content).agent


def _bound_agent(content: msgspec.Raw) -> _Named | None:
    scheduling = _read_bound(content).scheduling
    declaration = scheduling.declaration if scheduling is not None else None
    return declaration.agent if declaration is not None else None


def _decision(answer: _PlaceAnswer) -> Any:
    """The agent a place answer bound its task to (its name), None for a rejection, or UNREAD: from
    the task.admitted record (plain in every record form), else the spec task.bound's declaration."""
    records = answer.records or []
    if any(r.kind == "task.rejected" for r in records):
        return None
    for kind, agent_of in (("task.admitted", _admitted_agent), ("task.bound", _bound_agent)):
        for r in records:
            if r.kind == kind:
                try:
                    agent = agent_of(r.content)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                if agent is not None and type(agent.name) is str:
                    return agent.name
    return UNREAD


def _hard_filter_problem(decision: Any, eligible: frozenset[str]) -> str | None:
    """What is wrong with a decision against the agents that pass every predicate of its task, or
    None. Which eligible agent is chosen is the matcher's own (scores are opaque, §5), and a task's
    eligible agents do not depend on what was placed before (only scores do), so every matcher's
    decisions are held to the same sets."""
    if decision is None:
        return f"rejected, while {len(eligible)} agent(s) pass every predicate" if eligible else None
    if decision not in eligible:
        return (f"bound to {decision!r}, which does not pass every predicate" if eligible else
                f"bound to {decision!r}, while no agent passes every predicate")
    return None


class _ProtocolSubject:
    def __init__(self, run: MatcherRun, timeout: float, record: str):
        self.run = run
        assert run.command is not None  # a run over the protocol has a command
        self.process = MatcherProcess(run.command, timeout)
        try:
            self.rss = _RssPoller(self.process.pid)
        except BaseException:       # an interruption here too: the matcher is stopped, not left
            self.process.close()
            raise
        # the forms to ask for, best first: a compact client reads every answer in order, so it
        # asks for compact-stream (each fleet snapshot sent once), then compact, then the default
        self.forms: list[str] = {"spec": [], "compact": [STREAM_FORM, "compact"]}.get(record, [record])
        #: the decisions of the last window placed (`_decision`), outside its time
        self.decisions: list[Any] = []

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
        return self.place_window([task])

    def place_window(self, tasks: list[dict[str, Any]]) -> float:
        """Seconds to place `tasks`, sent pipelined (all written, then the answers read)."""
        requests = [{"requirements": t, "record": self.forms[0]} if self.forms else {"requirements": t}
                    for t in tasks]
        started = time.perf_counter()
        answers = self.process.request_lines_pipelined("place", requests, window=max(1, len(requests)))
        elapsed = time.perf_counter() - started
        decisions = []
        for rid, line in answers:
            answer = self._checked(rid, line)
            if answer is None:
                self.forms.pop(0)       # a matcher that refuses the record form: asked again with the next
                return self.place_window(tasks)
            decisions.append(_decision(answer))
        self.decisions = decisions
        return elapsed

    def _checked(self, rid: int, line: bytes) -> _PlaceAnswer | None:
        """The place answer, if the line is one; None for a refusal of the record form (ask again
        without it); MatcherFailure for anything else."""
        try:
            answer = _read_place_answer(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise MatcherFailure("malformed", f"the answer to a place request is not a place answer ({exc})") from None
        if not echoes(answer.id, rid):
            raise MatcherFailure("malformed", f"the answer to place request {rid} carries id {answer.id!r}: "
                                 f"answers must echo the request's id, in order")
        if answer.ok is not True and self.forms and any(
                p.path == "$.record" for p in answer.problems or ()):
            return None
        if answer.ok is not True:
            raise MatcherFailure("refused", f"place was refused: {line[:200].decode('utf-8', 'replace')}")
        if answer.records is None:
            raise MatcherFailure("malformed", "a place answer without a records list")
        decisions = sum(r.kind in ("task.bound", "task.rejected") for r in answer.records)
        if decisions != 1:
            raise MatcherFailure("malformed", f"a place answer with {decisions} task.bound or task.rejected "
                                 f"records (expected one)")
        return answer

    def close(self) -> None:
        self.run.peak_rss = self.rss.stop()
        self.process.close()


class _InProcessSubject:
    """a3fast's Fleet in this process; a placement includes its trace records as JSON Lines in the
    bench's record form, made as the service makes them, so that the protocol subjects add only the
    protocol."""

    def __init__(self, run: MatcherRun, record: str):
        self.run = run
        self.fleet = Fleet()
        self.encoder = Encoder() if record == "compact" else None
        self.seq = 1
        #: the agents that pass every predicate of each task of the last window, outside its time
        self.eligible: list[frozenset[str]] = []

    def load(self, fleet: list[dict[str, Any]]) -> None:
        started = time.perf_counter()
        self.fleet.extend(fleet)
        self.run.load_s = time.perf_counter() - started

    def place(self, task: dict[str, Any]) -> float:
        started = time.perf_counter()
        p = self.fleet.place(task)
        if self.encoder is not None:
            _, count = self.encoder.encode_placement_lines(self.seq, p)
        else:
            _, count = placement_lines(p, self.seq)
        self.seq += count
        elapsed = time.perf_counter() - started
        self.eligible.append(frozenset(p.eligible))
        return elapsed

    def place_window(self, tasks: list[dict[str, Any]]) -> float:
        self.eligible = []
        return sum(self.place(task) for task in tasks)

    def close(self) -> None:
        pass


def a3fast_command() -> str:
    """a3fast's own stdio matcher as a command line (the interpreter's path quoted: it may hold a
    space)."""
    return shlex.join([sys.executable, "-m", "a3fast", "serve", "--stdio"])


def run_matcher_bench(commands: list[str], agents: int = 1000, tasks: int = 300, seed: int = 0,
                      budget_s: float = 30.0, timeout: float = 30.0, record: str = "compact",
                      window: int = PIPELINE_WINDOW, progress: Callable[[str], None] = lambda text: None) -> MatcherBench:
    """Every subject over the same fleet and tasks, records asked for in `record` form (RECORD_FORMS);
    a subject that fails is reported with why, except one of `commands` that cannot start at all
    (MatcherFailure, kind "start"): that is the caller's mistake. Protocol subjects are sent `window` requests at a
    time before their answers are read (1: one request at a time); a window's placements are each
    counted at the window's time over its size."""
    if record not in RECORD_FORMS:
        raise ValueError(f"record: one of {', '.join(RECORD_FORMS)}, not {record!r}")
    fleet = workload.generate_fleet(agents, seed=seed)
    if window < 1:
        raise ValueError(f"window: at least 1, not {window}")
    warmup = -(-WARMUP // window) * window      # whole windows
    work = workload.generate_tasks(fleet, tasks + warmup, seed=seed)
    runs = [MatcherRun(IN_PROCESS, None), MatcherRun(OVER_PROTOCOL, a3fast_command())]
    runs += [MatcherRun(command, command) for command in commands]
    subjects: list[Any] = []
    try:      # however the run ends (an interruption too), every matcher started is stopped
        for run in runs:
            progress(f"loading {agents} agents into {run.subject}")
            try:
                subject = (_InProcessSubject(run, record) if run.command is None
                           else _ProtocolSubject(run, timeout, record))
            except MatcherFailure as exc:
                if exc.kind == "start" and run.command in commands:
                    raise     # a command the caller gave that cannot start: its option is wrong
                run.failure = exc.message
                continue
            subjects.append(subject)
            try:
                subject.load(fleet)
            except MatcherFailure as exc:
                run.failure = exc.message
                subjects.remove(subject)
                subject.close()
        progress(f"placing {tasks} tasks on each subject in turn (at most {budget_s:g} s each)")
        spent = {id(s): 0.0 for s in subjects}
        for k in range(0, len(work), window):
            chunk = work[k:k + window]
            # a3fast in process places each window first: its eligible agents of the window's tasks
            eligible: list[frozenset[str]] | None = None
            for subject in list(subjects):
                if spent[id(subject)] > budget_s:
                    continue
                try:
                    elapsed = subject.place_window(chunk)
                except MatcherFailure as exc:
                    subject.run.failure = exc.message
                    subjects.remove(subject)
                    subject.close()
                    continue
                spent[id(subject)] += elapsed
                if k >= warmup:     # a window's placements are counted at the window's mean
                    subject.run.latencies_s.extend([elapsed / len(chunk)] * len(chunk))
                if isinstance(subject, _InProcessSubject):
                    eligible = subject.eligible
                elif eligible is not None:
                    _hold_to_hard_filter(subject.run, subject.decisions, eligible, k)
    finally:
        for subject in subjects:
            try:
                subject.close()
            except BaseException:   # the others are still stopped; the first failure is raised
                for rest in subjects[subjects.index(subject) + 1:]:
                    rest.close()
                raise
    return MatcherBench(agents, tasks, datetime.now(timezone.utc).isoformat(), runs, record, window)


def _hold_to_hard_filter(run: MatcherRun, decisions: list[Any], eligible: list[frozenset[str]], first: int) -> None:
    """Count a window's decisions against the agents that pass every predicate of its tasks
    (a3fast in process's), noting the first that breaks the hard filter, by its task's number."""
    for k, (decision, agents) in enumerate(zip(decisions, eligible), first + 1):
        if decision is UNREAD:
            run.unread += 1
            continue
        run.checked += 1
        problem = _hard_filter_problem(decision, agents)
        if problem is not None:
            run.broke += 1
            if run.first_broken is None:
                run.first_broken = f"task {k}: {problem}"


def bench_harness_overhead(quick: bool = False, tasks: int | None = None, window: int = PIPELINE_WINDOW,
                           agents: int = 1000, timeout: float = 30.0) -> dict[str, Any]:
    """What the harness itself adds to a placement: `a3fast serve --stdio` driven by the matcher
    bench's protocol subject (requests built and checked as the bench does), beside a second
    `a3fast serve --stdio` sent the same requests pre-encoded, `window` at a time, its answers read
    as lines and only counted (the floor: the protocol without the harness). Windows alternate
    between the two; each figure is the median over windows of a window's time per placement."""
    n = tasks or (320 if quick else 1_600)
    fleet = workload.generate_fleet(agents, seed=0)
    work = workload.generate_tasks(fleet, n + WARMUP * window, seed=0)
    harness = _ProtocolSubject(MatcherRun(OVER_PROTOCOL, a3fast_command()), timeout, "compact")
    try:
        raw = MatcherProcess(a3fast_command(), timeout)
    except BaseException:
        harness.close()
        raise
    try:
        harness.load(fleet)
        raw.request("put_agents", declarations=fleet)
        form = harness.forms[0] if harness.forms else None
        windows = [work[k:k + window] for k in range(0, len(work), window)]
        encoded = [b"".join(orjson.dumps({"op": "place", "id": f"r{k}-{j}", "requirements": t,
                                          **({"record": form} if form else {})}) + b"\n"
                            for j, t in enumerate(chunk)) for k, chunk in enumerate(windows)]
        through_harness: list[float] = []
        floor: list[float] = []
        for k, (chunk, data) in enumerate(zip(windows, encoded)):
            elapsed = harness.place_window(chunk)
            started = time.perf_counter()
            raw.write_raw(data, "place")
            for _ in chunk:
                raw.read_line("place")
            raw_elapsed = time.perf_counter() - started
            if k >= WARMUP:
                through_harness.append(elapsed / len(chunk))
                floor.append(raw_elapsed / len(chunk))
    finally:
        harness.close()
        raw.close()
    h, f = statistics.median(through_harness), statistics.median(floor)
    return {"agents": agents, "placements": len(through_harness) * window, "window": window, "record": form,
            "harness_us": h * 1e6, "raw_us": f * 1e6, "overhead": h / f - 1}


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
             f"{len(base.latencies_s) if base else 0} placements each, "
             f"{'one request at a time' if bench.window == 1 else f'{bench.window} requests pipelined at a time'}, "
             f"{bench.record} records asked for"]
    for j, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    for r in bench.runs:
        if r.failure:
            lines.append(f"{r.subject}: stopped: {r.failure}")
    for r in bench.runs:
        if r.broke:
            lines.append(f"{r.subject}: WRONG: {r.broke} of {r.checked} decisions break the hard filter "
                         f"(§5; first: {r.first_broken}); its figures are of wrong placements")
    for r in bench.runs:
        if r.unread:
            lines.append(f"{r.subject}: {r.unread} answers' decisions not read (no task.admitted agent, no spec "
                         f"task.bound declaration): not held to the hard filter")
    checked = [r for r in bench.runs if r.checked and not r.broke]
    if checked:
        lines.append("decisions held to the hard filter (each bound agent passes every predicate, each "
                     "rejection has none that does): " + ", ".join(f"{r.subject} {r.checked}" for r in checked))
    if base and proto and base.latencies_s and proto.latencies_s:
        overhead = proto.p50_us / base.p50_us - 1
        lines.append(f"the protocol's cost for a3fast: {overhead:+.0%} per placement at p50 over a3fast in "
                     f"process (the harness's own share: `a3fast bench`, row \"harness overhead\")")
    return "\n".join(lines)


def to_pytest_benchmark(bench: MatcherBench) -> dict[str, Any]:
    """pytest-benchmark's JSON format: one benchmark per subject, its samples the placements."""
    from .machine import machine_info

    benchmarks = []
    for r in bench.runs:
        if not r.latencies_s:
            continue
        benchmarks.append({
            "group": f"placement over the protocol @ {bench.agents}", "name": f"place[{r.subject}]",
            "fullname": f"a3fast bench --matcher::place[{r.subject}]",
            "params": {"size": bench.agents, "subject": r.subject, "record": bench.record}, "param": f"{r.subject}-{bench.agents}",
            "extra_info": {"command": r.command, "load_s": r.load_s, "peak_rss_bytes": r.peak_rss,
                           "p99_s": _quantile(r.latencies_s, 0.99), "failure": r.failure,
                           "decisions_checked": r.checked, "decisions_wrong": r.broke,
                           "first_wrong": r.first_broken, "decisions_unread": r.unread},
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
