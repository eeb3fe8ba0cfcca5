"""The harness pipelines place requests: a window of requests is written before their answers are
read, and the answers are those of the same requests sent one at a time."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import orjson
from click.testing import CliRunner

from a3fast.bench.matchers import run_matcher_bench
from a3fast.cli import main
from a3fast.harness.client import MatcherProcess
from a3fast.workload import generate_fleet, generate_tasks

ROOT = Path(__file__).resolve().parents[2]
LITERAL = f"{sys.executable} {ROOT / 'examples' / 'matchers' / 'literal.py'}"
A3FAST = f"{sys.executable} -m a3fast serve --stdio"
_TIMINGS = re.compile(rb',?"timings":\{[^{}]*\}')


def _answers(command: str, window: int | None) -> list[bytes]:
    fleet = generate_fleet(30, seed=5)
    tasks = [{"requirements": t, "record": "compact"} for t in generate_tasks(fleet, 40, seed=5)]
    with MatcherProcess(command, timeout=30) as m:
        m.request("put_agents", declarations=fleet)
        if window is None:
            lines = [m.request_line("place", **fields) for fields in tasks]
        else:
            lines = m.request_lines_pipelined("place", tasks, window=window)
    assert [rid for rid, _ in lines] == list(range(2, 42))
    return [_TIMINGS.sub(b"", line) for _, line in lines]


def test_pipelined_requests_are_answered_as_one_at_a_time_by_a3fast():
    alone = _answers(A3FAST, None)
    assert all(orjson.loads(line)["ok"] for line in alone)
    assert _answers(A3FAST, 7) == alone
    assert _answers(A3FAST, 32) == alone


def test_pipelined_requests_are_answered_as_one_at_a_time_by_the_literal_matcher():
    assert _answers(LITERAL, 16) == _answers(LITERAL, None)


def test_bench_matcher_window_counts_every_placement_and_says_how_it_sent_them():
    for window in (1, 8):
        bench = run_matcher_bench([], agents=100, tasks=24, budget_s=5, window=window)
        assert bench.window == window
        for run in bench.runs:
            assert run.failure is None and len(run.latencies_s) == 24, run.subject
    result = CliRunner().invoke(main, ["bench", "--matcher", LITERAL, "--sizes", "100", "--tasks", "10",
                                       "--seconds", "3", "--window", "5"])
    assert result.exit_code == 0, result.output
    assert "5 requests pipelined at a time" in result.output


def test_bench_matcher_window_out_of_range_is_bad_input():
    result = CliRunner().invoke(main, ["bench", "--matcher", LITERAL, "--window", "0"])
    assert result.exit_code == 2 and "--window" in result.output
