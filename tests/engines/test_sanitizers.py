"""The compiled engine and readers (JSON Lines, requirements) under ASan and UBSan (docs/testing.md).

The extensions are built with `-fsanitize=address,undefined -fno-sanitize-recover=undefined` into a
temporary copy of the checkout (tests/sanitized_build.py), then the engine and reader tests run on
that build in a subprocess: an out-of-bounds access, a use after free or any undefined behaviour
(a signed overflow such as the int64 outcome count that once overflowed at 2^63 - 1) ends the
run with the sanitizer's report. Without gcc's sanitizer runtimes the test is skipped, unless CI
is set: there a missing runtime fails it.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sanitized_build

ROOT = Path(__file__).resolve().parents[2]
#: the engine and reader tests, and the snapshot and outcome tests that drive the engines' load
#: paths; their slow members are left out to keep the run to a few minutes on two cores
SUITES = ["tests/engines/test_native.py", "tests/engines/test_engine_parity.py", "tests/engines/test_engines.py",
          "tests/fleet/test_ingest.py", "tests/fleet/test_jsonl_ingest.py", "tests/fleet/test_snapshot.py",
          "tests/fleet/test_snapshot_checks.py", "tests/fleet/test_outcome_bound.py",
          "tests/schema/test_requirements_reader.py", "tests/engines/test_resolve_predicates.py",
          "tests/record/test_placement_lines_of.py", "tests/fleet/test_stage_steps.py",
          "tests/service/test_service_edge_bytes.py", "tests/engines/test_seen_rule.py",
          "tests/record/test_spec_lines.py", "tests/record/test_trace_write_many.py"]
#: the flipped-byte sweeps load one damaged file per byte, nearly all refused by the checksum in
#: Python before an engine is reached: 165 of the 266 s the suites took under the sanitizers
DESELECTED = "not flipped_byte"
#: the outcome counts that overflowed int64 in the native engine before they were bounded: UBSan
#: stopped this with "signed integer overflow: 9223372036854775807 + 2 cannot be represented"
OVERFLOW = """
import os
from a3fast import FleetError, _core
from a3fast.fleet import Fleet
assert _core.__file__.startswith(os.environ["PYTHONPATH"]), _core.__file__
fleet = Fleet("native")
fleet.add({"v": "1.0", "agent": {"name": "a", "namespace": "n"},
           "capabilities": [{"name": "x.y", "version": 1}], "clearances": []})
task = {"v": "1.0", "capabilities": [{"name": "x.y", "version": 1}]}
for attempts in (2**63 - 1, 10**15):
    try:
        fleet.record_outcomes("a", "x.y/1", 0, attempts)
    except FleetError:
        pass
rate = fleet.place(task).scheduling["scores"]["a"]["success_rate"]
assert 0.0 <= rate <= 1.0, rate
try:
    fleet.record_outcome("a", "x.y/1", True)
except FleetError:
    print("refused past the ceiling")
"""


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory) -> dict[str, str]:
    missing = [name for name in ("libasan.so", "libubsan.so") if sanitized_build.runtime(name) is None]
    if missing:
        reason = f"gcc's sanitizer runtimes are not installed ({', '.join(missing)})"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the sanitizer build: {reason}")
        pytest.skip(reason)
    src = sanitized_build.build(tmp_path_factory.mktemp("sanitized"))
    return sanitized_build.sanitized_env(src)


@pytest.mark.slow
def test_the_outcome_counts_that_once_overflowed_run_clean_under_ubsan(sanitized):
    done = subprocess.run([sys.executable, "-c", OVERFLOW], env=sanitized, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-6000:]
    assert "refused past the ceiling" in done.stdout
    assert "runtime error" not in done.stderr and "AddressSanitizer" not in done.stderr


@pytest.mark.slow
def test_the_engine_and_reader_tests_pass_under_asan_and_ubsan(sanitized):
    # -s: a sanitizer ends the process at once, and output pytest had captured would be lost with it
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-m", "not slow",
                           "-k", DESELECTED, "-x", *SUITES], env={**sanitized, "A3FAST_HYPOTHESIS_PROFILE": "sanitizers",
                                                  "A3FAST_TEST_ENGINES": "native"},
                          cwd=ROOT, capture_output=True, text=True, timeout=1500)
    report = done.stdout[-6000:] + done.stderr[-6000:]
    assert done.returncode == 0, report
    assert "runtime error" not in done.stderr and "ERROR: AddressSanitizer" not in done.stderr, report
