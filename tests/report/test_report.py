"""The HTML report and notebook views: what they show equals what the library says (funnels,
findings, scores), names from a trace are text, large traces are capped and say so, and bad input
is refused without a half-written page."""
from __future__ import annotations

import json
import os
import re
import threading

import pytest
from click.testing import CliRunner

import a3fast
from a3fast.cli import main
from a3fast.record.compact import encode_trace
from a3fast.report import Limits, ReportInputError, render, summarise_trace, write_report
from a3fast.report.render import json_for_script, page_data
from a3fast.trace import read_trace
from a3fast.verify import verify

from report_traces import HOSTILE, findings_trace, hostile_placements, placed_trace, placements_trace


def page_json(html: str) -> dict:
    body = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1)
    return json.loads(body)


def compact_copy(src, dst):
    records = [item.to_dict() for item in read_trace(str(src))]
    dst.write_text("".join(json.dumps(r) + "\n" for r in encode_trace(records)))


def test_funnel_of_every_placement_equals_failed_counts(tmp_path, engine):
    placed = placed_trace(tmp_path / "t.jsonl", agents=200, tasks=25, engine=engine)
    summary = summarise_trace(str(tmp_path / "t.jsonl"))
    assert summary.placements == len(placed)
    assert summary.bound == sum(p.bound for _, p in placed)
    assert summary.unschedulable == sum(not p.bound for _, p in placed)
    for seq, p in placed:
        view = summary.placement(seq)
        assert view.failed_counts() == p.failed_counts()
        assert view.eligible == len(p.eligible)
        assert view.chosen == p.agent


def test_funnel_reached_is_candidates_less_those_removed_before(tmp_path):
    placed = placed_trace(tmp_path / "t.jsonl", agents=120, tasks=5)
    view = summarise_trace(str(tmp_path / "t.jsonl")).placement(placed[0][0])
    reached = view.candidates
    for predicate, at, removed in view.funnel:
        assert at == reached
        reached -= removed
    assert reached == view.eligible


def test_candidate_rows_name_each_candidates_first_failed_predicate(tmp_path):
    placed = placed_trace(tmp_path / "t.jsonl", agents=150, tasks=6)
    summary = summarise_trace(str(tmp_path / "t.jsonl"))
    for seq, p in placed:
        first = p.first_failed()
        assert dict(summary.placement(seq).rows) == {c: first.get(c) for c in p.candidates}


def test_compact_trace_reports_the_same_as_its_spec_form(tmp_path):
    placed_trace(tmp_path / "t.jsonl", agents=150, tasks=12)
    compact_copy(tmp_path / "t.jsonl", tmp_path / "c.jsonl")
    spec, compact = summarise_trace(str(tmp_path / "t.jsonl")), summarise_trace(str(tmp_path / "c.jsonl"))
    assert [(v.seq, v.funnel, v.rows, v.score_rows) for v in spec.listed] == \
        [(v.seq, v.funnel, v.rows, v.score_rows) for v in compact.listed]
    assert page_data(spec) == page_data(compact)


def test_trace_wide_tallies_add_up_over_placements(tmp_path):
    placed = placed_trace(tmp_path / "t.jsonl", agents=150, tasks=30)
    summary = summarise_trace(str(tmp_path / "t.jsonl"))
    removed = {}
    for _, p in placed:
        for predicate, n in p.failed_counts().items():
            if n:
                removed[predicate] = removed.get(predicate, 0) + n
    assert dict(summary.removed_by_predicate) == removed
    assert sum(summary.unschedulable_by_predicate.values()) == sum(not p.bound for _, p in placed)
    assert len(summary.decided) == len(placed)


