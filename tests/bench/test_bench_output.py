"""What `a3fast bench` prints is read by people: every line within 100 columns, a row of its own
per target (measured, goal, met or missed in words), the other subjects in words rather than key
dumps, quick runs that do not judge targets set for other sizes, a failed subject told in its row,
and a run that fails part of the way printing what it measured."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from a3fast.bench import suite
from a3fast.bench.authority import bench_resolve
from a3fast.bench.cores import bench_place_many
from a3fast.bench.embedding import bench_embedding
from a3fast.bench.report import WIDTH, render, targets
from a3fast.bench.suite import EXTRA_BENCHES, BenchConfig, run_bench
from a3fast.cli import main

pytestmark = pytest.mark.slow   # a small run of the benchmark: several seconds

KEY_DUMP = re.compile(r"\b[a-z]+_[a-z_]+ [-\d.]")      # "target_s 3", "speedup_x 0.04"


@pytest.fixture(scope="module")
def report():
    config = BenchConfig(sizes=(1_000,), tasks=4, rounds=2, budget_s=0.05, min_tasks=2, updates=5, memory=False,
                         extras=False, quick=True)
    measured = run_bench(config)
    titles = {bench: title for title, bench in EXTRA_BENCHES}
    measured.extras = [(titles[bench], bench(quick=True)) for bench in (bench_resolve, bench_place_many,
                                                                          bench_embedding)]
    return measured


def test_rule_every_line_fits_100_columns(report):
    text = render(report)
    assert max(map(len, text.splitlines())) <= WIDTH == 100


def test_rule_each_target_has_a_row_with_measured_goal_and_met_or_missed(report):
    text = render(report).split("\ntargets")[1].split("\n\n")[0]
    verdicts = re.findall(r"measured (.+?); goal (.+?); (met|MISSED)\b", " ".join(text.split()))
    assert len(verdicts) == len(targets(report)) > 0
    assert [(m, ok) for _, m, ok in targets(report)] == [(m, v == "met") for m, _, v in verdicts]


def test_rule_other_subjects_are_told_in_words_not_key_dumps(report):
    elsewhere = render(report).split("elsewhere in a3fast")[1]
    assert not KEY_DUMP.search(elsewhere), KEY_DUMP.search(elsewhere)


def test_rule_a_quick_run_does_not_judge_a_target_set_for_another_size(report):
    figures = dict(report.extras)
    embedded = next(f for t, f in figures.items() if t.startswith("embedding"))
    cores = next(f for t, f in figures.items() if t.startswith("place_many"))
    assert embedded["met"] is None and cores["met"] is None
    elsewhere = " ".join(render(report).split("elsewhere in a3fast")[1].split())
    assert "met False" not in elsewhere and elsewhere.count("not judged at a quick run's sizes") >= 2
    # the measured sizes are told, never a size the run did not measure
    assert f"{embedded['agents']:,} agents" in elsewhere and "10,000 agents," not in elsewhere
    # a speedup below 1 comes with why
    assert "shorter than what a second thread costs" in elsewhere


def test_a_subject_that_fails_is_told_in_its_row_and_the_others_are_measured(monkeypatch):
    def broken(quick=False):
        raise RuntimeError("the subject broke")

    monkeypatch.setattr(suite, "EXTRA_BENCHES", (("broken subject", broken), EXTRA_BENCHES[1]))
    rows = suite._extras(True, lambda _: None, [])
    assert rows[0] == ("broken subject", "not measured: RuntimeError: the subject broke")
    assert isinstance(rows[1][1], dict)


def test_rule_a_run_that_fails_later_prints_what_it_measured(monkeypatch):
    from a3fast.bench import memory

    def fails(n_agents, engine):
        raise RuntimeError("the memory process failed")

    monkeypatch.setattr(memory, "measure", fails)
    result = CliRunner().invoke(main, ["bench", "--quick", "--no-extras", "--sizes", "200", "--tasks", "3"])
    assert result.exit_code == 3
    assert "what it measured until then" in result.output and "median time per task" in result.output
    assert "(b) placement, record compact" in result.output


def test_a_run_stopped_before_any_fleet_is_built_keeps_its_own_error_and_writes_no_results(monkeypatch, tmp_path):
    """The partial report renders what was not reached as not measured: the error that stopped the
    run is the one told (not one of the report's own), and an earlier results file is left alone."""
    from a3fast import workload

    def stopped(*args, **kwargs):
        raise RuntimeError("stopped while generating")

    monkeypatch.setattr(workload, "generate_fleet", stopped)
    out = tmp_path / "results.json"
    out.write_text("earlier results")
    result = CliRunner().invoke(main, ["bench", "--quick", "--no-extras", "--no-memory", "--sizes", "200",
                                       "-o", str(out)])
    assert result.exit_code == 3
    assert "internal error: RuntimeError: stopped while generating" in result.output
    assert "TypeError" not in result.output
    assert "200 agents: not measured" in result.output
    assert "nothing was measured, so no results were written" in result.output
    assert out.read_text() == "earlier results"


def test_a_partial_report_renders_missing_figures_as_not_measured():
    report = suite.new_report(BenchConfig.quick_run((1000,)))
    assert "1,000 agents: not measured" in render(report)
    engine = report.config.engines[0]
    report.parse_us[1000] = 3.0
    report.builds[(1000, engine, "dicts")] = 0.01
    text = " ".join(render(report).split())
    assert f"{engine} 0.01 / — s, — B/agent" in text and "baselines built in —" in text


def test_the_commit_of_a_checkout_whose_branch_is_not_utf8_is_shown_not_a_lost_run(tmp_path, monkeypatch):
    # `a3fast bench -o FILE` measured everything, then failed on the branch's name and wrote nothing
    import subprocess

    from a3fast.bench.report import _commit_info

    git = ["git", "-c", "user.email=a@b", "-c", "user.name=n"]
    subprocess.run(git + ["init", "-q", str(tmp_path)], check=True)
    subprocess.run(git + ["-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run(git + ["-C", str(tmp_path), "checkout", "-q", "-b", b"br\xff".decode("utf-8", "surrogateescape")],
                   check=True)
    monkeypatch.chdir(tmp_path)
    info = _commit_info()
    assert info["branch"] == "br\\xff" and len(info["id"]) == 40


def test_a_terminated_run_ends_as_an_interrupted_one(tmp_path):
    # SIGTERM (timeout, a CI's cancel) ended the process where it stood: nothing written, a
    # server of a row left running and its temporary files left behind
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "partial.json"
    bench = subprocess.Popen([sys.executable, "-m", "a3fast", "bench", "--quick", "--no-memory", "--no-extras",
                              "--sizes", "300", "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "TMPDIR": str(tmp_path)}, text=True)
    seen = ""
    deadline = time.monotonic() + 120
    while seen.count("300 agents: ") < 3 and time.monotonic() < deadline:    # a fleet built, a scenario timed
        line = bench.stderr.readline()
        if not line:
            break
        seen += line
    bench.send_signal(signal.SIGTERM)
    stdout, stderr = bench.communicate(timeout=120)
    assert bench.returncode != 0 and bench.returncode != -signal.SIGTERM, (bench.returncode, stderr[-500:])
    assert "the run stopped part of the way" in stderr
    assert json.loads(out.read_text())["benchmarks"], "what was measured is written"
    assert [p.name for p in tmp_path.iterdir()] == ["partial.json"]


def test_bench_options_that_cannot_go_together_or_would_replace_an_input_are_refused(tmp_path):
    from a3fast.cli.bench_cmd import _sizes

    assert _sizes("200,200,1000,200") == (200, 1000)        # a size given twice is measured once
    result = CliRunner().invoke(main, ["bench", "--distributed", "1000", "--matcher", "cat"])
    assert result.exit_code == 2 and "--distributed measures the sharded fleet alone" in result.output
    program = tmp_path / "matcher.py"
    program.write_text("print('a matcher')\n")
    result = CliRunner().invoke(main, ["bench", "--matcher", f"python {program}", "--tasks", "1", "-o", str(program)])
    assert result.exit_code == 2 and "an output must not replace" in result.output
    assert program.read_text() == "print('a matcher')\n"


def test_the_sharded_figures_are_written_as_a_pytest_benchmark_document():
    from a3fast.bench.machine import machine_info
    from a3fast.bench.report import pytest_benchmark_document, to_pytest_benchmark

    document = pytest_benchmark_document(machine_info(), [], {"distributed": {"agents": 1000}})
    whole = to_pytest_benchmark(suite.new_report(BenchConfig.quick_run((1000,))))
    assert set(document) == set(whole) and document["benchmarks"] == []
    assert document["a3fast"] == {"distributed": {"agents": 1000}}


def test_a_second_sigterm_does_not_cut_the_first_ones_cleanup_short():
    # the first SIGTERM's cleanup waits for each matcher to end; a second one raised there left the
    # matcher running, in a session of its own
    import signal
    import subprocess
    import sys
    import time

    marker = "4243.25"          # a sleep no other process runs
    bench = subprocess.Popen([sys.executable, "-m", "a3fast", "bench", "--matcher", f"sleep {marker}", "--sizes", "200",
                              "--tasks", "5", "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    seen = ""
    deadline = time.monotonic() + 120
    while f"into sleep {marker}" not in seen and time.monotonic() < deadline:
        line = bench.stderr.readline()
        if not line:
            break
        seen += line
    time.sleep(0.5)
    bench.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    if bench.poll() is None:
        bench.send_signal(signal.SIGTERM)
    bench.communicate(timeout=60)
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split()
    for pid in left:            # never left behind by the test itself
        subprocess.run(["kill", "-9", pid])
    assert left == [], "the matcher was left running"
