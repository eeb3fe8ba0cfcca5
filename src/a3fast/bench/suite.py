"""One benchmark run: every fleet size, every engine and baseline, every scenario, in one process.

Per fleet size (`a3fast.workload`, seed 0): build each subject, time the scenarios of
`subjects.SCENARIOS` side by side (harness), and record the fleet build time and index bytes per
agent. At the largest size: one-agent updates (add, replace, remove) and, in a process of its own,
the peak RSS of a scheduler holding the native fleet. Then the other subjects of `a3fast.bench`:
the verifier, skill resolution, and explanations at fleet scale.

Sizes of `large_from` agents or more (opt-in: `a3fast bench --sizes 1000000`) are measured as large
fleets instead (`bench.large`): ready from JSON Lines, a placement, snapshot save and load.
"""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import orjson

from .. import predicates
from ..engines import available_engines
from ..fleet import FleetProtocol
from ..schema import Declaration, Requirements, parse_declaration, parse_requirements, requirements_reader
from .authority import bench_resolve
from .batching import bench_batching
from .baselines import AGREEMENT_TASKS, BASELINES, disagreement
from .compact import bench_compact
from .cores import bench_place_many
from .embedding import bench_embedding
from .replay import bench_replay
from .harness import Cell, measure_cells, time_each
from .http import bench_http
from .k8s import bench_k8s
from .pipelined import bench_pipelined
from .machine import machine_info
from .matchers import bench_harness_overhead
from .subjects import FROM_DICT, SCENARIOS, BaselineSubject, EngineSubject, Subject, build_subjects
from .verify import bench_verify

__all__ = ["BenchConfig", "BenchReport", "new_report", "run_bench", "EXTRA_BENCHES", "HTTP_TITLE", "REPLAY_TITLE",
           "BATCHING_TITLE"]

#: The HTTP row's title (report.targets finds its figures by it).
HTTP_TITLE = ("HTTP placements against a raw ASGI echo on the same server stack (1,000 agents, compact records, "
              "a3fast serve --fsync never)")

#: The batching row's title (report.targets finds its figures by it).
BATCHING_TITLE = ("batching: place_many against placing one by one (1,000 agents, 2,000 fresh standard tasks as "
                  "dicts; baseline: Fleet.place in a loop, same rounds)")

#: The replay row's title (report.targets finds its figures by it).
REPLAY_TITLE = "replay (compact trace at 1,000 agents, a clearance revoked)"

#: The subjects measured after the matcher: (title, function taking `quick`).
EXTRA_BENCHES: tuple[tuple[str, Callable[..., dict[str, Any]]], ...] = (
    ("verifier (§7)", bench_verify),
    ("skill resolution (authority)", bench_resolve),
    ("explanations at fleet scale (compact trace, cache)", bench_compact),
    ("place_many on 2 cores against 1 (prepared standard tasks; baseline: the 1-core run)", bench_place_many),
    (BATCHING_TITLE, bench_batching),
    ("embedding (the README's flow: generate, place_many, save and load, compact trace, verify)", bench_embedding),
    (REPLAY_TITLE, bench_replay),
    ("Kubernetes extender, 5,000 nodes (a3fast serve over HTTP)", bench_k8s),
    ("stdio, pipelined (1,000 agents, compact records, beside Fleet.place in process)", bench_pipelined),
    ("harness overhead (a3fast over stdio through the matcher bench's client, beside a raw client, same window)",
     bench_harness_overhead),
    (HTTP_TITLE, bench_http),
)


@dataclass(frozen=True)
class BenchConfig:
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    engines: tuple[str, ...] = tuple(available_engines())
    tasks: int = 200
    rounds: int = 7
    budget_s: float = 2.0          # per cell, over all rounds
    min_tasks: int = 3
    updates: int = 200
    seed: int = 0
    memory: bool = True
    extras: bool = True
    quick: bool = False
    #: sizes from this many agents are measured as large fleets (bench.large), not per scenario
    large_from: int = 1_000_000
    #: runs of the `place` and `serve` processes per large size (medians; 0 leaves them out)
    shell_runs: int = 3

    @property
    def standard_sizes(self) -> tuple[int, ...]:
        return tuple(n for n in self.sizes if n < self.large_from)

    @property
    def large_sizes(self) -> tuple[int, ...]:
        return tuple(n for n in self.sizes if n >= self.large_from)

    @classmethod
    def quick_run(cls, sizes: Sequence[int] = (1_000,)) -> "BenchConfig":
        """Every scenario once on small fleets: a smoke test that keeps the benchmark from rotting."""
        return cls(sizes=tuple(sizes), tasks=30, rounds=2, budget_s=0.15, min_tasks=3, updates=30,
                   quick=True)


