"""`a3fast report` draws a progress bar on standard error when it is a terminal, and only then."""
from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow   # a demo and two reports in processes of their own: about 10 s


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    work = tmp_path_factory.mktemp("progress")
    path = work / "t1.jsonl"
    done = subprocess.run([sys.executable, "-m", "a3fast", "demo", "--agents", "50", "--tasks", "20", "-o", path],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return path


def test_rule_report_draws_a_progress_bar_on_a_terminal(trace):
    main, terminal = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "a3fast", "report", trace, "-o", trace.with_name("tty.html")],
                              stdout=subprocess.PIPE, stderr=terminal, timeout=120)
        os.close(terminal)
        terminal = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:       # the terminal's other end is closed: all of it was read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if terminal >= 0:
            os.close(terminal)
        os.close(main)
    assert done.returncode == 0
    assert b"reading t1.jsonl" in drawn and b"100%" in drawn


def test_without_a_terminal_report_writes_no_bar(trace):
    done = subprocess.run([sys.executable, "-m", "a3fast", "report", trace, "-o", trace.with_name("pipe.html")],
                          capture_output=True, timeout=120)
    assert done.returncode == 0 and done.stderr == b""