def test_findings_are_the_verifiers_and_link_to_their_record(tmp_path):
    expected = findings_trace(tmp_path / "f.jsonl")
    summary = summarise_trace(str(tmp_path / "f.jsonl"))
    records = [item.to_dict() for item in read_trace(str(tmp_path / "f.jsonl"))]
    assert [(f.code, f.seq) for f in summary.findings] == [(f.code, f.seq) for f in verify(records)]
    assert {(e["code"], e["seq"]) for e in expected["errors"]} <= {(f.code, f.seq) for f in summary.findings}
    html = render(records)
    seq = expected["errors"][0]["seq"]
    assert f'href="#seq-{seq}"' in html
    assert next(p for p in page_json(html)["placements"] if p["seq"] == seq)["f"] is True


def test_agent_named_as_markup_renders_as_text(tmp_path):
    fleet, placements = hostile_placements()
    placements_trace(tmp_path / "h.jsonl", placements)
    html = render(str(tmp_path / "h.jsonl"))
    assert HOSTILE not in html
    assert HOSTILE in page_json(html)["names"]
    for view in (placements[0]._repr_html_(), placements[1]._repr_html_()):
        assert "<script" not in view
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in view
    assert "<script" not in fleet._repr_html_()


def test_page_data_cannot_close_its_script_element():
    text = json_for_script({"name": "</script><!-- & \u2028"})
    assert "</" not in text and "<!--" not in text and "&" not in text
    assert json.loads(str(text)) == {"name": "</script><!-- & \u2028"}


def test_page_loads_nothing(tmp_path):
    placed_trace(tmp_path / "t.jsonl", agents=60, tasks=4)
    html = render(str(tmp_path / "t.jsonl"))
    markup = re.sub(r"(<script[^>]*>).*?</script>", r"\1", html, flags=re.S)  # the libraries' code aside
    tags = re.findall(r"<(?:script|link|img|iframe|object|embed)\b[^>]*>", markup)
    assert len(re.findall(r"<script", markup)) == 3
    assert not [t for t in tags if re.search(r"\b(src|href)=", t)]
    assert "default-src 'none'" in html


def test_candidates_past_the_cap_are_counted_and_the_eligible_kept(tmp_path):
    placed = placed_trace(tmp_path / "t.jsonl", agents=300, tasks=20)
    seq, p = next((s, p) for s, p in placed if p.bound and p.candidates.index(p.agent) >= 10)
    summary = summarise_trace(str(tmp_path / "t.jsonl"), limits=Limits(candidates_per_placement=10))
    view = summary.placement(seq)
    assert view.rows_capped and view.candidates == len(p.candidates)
    assert [c for c, _ in view.rows[:10]] == p.candidates[:10]
    assert {c for c, f in view.rows if f is None} == set(p.eligible)
    html = render(str(tmp_path / "t.jsonl"), limits=Limits(candidates_per_placement=10))
    assert "at most\n    10 candidates each" in html or "at most 10 candidates each" in " ".join(html.split())


def test_placements_past_the_detail_cap_keep_their_funnel_only(tmp_path):
    placed = placed_trace(tmp_path / "t.jsonl", agents=80, tasks=10)
    summary = summarise_trace(str(tmp_path / "t.jsonl"), limits=Limits(detailed_placements=3))
    assert len(summary.detailed) == 3 and len(summary.listed) == len(placed)
    assert all(v.rows is None for v in summary.listed[3:])
    assert summary.listed[5].failed_counts() == placed[5][1].failed_counts()


def test_render_takes_live_records(tmp_path):
    placed_trace(tmp_path / "t.jsonl", agents=60, tasks=6)
    records = (item.to_dict() for item in read_trace(str(tmp_path / "t.jsonl")))
    html = render(records, name="live")
    assert html.startswith("<!doctype html>") and "live" in html


def test_placement_repr_html_shows_its_funnel(engine):
    from a3fast.workload import generate_fleet, generate_tasks

    decls = generate_fleet(120, 1)
    fleet = a3fast.Fleet(engine=engine)
    fleet.extend(decls)
    p = next(p for p in map(fleet.place, generate_tasks(decls, 20, 1)) if sum(p.failed_counts().values()))
    html = p._repr_html_()
    rows = re.findall(r'<td class="pred">([^<]*)</td><td class="n">(\d+)</td><td class="n removed">(\d+)</td>', html)
    assert {pred: int(removed) for pred, _, removed in rows} == p.failed_counts()
    assert p.summary() in html