@dataclass
class BenchReport:
    config: BenchConfig
    started: str
    machine: dict[str, Any]
    cells: list[Cell] = field(default_factory=list)
    #: (size, subject, source) -> seconds; source "dicts" or "declarations" (parsed beforehand)
    builds: dict[tuple[int, str, str], float] = field(default_factory=dict)
    #: size -> median µs to parse one declaration
    parse_us: dict[int, float] = field(default_factory=dict)
    #: size -> reader -> median µs to read one task's requirements from a dict: "python" (the fast
    #: path in Python, what the pure engine reads with), "compiled" (a3fast._ingest), and
    #: "parse_requirements" (the default engine's, as a caller pays it); "_first": a predicate set
    #: met for the first time (see `_requirements_us`)
    requirements_us: dict[int, dict[str, float]] = field(default_factory=dict)
    #: (size, engine) -> index bytes per agent
    index_bytes: dict[tuple[int, str], float] = field(default_factory=dict)
    update_size: int = 0
    #: (engine, operation) -> ns per update
    updates: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    memory: dict[str, Any] | None = None
    #: size -> figures of bench.large (sizes of `config.large_from` agents or more)
    large: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: (title, figures or the reason there are none)
    extras: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)

    def cell(self, size: int, subject: str, scenario: str) -> Cell | None:
        for c in self.cells:
            if (c.size, c.subject, c.scenario) == (size, subject, scenario):
                return c
        return None


def new_report(config: BenchConfig) -> BenchReport:
    """An empty report of a run that starts now."""
    return BenchReport(config, datetime.now(timezone.utc).isoformat(), machine_info())


def run_bench(config: BenchConfig = BenchConfig(), progress: Callable[[str], None] = lambda _: None,
              report: BenchReport | None = None) -> BenchReport:
    """Measure everything `config` asks for into `report` (a new one if None), figure by figure, so
    that a run that fails part of the way leaves what it measured in the report it was given."""
    from ..workload import generate_fleet, generate_tasks

    report = new_report(config) if report is None else report
    for size in config.standard_sizes:
        progress(f"{size:,} agents: generating the workload")
        declarations = generate_fleet(size, seed=config.seed)
        docs = generate_tasks(declarations, config.tasks, seed=config.seed)
        prepared = [parse_requirements(doc) for doc in docs]
        report.parse_us[size] = statistics.median(time_each(parse_declaration, declarations[:2000])) / 1e3
        report.requirements_us[size] = _requirements_us(docs, config.engines, max(config.rounds, 5))

        progress(f"{size:,} agents: building the fleets and baselines")
        subjects: list[Subject] = []
        for engine in config.engines:
            started = time.perf_counter()
            subject = EngineSubject(engine, declarations)
            report.builds[(size, engine, "dicts")] = time.perf_counter() - started
            report.index_bytes[(size, engine)] = subject.fleet.index_nbytes() / size
            subjects.append(subject)
        parsed = [parse_declaration(d) for d in declarations]
        for engine in config.engines:
            started = time.perf_counter()
            EngineSubject(engine, parsed)
            report.builds[(size, engine, "declarations")] = time.perf_counter() - started
        for cls in BASELINES:   # from parsed declarations: parsing is the same for all and timed above
            started = time.perf_counter()
            subjects += build_subjects(parsed, (), (cls,))
            report.builds[(size, cls.name, "declarations")] = time.perf_counter() - started
        check_baselines(subjects, prepared)

        for scenario in SCENARIOS:
            runners = [(s.name, task) for s in subjects if (task := s.task(scenario)) is not None]
            progress(f"{size:,} agents: {SCENARIOS[scenario]}")
            tasks = docs if scenario in FROM_DICT else prepared
            report.cells += measure_cells(size, scenario, runners, tasks, rounds=config.rounds,
                                          budget_s=config.budget_s * len(runners), min_tasks=config.min_tasks)
        if size == max(config.standard_sizes):
            progress(f"{size:,} agents: one-agent updates")
            report.update_size = size
            for measured in subjects:
                if isinstance(measured, EngineSubject):
                    report.updates.update(_updates(measured.fleet, measured.name, parsed, config.updates))
        del subjects, parsed, declarations

    engine = "native" if "native" in config.engines else config.engines[0]
    for size in config.large_sizes:
        from .large import bench_large

        progress(f"{size:,} agents: JSON Lines, a placement, snapshot save and load (processes of their own)")
        report.large[size] = bench_large(size, engine, tasks=config.tasks, seed=config.seed,
                                         rounds=config.rounds, budget_s=config.budget_s,
                                         shell_runs=config.shell_runs)
    if config.memory and config.standard_sizes:
        from .memory import measure

        progress(f"{max(config.standard_sizes):,} agents: peak RSS of a process holding the native fleet")
        report.memory = measure(max(config.standard_sizes), engine)
    if config.extras:
        _extras(config.quick, progress, report.extras)
    return report


