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