def test_fleet_and_summary_repr_html(tmp_path):
    fleet, placements = hostile_placements()
    html = fleet._repr_html_()
    assert "4 agents" in html and "capability:order.review/1" in html
    placed = placed_trace(tmp_path / "t.jsonl", agents=80, tasks=6)
    summary_html = summarise_trace(str(tmp_path / "t.jsonl"))._repr_html_()
    seq, p = placed[0]
    for predicate, n in p.failed_counts().items():
        assert f"{predicate} −{n}" in summary_html


def test_cli_report_writes_beside_the_trace(tmp_path):
    placed_trace(tmp_path / "t.jsonl", agents=60, tasks=4)
    result = CliRunner().invoke(main, ["report", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "t.html").read_text().startswith("<!doctype html>")


def test_cli_report_names_a_hostile_trace_name_on_one_line(tmp_path):
    name = "x\x1b[31mRED\nFAKE\u2028.jsonl"
    placed_trace(tmp_path / name, agents=20, tasks=2)
    result = CliRunner().invoke(main, ["report", str(tmp_path / name), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1 and "\x1b" not in result.output and "\u2028" not in result.output
    assert "report of x\\x1b[31mRED\\nFAKE\\u2028.jsonl" in result.output


def test_cli_report_bad_input_exits_2_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"seq": 1, "kind": "task.submitted", "content": {}}\nnot json\n')
    result = CliRunner().invoke(main, ["report", str(bad), "-o", str(tmp_path / "out.html")])
    assert result.exit_code == 2
    assert "bad.jsonl: line 2" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]
    missing = CliRunner().invoke(main, ["report", str(tmp_path / "missing.jsonl")])
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_cli_report_refuses_to_replace_its_trace(tmp_path):
    placed_trace(tmp_path / "t.html", agents=40, tasks=2)
    result = CliRunner().invoke(main, ["report", str(tmp_path / "t.html")])
    assert result.exit_code == 2 and "other than the trace" in result.output


@pytest.mark.parametrize("out", [None, "same", "hard link"])
def test_write_report_never_replaces_its_trace(tmp_path, out):
    trace = tmp_path / "t.html"
    placed_trace(trace, agents=40, tasks=2)
    before = trace.read_bytes()
    target = None
    if out == "same":
        target = tmp_path / "." / "t.html"
    elif out == "hard link":
        target = tmp_path / "link.html"
        os.link(trace, target)
    with pytest.raises(ValueError, match="the report must go to a file other than the trace it reads"):
        write_report(trace, target)
    assert trace.read_bytes() == before


def test_write_report_is_atomic(tmp_path):
    target = tmp_path / "r.html"
    target.write_text("before")
    (tmp_path / "bad.jsonl").write_text("not json\n")
    with pytest.raises(ReportInputError):
        write_report(tmp_path / "bad.jsonl", target)
    assert target.read_text() == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "r.html"]


