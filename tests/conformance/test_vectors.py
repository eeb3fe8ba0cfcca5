"""The conformance vectors themselves: their format, their coverage of §7, and a3fast passing them.

As in the JSON-Schema-Test-Suite, every file must be valid JSON, valid against the format's
schema.json, with unique, short descriptions; `A3FAST_VECTORS` points the suite at another copy.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from a3fast.conformance import (CAPABILITY_SUITE, MATCHING_SUITE, check_vector_files,
                                default_vectors_dir, fleet_match, literal_match, load_matching,
                                load_vectors, run_a3fast)
from a3fast.verify import ERROR_CODES

#: The checkout's vectors, wherever a3fast is installed from (A3FAST_VECTORS points at another copy).
ROOT = default_vectors_dir() if os.environ.get("A3FAST_VECTORS") else Path(__file__).parents[2] / "vectors"
VECTORS = load_vectors(ROOT)
MATCHING = load_matching(ROOT)

#: The nine initial vectors §9 names.
SECTION_9 = [
    "a valid placement", "a capability not declared", "a capability at the wrong major version",
    "a clearance not held", "a residency not satisfied", "an explanation missing a required predicate",
    "the chosen agent listed among the failed",
    "a declaration for a different agent than the one admitted",
    "a rejection whose reason names no predicate",
]


@pytest.mark.parametrize("suite", [CAPABILITY_SUITE, MATCHING_SUITE])
def test_vector_files_are_valid_json_valid_against_their_schema_with_unique_short_descriptions(suite):
    assert check_vector_files(ROOT, suite) == []


@pytest.mark.parametrize("vector", VECTORS, ids=[v.id for v in VECTORS])
def test_a3fast_passes_the_vector(vector):
    outcome = run_a3fast(vector)
    assert outcome.passed, f"{outcome.explain()}\n" + "\n".join(outcome.messages)


def test_the_nine_initial_vectors_of_section_9_are_there():
    initial = [v.description for v in VECTORS if v.file == "initial.json"]
    assert initial == SECTION_9


def test_every_error_code_has_a_required_vector_that_expects_it():
    required = [v for v in VECTORS if not v.optional]
    expected_codes = {code for v in required for code, _ in v.errors}
    # agentRef's place in the requirements is a3fast's reading (docs/design.md, reading 2): optional only.
    assert set(ERROR_CODES) - {"E_AGENTREF_UNMET"} <= expected_codes
    assert "E_AGENTREF_UNMET" in {code for v in VECTORS for code, _ in v.errors}


def test_every_topic_has_a_valid_and_an_invalid_case():
    by_file: dict[str, set[bool]] = {}
    for v in VECTORS:
        by_file.setdefault(v.file, set()).add(v.valid)
    assert {f: kinds for f, kinds in by_file.items() if kinds != {True, False}} == {}


def test_several_errors_in_one_record_and_a_broken_trace_are_covered():
    assert any(len({code for code, seq in v.errors if seq is not None}) >= 3
               and len({seq for _, seq in v.errors}) == 1 for v in VECTORS)
    assert any(("E_TRACE", None) in v.errors and len(v.errors) > 1 for v in VECTORS)


@pytest.mark.parametrize("case", MATCHING, ids=[c.id for c in MATCHING])
def test_matching_vector_agrees_with_a_literal_reading_of_section_5(case):
    assert literal_match(case).differences(case.expected) == []


@pytest.mark.parametrize("case", MATCHING, ids=[c.id for c in MATCHING])
def test_matching_vector_passes_on_the_fleet(case, engine):
    assert fleet_match(case, engine).differences(case.expected) == []


# -- the checker catches what it must --------------------------------------------------------------

@pytest.fixture
def suite_copy(tmp_path):
    shutil.copytree(ROOT / CAPABILITY_SUITE, tmp_path / CAPABILITY_SUITE)
    return tmp_path


def _rewrite(root, name, change):
    path = root / CAPABILITY_SUITE / name
    cases = orjson.loads(path.read_bytes())
    change(cases)
    path.write_bytes(orjson.dumps(cases))


def test_checker_refuses_a_repeated_description(suite_copy):
    _rewrite(suite_copy, "scope.json", lambda cases: cases.append(dict(cases[0])))
    assert any("repeats" in p for p in check_vector_files(suite_copy))


def test_checker_refuses_a_long_description(suite_copy):
    _rewrite(suite_copy, "scope.json", lambda cases: cases[0].update(description="x" * 81))
    assert any("longer than" in p for p in check_vector_files(suite_copy))


def test_checker_refuses_an_extra_field(suite_copy):
    _rewrite(suite_copy, "scope.json", lambda cases: cases[0].update(tests=[]))
    assert any("Additional properties" in p for p in check_vector_files(suite_copy))


def test_checker_refuses_valid_true_with_errors(suite_copy):
    def change(cases):
        cases[0]["expected"] = {"valid": True, "errors": [{"code": "E_TRACE", "seq": None}]}
    _rewrite(suite_copy, "scope.json", change)
    assert check_vector_files(suite_copy) != []


def test_checker_refuses_a_file_that_is_not_json(suite_copy):
    (suite_copy / CAPABILITY_SUITE / "broken.json").write_text("[{")
    assert any("broken.json: not JSON" in p for p in check_vector_files(suite_copy))
