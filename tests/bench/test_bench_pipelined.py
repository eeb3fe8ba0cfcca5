"""The pipelined stdio bench row: every request it sends is answered, and its figures are the ones
the report and docs quote (no timing is asserted)."""
from __future__ import annotations

import orjson

from a3fast.bench.pipelined import _over_stdio, bench_pipelined, request_lines
from a3fast.bench.report import targets
from a3fast.workload import generate_fleet, generate_tasks


def test_pipelined_bench_reads_one_answer_per_request_and_reports_its_rows():
    figures = bench_pipelined(tasks=60, rounds=1)
    assert figures["placements"] == 60 and figures["agents"] == 1000
    for key in ("stdio_per_s", "stdio_us", "in_process_us", "served_in_process_us", "x_in_process"):
        assert figures[key] > 0, key
    # the served process's CPU time is counted in clock ticks (10 ms): 60 placements may take fewer
    for key in ("stdio_service_cpu_us", "in_process_cpu_us", "cpu_x_in_process"):
        assert figures[key] >= 0, key

    class Report:
        extras = [("stdio, pipelined (1,000 agents, compact records, beside Fleet.place in process)", figures)]
        large: dict = {}
        update_size = 0
        updates: dict = {}
        builds: dict = {}
        index_bytes: dict = {}

        def cell(self, *_):
            return None

    texts = [text for text, _, _ in targets(Report())]   # type: ignore[arg-type]
    assert any("≥ 20,000 placements/s" in t for t in texts)
    assert any("≤ 2× Fleet.place" in t for t in texts)


def test_pipelined_requests_are_compact_place_requests_in_order():
    fleet = generate_fleet(5, seed=1)
    tasks = generate_tasks(fleet, 3, seed=1)
    lines = [orjson.loads(line) for line in request_lines(tasks).splitlines()]
    assert [line["id"] for line in lines] == [0, 1, 2]
    assert all(line["op"] == "place" and line["record"] == "compact" for line in lines)
    load = orjson.dumps({"op": "put_agents", "declarations": fleet}) + b"\n"
    wall, cpu = _over_stdio(load, request_lines(tasks), 3)
    assert wall > 0 and cpu >= 0