def test_demo_writes_its_report_beside_the_trace(tmp_path):
    trace = tmp_path / "a3fast-demo.jsonl"
    result = CliRunner().invoke(main, ["demo", "--agents", "80", "--tasks", "10", "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    page = tmp_path / "a3fast-demo.html"
    assert f"report: {page}" in result.output
    assert page_json(page.read_text())["placements"][0]["n"] == 80


def test_vega_bundle_is_cached_per_vl_convert_release(tmp_path, monkeypatch):
    import vl_convert

    from a3fast.report import charts

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    charts.javascript_bundle.cache_clear()
    try:
        bundle = charts.javascript_bundle()
        cached = tmp_path / "a3fast" / f"vega-bundle-{vl_convert.__version__}.js"
        assert cached.read_text() == bundle and "window.vegaEmbed" in bundle
        cached.write_text("window.vegaEmbed = 'from the cache';")
        charts.javascript_bundle.cache_clear()
        assert charts.javascript_bundle() == "window.vegaEmbed = 'from the cache';"
    finally:
        charts.javascript_bundle.cache_clear()


def _all_eligible_placement(tmp_path, agents: int, winner: str):
    """A trace of one placement where every agent is eligible and `winner`, late in candidate
    order, wins on its success rate."""
    fleet = a3fast.Fleet()
    fleet.extend({"v": "1.0", "agent": {"name": f"a{i:02d}", "namespace": "ns"},
                  "capabilities": [{"name": "x.y", "version": 1}], "clearances": []} for i in range(agents))
    req = {"v": "1.0", "capabilities": [{"name": "x.y", "version": 1}]}
    for _ in range(20):
        fleet.record_outcome(winner, req, True)
    placement = fleet.place(req)
    assert placement.agent == winner
    return placements_trace(tmp_path / "t.jsonl", [placement])


def test_chosen_agent_is_kept_among_the_candidates_past_the_cap(tmp_path):
    _all_eligible_placement(tmp_path, 10, "a08")
    view = summarise_trace(str(tmp_path / "t.jsonl"), limits=Limits(candidates_per_placement=2)).listed[0]
    names = [c for c, _ in view.rows]
    assert names[:4] == ["a00", "a01", "a02", "a03"] and "a08" in names and len(names) == 5
    assert dict(view.rows)["a08"] is None
    result = CliRunner().invoke(main, ["report", str(tmp_path / "t.jsonl"), "--candidates", "2"])
    assert result.exit_code == 0, result.output
    html = (tmp_path / "t.html").read_text()
    assert "at most ${fmt(D.limits.candidates)} of the eligible past them" in html and "and the chosen agent" in html


def test_a_winning_total_of_zero_is_charted_above_negative_totals(tmp_path):
    fleet = a3fast.Fleet(weights=(0.0, 0.0, -1.0, 0.0))   # a declared cost ceiling only lowers the total
    for i in range(6):
        declaration = {"v": "1.0", "agent": {"name": f"a{i}", "namespace": "ns"},
                       "capabilities": [{"name": "x.y", "version": 1}], "clearances": []}
        if i != 4:
            declaration["model"] = {"cost_ceiling_usd": str(i + 1)}
        fleet.add(declaration)
    placement = fleet.place({"v": "1.0", "capabilities": [{"name": "x.y", "version": 1}]})
    assert placement.agent == "a4" and placement.scheduling["scores"]["a4"]["total"] == 0
    placements_trace(tmp_path / "t.jsonl", [placement])
    view = summarise_trace(str(tmp_path / "t.jsonl"), limits=Limits(scores_per_placement=3)).listed[0]
    totals = [row[1] for row in view.score_rows]
    assert view.score_rows[0][0] == "a4" and totals == sorted(totals, reverse=True) and len(totals) == 3


def test_a_placement_with_a_finding_past_the_listed_limit_is_listed(tmp_path):
    placed = placed_trace(tmp_path / "t.jsonl", agents=40, tasks=6)
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    seq, placement = next((s, p) for s, p in reversed(placed) if p.bound)
    at = next(i for i, line in enumerate(lines) if json.loads(line)["seq"] == seq)
    record = json.loads(lines[at])
    scheduling = record["content"]["scheduling"]
    # the chosen agent said to fail a predicate it passed: a §7 finding on this record
    scheduling["filters_failed"].append({"candidate": placement.agent, "predicate": scheduling["filters_passed"][0]})
    lines[at] = json.dumps(record)
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    limits = Limits(listed_placements=2)
    summary = summarise_trace(str(tmp_path / "t.jsonl"), limits=limits)
    assert seq in {f.seq for f in summary.findings}
    assert len(summary.listed) == 3 and summary.placement(seq) is not None
    html = render(str(tmp_path / "t.jsonl"), limits=limits)
    assert f'href="#seq-{seq}"' in html and seq in [p["seq"] for p in page_json(html)["placements"]]


def test_seqs_past_two_to_the_53_are_embedded_exactly(tmp_path):
    from report_traces import renumbered

    placed_trace(tmp_path / "t.jsonl", agents=30, tasks=3)
    seqs = renumbered(tmp_path / "t.jsonl", 2 ** 60 + 1)
    embedded = [p["seq"] for p in page_json(render(str(tmp_path / "t.jsonl")))["placements"]]
    assert embedded == [str(s) for s in seqs]


def test_a_decided_at_outside_the_utc_years_is_left_out_of_the_time_chart(tmp_path):
    def bound(seq, decided_at):
        return {"seq": seq, "kind": "task.bound", "content": {"scheduling": {
            "candidates": ["a"], "filters_passed": [], "filters_failed": [], "declaration": {"agent": {"name": "a"}},
            "scores": {}, "timings": {"decided_at": decided_at}}}}

    # the first and the last are valid RFC 3339 instants before year 1 and after 9999 in UTC
    records = [bound(1, "0001-01-01T00:30:00+01:00"), bound(2, "2024-01-01T00:00:00Z"),
               bound(3, "2024-01-01T00:01:00Z"), bound(4, "9999-12-31T23:30:00-01:00")]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = summarise_trace(str(tmp_path / "t.jsonl"))
    assert [t.year for t, _ in summary.decided] == [2024, 2024]
    assert "Placements over time" in summary._repr_html_()
    result = CliRunner().invoke(main, ["report", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 0, result.output
    assert "seconds after 2024-01-01T00:00:00" in (tmp_path / "t.html").read_text()


@pytest.mark.parametrize("text", ["", "\n\n", "[]"])
def test_cli_report_refuses_a_trace_of_no_records_as_verify_does(tmp_path, text):
    (tmp_path / "t.jsonl").write_text(text)
    result = CliRunner().invoke(main, ["report", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 2
    assert "t.jsonl: unreadable: no records" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
    with pytest.raises(ReportInputError, match="no records"):
        write_report(tmp_path / "t.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
    assert "Placements" in render([])    # a live trace may have no record yet


def test_cli_report_reads_standard_input_when_the_page_has_a_file(tmp_path):
    placed_trace(tmp_path / "t.jsonl", agents=40, tasks=3)
    trace = (tmp_path / "t.jsonl").read_bytes()
    out = tmp_path / "out.html"
    result = CliRunner().invoke(main, ["report", "-", "-o", str(out)], input=trace)
    assert result.exit_code == 0, result.output
    assert "report of standard input" in result.output
    assert page_json(out.read_text())["placements"] == page_json(render(str(tmp_path / "t.jsonl")))["placements"]
    without = CliRunner().invoke(main, ["report", "-"], input=trace)
    assert without.exit_code == 2 and "not standard input" in without.output and "-o" in without.output
    empty = CliRunner().invoke(main, ["report", "-", "-o", str(tmp_path / "empty.html")], input=b"")
    assert empty.exit_code == 2 and "standard input: unreadable: no records" in empty.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.html", "t.jsonl"]


def test_cli_report_reads_a_pipe_given_by_name_and_writes_only_to_a_file(tmp_path):
    # `a3fast report <(zcat t.jsonl.gz) -o page.html`: a named pipe is read as standard input is
    placed_trace(tmp_path / "t.jsonl", agents=40, tasks=3)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes((tmp_path / "t.jsonl").read_bytes()), daemon=True)
    writer.start()
    out = tmp_path / "out.html"
    result = CliRunner().invoke(main, ["report", str(fifo), "-o", str(out)])
    if writer.is_alive():    # the pipe was not read: let the writer finish
        fifo.read_bytes()
    writer.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert page_json(out.read_text())["placements"] == page_json(render(str(tmp_path / "t.jsonl")))["placements"]
    unnamed = CliRunner().invoke(main, ["report", str(fifo)])
    assert unnamed.exit_code == 2 and "not a pipe" in unnamed.output and "-o" in unnamed.output
    to_stdout = CliRunner().invoke(main, ["report", str(tmp_path / "t.jsonl"), "-o", "-"])
    assert to_stdout.exit_code == 2 and "-o -: the page is written to a file, not standard output" in to_stdout.output