def check_baselines(subjects: Sequence[Subject], tasks: Sequence[Requirements]) -> None:
    """RuntimeError unless every baseline among `subjects` decides the first AGREEMENT_TASKS of
    `tasks` as the first engine among them does: a ratio between them must compare the same work."""
    engine = next(s for s in subjects if isinstance(s, EngineSubject))
    for subject in subjects:
        if isinstance(subject, BaselineSubject):
            problem = disagreement(subject.baseline, engine.place, tasks[:AGREEMENT_TASKS])
            if problem is not None:
                raise RuntimeError(problem)


def _requirements_us(docs: Sequence[dict], engines: Sequence[str], rounds: int) -> dict[str, float]:
    """Median µs per document of each reader of requirements dicts, side by side: the rounds take
    the readers in turn. "python", "compiled", "parse_requirements": each round reads every
    document once, memos warm (as placements repeating a workload's vocabulary see them);
    "python_first", "compiled_first": each round reads documents decoded afresh with the memo of
    derived predicate sets emptied before it, so each document is a set met for the first time (a
    service's first sighting of a text, a replay's distinct tasks). Each pass starts from a full
    collection, so none pays for the garbage of the one before."""
    readers: dict[str, Callable[..., Any]] = {"python": requirements_reader("pure")}
    if "native" in engines:
        readers["compiled"] = requirements_reader("native")
    texts = [orjson.dumps(doc) for doc in docs]
    per_round: dict[str, list[float]] = {}

    def timed(name: str, read: Callable[..., Any], documents: Sequence[dict]) -> None:
        gc.collect()
        started = time.perf_counter_ns()
        for doc in documents:
            read(doc)
        per_round.setdefault(name, []).append((time.perf_counter_ns() - started) / len(documents) / 1e3)

    for _ in range(rounds + 1):  # the first round warms the memos and is not kept
        for name, read in [*readers.items(), ("parse_requirements", parse_requirements)]:
            timed(name, read, docs)
        for name, read in readers.items():
            fresh = [orjson.loads(text) for text in texts]
            predicates.DERIVED.clear()
            predicates.DERIVED_ONCE.clear()   # nor noted once: a set met for the first time indeed
            timed(name + "_first", read, fresh)
    return {name: statistics.median(us[1:]) for name, us in per_round.items()}


def _updates(fleet: FleetProtocol, engine: str, parsed: Sequence[Declaration],
             count: int) -> dict[tuple[str, str], list[int]]:
    """ns to remove an agent, add it back, replace it with other content, and add a new one
    (declarations parsed beforehand: parsing is measured on its own), on any fleet; `engine` labels
    the figures."""
    count = min(count, len(parsed) // 2)
    victims = parsed[:count]
    others = [d.doc for d in parsed[count:2 * count]]
    replacements = [parse_declaration({**o, "agent": v.doc["agent"]}) for v, o in zip(victims, others)]
    newcomers = [parse_declaration({**o, "agent": {**o["agent"], "name": o["agent"]["name"] + "-new"}})
                 for o in others]
    return {(engine, "remove"): time_each(lambda d: fleet.remove(d.agent.name), victims),
            (engine, "add (returning name)"): time_each(fleet.add, victims),
            (engine, "replace"): time_each(fleet.add, replacements),
            (engine, "add (new name)"): time_each(fleet.add, newcomers)}


def _extras(quick: bool, progress: Callable[[str], None],
            out: list[tuple[str, dict[str, Any] | str]]) -> list[tuple[str, dict[str, Any] | str]]:
    """Each other subject's figures appended to `out` as it is measured (a failed one is told in its
    row, and the others are still measured)."""
    for title, bench in EXTRA_BENCHES:
        progress(title)
        # what the run measured before is frozen out of the collector while a bench runs: its
        # clients and in-process subjects would otherwise pay full collections over all of it
        # (the harness overhead row read +22% so, against +6% from a process of its own)
        gc.collect()
        gc.freeze()
        try:
            out.append((title, bench(quick=quick)))
        except Exception as exc:   # one subject's failure is its row's, not the whole run's
            out.append((title, f"not measured: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"))
        finally:
            gc.unfreeze()
    return out
