"""The large-fleet benchmark (`a3fast bench --sizes 1000000`) runs the same code at a small size:
every step in a process of its own, figures that hold together, the targets it names, the table."""
from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from a3fast.bench import BenchConfig, render, run_bench, targets, to_pytest_benchmark
from a3fast.bench.report import _large_lines
from a3fast.cli import main


@pytest.mark.slow
def test_sizes_from_large_from_take_the_large_fleet_path_and_no_scenario_cells(engine):
    config = BenchConfig(sizes=(300, 2000), engines=(engine,), large_from=2000, tasks=20, rounds=2,
                         budget_s=0.2, memory=False, extras=False, shell_runs=1)
    assert (config.standard_sizes, config.large_sizes) == ((300,), (2000,))
    report = run_bench(config)
    assert {c.size for c in report.cells} == {300}
    large = report.large[2000]
    assert (large["agents"], large["engine"]) == (2000, engine)
    for key in ("write_s", "decode_s", "ready_s", "save_s", "load_s", "place_ns"):
        assert large[key] > 0, key
    assert 3 <= large["place_tasks"] <= 20
    # each peak is of a process of its own that held the fleet: more than an empty interpreter's few MiB
    for key in ("ready_peak_rss", "save_peak_rss", "load_peak_rss"):
        assert 20 * 2**20 < large[key] < 4 * 2**30, key
    assert large["save_peak_rss"] >= large["ready_peak_rss"]
    # the place and serve processes a user runs, on the same file, beside orjson's dicts
    assert large["shell_runs"] == 1
    for key in ("shell_dicts_s", "place_cli_s", "serve_ready_s"):
        assert large[key] > 0, key
    for key in ("place_cli_peak_rss", "serve_ready_peak_rss"):
        assert 20 * 2**20 < large[key] < 4 * 2**30, key
    assert large["jsonl_bytes"] > 2000 * 500 and large["snapshot_bytes"] > 2000 * 500
    text = " ".join(render(report).split())    # lines wrapped at 100 columns, read as one
    assert "2,000 agents" in text and "ready from JSON Lines" in text and "Fleet.load of the snapshot" in text
    assert "a3fast place --fleet F --requirements R" in text and "to 200 on /readyz" in text
    assert to_pytest_benchmark(report)["a3fast"]["large"]["2000"] == large


def test_the_large_fleet_targets_are_checked_at_a_million_agents_only():
    figures = {"agents": 1_000_000, "engine": "native", "write_s": 60.0, "jsonl_bytes": 1_100_000_000, "decode_s": 3.0,
               "ready_s": 7.5, "ready_peak_rss": 2 * 2**30, "place_ns": 140e3, "place_tasks": 200,
               "save_s": 10.0, "snapshot_bytes": 1_300_000_000, "save_peak_rss": 2 * 2**30,
               "load_s": 1.6, "load_peak_rss": 2**30}
    report = run_bench(BenchConfig(sizes=(), memory=False, extras=False))
    report.large[1_000_000] = figures
    met = {text: ok for text, _, ok in targets(report)}
    assert met == {"1,000,000 agents, fleet ready from JSON Lines ≤ 8 s": True,
                   "1,000,000 agents, the compiled reader ≥ 150 MB/s of JSON (ready, whole load)": False,
                   "1,000,000 agents, peak RSS of the fleet ready from JSON Lines ≤ 1.2 GiB": False,
                   "1,000,000 agents, native (b) placement ≤ 150 µs": True,
                   "1,000,000 agents, Fleet.load of its snapshot ≤ 1.5 s": False}
    assert "1,000,000 agents" in _large_lines(figures)[0]
    ready = _large_lines(figures)[1]
    assert "147 MB/s of JSON (target ≥ 150" in ready and "2.50× the floor: orjson decoding the lines alone, 3 s" in ready
    assert "CPU" not in ready and "simdjson" not in ready
    timed = _large_lines({**figures, "ready_cpu_s": 5.0, "decode_cpu_s": 2.0, "simdjson_s": 1.1,
                          "simdjson_cpu_s": 1.0})[1]
    assert "7.5 s (CPU 5 s)" in timed and "3 s (CPU 2 s)" in timed and "simdjson parsing them 1.1 s (CPU 1 s), 1,000 MB/s" in timed
    report.large = {2000: {**figures, "agents": 2000}}
    assert targets(report) == []


def test_the_ready_target_at_100000_agents_is_checked_when_that_size_is_measured_as_large():
    figures = {"agents": 100_000, "engine": "native", "write_s": 6.0, "jsonl_bytes": 111_000_000, "decode_s": 0.4,
               "decode_cpu_s": 0.38, "ready_s": 0.9, "ready_cpu_s": 0.6, "ready_peak_rss": 2**28, "place_ns": 40e3,
               "place_tasks": 200, "save_s": 1.0, "snapshot_bytes": 130_000_000, "save_peak_rss": 2**28,
               "load_s": 0.2, "load_peak_rss": 2**28}
    report = run_bench(BenchConfig(sizes=(), memory=False, extras=False))
    report.large[100_000] = figures
    rows = {text: (value, ok) for text, value, ok in targets(report)}
    assert rows == {"100,000 agents, fleet ready from JSON Lines ≤ 1 s":
                    ("0.9 s (CPU 0.6 s) (floor: orjson decoding the lines, 0.4 s (CPU 0.38 s))", True)}
    report.large[100_000] = {**figures, "ready_s": 1.2}
    assert [ok for _, _, ok in targets(report)] == [False]


@pytest.mark.slow
def test_bench_cli_measures_a_small_size_through_the_large_fleet_path(tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(main, ["bench", "--sizes", "2000", "--large-from", "2000", "--tasks", "10",
                                       "--no-extras", "--no-memory", "--shell-runs", "0", "-o", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "ready from JSON Lines" in result.stdout
    large = orjson.loads(out.read_bytes())["a3fast"]["large"]["2000"]
    assert large["agents"] == 2000 and "place_cli_s" not in large   # --shell-runs 0: no shells


def test_the_shell_targets_are_checked_from_200000_agents_against_orjson_dicts_of_the_same_run():
    shells = {"shell_runs": 3, "shell_dicts_s": 10.0, "place_cli_s": 4.0, "place_cli_peak_rss": 390_000_000,
              "serve_ready_s": 6.0, "serve_ready_peak_rss": 410_000_000}
    report = run_bench(BenchConfig(sizes=(), memory=False, extras=False))
    report.large[200_000] = {"agents": 200_000, **shells}
    met = {text: (measured, ok) for text, measured, ok in targets(report)}
    assert met == {
        "200,000 agents, a3fast place --fleet F ≤ 0.5× orjson turning the lines into dicts, in the same run": ("0.40×", True),
        "200,000 agents, a3fast place --fleet F: peak RSS ≤ 2,000 bytes per agent": ("1,950 B", True),
        "200,000 agents, a3fast serve --fleet F to /readyz ≤ 0.5× orjson turning the lines into dicts, in the same run": ("0.60×", False),
        "200,000 agents, a3fast serve --fleet F to /readyz: peak RSS ≤ 2,000 bytes per agent": ("2,050 B", False)}
    report.large = {2000: {"agents": 2000, **shells}}
    assert targets(report) == []
