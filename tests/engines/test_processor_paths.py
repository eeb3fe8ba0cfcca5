"""The native engine chooses at run time between loops that use the processor's popcnt and SSSE3
(base64 twelve bytes a step) and the portable loops a processor without them runs; A3FAST_CPU=portable
asks for the portable ones. Both are held to the pure engine's results: the parity suites run here
again, in a process on the portable loops (docs/performance.md, "Compact lines with the
processor's instructions")."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from a3fast.engines import NATIVE_AVAILABLE

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE and os.environ.get("A3FAST_REQUIRE_NATIVE") != "1",
                                reason="the a3fast._core extension is not built")


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":")[1].split()}


def test_the_processors_instructions_are_used_where_it_has_them_unless_told_not_to():
    from a3fast import _core

    if os.environ.get("A3FAST_CPU") == "portable":
        assert _core.uses_processor_extensions() is False
    elif platform.machine() in ("x86_64", "AMD64") and {"ssse3", "popcnt"} <= _cpu_flags():
        assert _core.uses_processor_extensions() is True


def test_the_portable_loops_give_the_pure_engines_results(tmp_path):
    if os.environ.get("A3FAST_CPU") == "portable":
        pytest.skip("this process already runs the portable loops")
    report = tmp_path / "portable.xml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junit-xml={report}",
         "tests/engines/test_engine_parity.py", "tests/engines/test_placement_lines_parity.py",
         "tests/engines/test_roaring_containers.py", "tests/engines/test_processor_paths.py"],
        cwd=ROOT, env=dict(os.environ, A3FAST_CPU="portable"), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    suite = ElementTree.parse(report).getroot().find("testsuite")
    assert int(suite.get("tests")) - int(suite.get("skipped")) >= 20, "the portable run ran too few tests"
    assert suite.get("failures") == suite.get("errors") == "0"
