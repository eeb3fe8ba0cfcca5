"""The pipelined stdio bench row: every request it sends is answered, and its figures are the ones
the report and docs quote (no timing is asserted)."""
from __future__ import annotations

import orjson

from a3fast.bench.pipelined import _over_stdio, bench_pipelined, request_lines
from a3fast.bench.report import targets
from a3fast.workload import generate_fleet, generate_tasks


def row_texts(*extras) -> list[str]:
    """The target rows `a3fast bench` prints for a report holding only these extra figures."""
    class Report:
        large: dict = {}
        update_size = 0
        updates: dict = {}
        builds: dict = {}
        index_bytes: dict = {}

        def cell(self, *_):
            return None

    report = Report()
    report.extras = list(extras)  # type: ignore[attr-defined]
    return [text for text, _, _ in targets(report)]  # type: ignore[arg-type]


def test_pipelined_bench_reads_one_answer_per_request_and_reports_its_rows():
    figures = bench_pipelined(tasks=60, rounds=1)
    assert figures["placements"] == 60 and figures["agents"] == 1000
    for key in ("stdio_per_s", "stdio_us", "stdio_alone_per_s", "in_process_us", "served_in_process_us",
                "x_in_process"):
        assert figures[key] > 0, key
    # the served process's CPU time is counted in clock ticks (10 ms): 60 placements may take fewer
    for key in ("stdio_service_cpu_us", "in_process_cpu_us", "cpu_x_in_process", "place_cpu_us"):
        assert figures[key] >= 0, key

    texts = row_texts(("stdio, pipelined (1,000 agents, compact records, beside Fleet.place in process)", figures))
    assert any("≥ 40,000 placements/s" in t for t in texts)
    assert any("≤ 1.5× Fleet.place" in t for t in texts)
    assert any(t.startswith("service path's own cost") and "≤ 10 µs" in t for t in texts)


def test_pipelined_requests_are_compact_place_requests_in_order():
    fleet = generate_fleet(5, seed=1)
    tasks = generate_tasks(fleet, 3, seed=1)
    lines = [orjson.loads(line) for line in request_lines(tasks).splitlines()]
    assert [line["id"] for line in lines] == [0, 1, 2]
    assert all(line["op"] == "place" and line["record"] == "compact-stream" for line in lines)
    assert all(orjson.loads(line)["record"] == "compact" for line in request_lines(tasks, "compact").splitlines())
    load = orjson.dumps({"op": "put_agents", "declarations": fleet}) + b"\n"
    wall, cpu = _over_stdio(load, request_lines(tasks), 3)
    assert wall > 0 and cpu >= 0


def test_harness_overhead_row_drives_both_clients_and_reports_beside_its_target():
    from a3fast.bench.matchers import bench_harness_overhead

    figures = bench_harness_overhead(tasks=64, window=16)
    assert figures["record"] == "compact-stream" and figures["window"] == 16
    assert figures["placements"] == 64
    assert figures["harness_us"] > 0 and figures["raw_us"] > 0
    assert figures["overhead"] == figures["harness_us"] / figures["raw_us"] - 1

    texts = row_texts(("harness overhead (a3fast over stdio, ...)", figures))
    assert any(t.startswith("harness overhead ≤ 10%") for t in texts)
