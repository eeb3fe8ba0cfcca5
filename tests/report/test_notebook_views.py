"""Notebook views of the core types come from the report package, registered with a3fast.notebook:
a notebook that imported only `a3fast` still gets them, and without a registered view the core
types answer None (a notebook then shows their repr) instead of importing the pictures."""
from __future__ import annotations

import subprocess
import sys

from a3fast import notebook


def test_a_notebook_gets_the_views_without_importing_the_report_package():
    code = ("import sys, a3fast\n"
            "f = a3fast.Fleet()\n"
            "f.add({'v': '1.0', 'agent': {'name': 'a', 'namespace': 'n'}, 'capabilities': [], 'clearances': []})\n"
            "assert 'a3fast.report' not in sys.modules\n"
            "p = f.place({})\n"
            "print(p._repr_html_() is not None and '<' in p._repr_html_(), '<' in f._repr_html_(),"
            " 'a3fast.report' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True", "True"]


def test_a_kind_with_no_registered_view_has_no_html():
    assert notebook.view_html("no-such-kind", object()) is None


def test_a_registered_view_draws_its_kind():
    notebook.register_view("test-kind", lambda obj: f"<b>{obj}</b>")
    assert notebook.view_html("test-kind", 7) == "<b>7</b>"


_NON_XML_NAMES = r"""
import a3fast
from a3fast.report.render import render
fleet = a3fast.Fleet()
for name, tool in (("a\uffff", "t\ufffe"), ("b\ufffe", "t")):
    fleet.add({"v": "1.0", "agent": {"name": name, "namespace": "n"}, "capabilities": [], "clearances": [], "tools": [tool]})
placement = fleet.place({"v": "1.0", "tools": ["t\ufffe"]})
rejected = fleet.place({"v": "1.0", "tools": ["t\uffff"]})
pages = [fleet._repr_html_(), placement._repr_html_(), rejected._repr_html_(), render(TRACE, name="t")]
assert all("<svg" in page for page in pages), "a chart is missing"
print("\\uFFFF" in pages[1], "\\uFFFE" in pages[0], "\\u0000" in pages[3])
"""


def test_names_that_xml_cannot_hold_are_charted_escaped_not_fatal(tmp_path):
    # U+FFFE, U+FFFF and C0 controls are text a name, tool or predicate may hold (a hand-written
    # trace, any of them), but no SVG text can: the chart drawer aborted the whole process (a
    # notebook's kernel, `a3fast report`, the service behind /ui), so this runs in a child
    import subprocess
    import sys

    import a3fast

    trace = tmp_path / "t.jsonl"
    fleet = a3fast.Fleet()
    fleet.add({"v": "1.0", "agent": {"name": "c", "namespace": "n"}, "capabilities": [], "clearances": [], "tools": ["t"]})
    with a3fast.TraceWriter(trace) as writer:
        for tool in ("t", "u\ufffe"):
            writer.write(fleet.place({"v": "1.0", "tools": [tool]}))
    # a predicate with a NUL, which only a hand-written trace holds
    trace.write_text(trace.read_text().replace("tool:u\ufffe", "tool:\\u0000<b>"))
    assert a3fast.verify(trace.read_bytes()) == []
    child = subprocess.run([sys.executable, "-c", f"TRACE = {str(trace)!r}\n" + _NON_XML_NAMES],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split() == ["True", "True", "True"]
