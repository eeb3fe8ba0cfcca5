"""The bounds the docs state in figures are the ones the code holds: each figure, as written in its
document, beside the constant it describes (a figure changed on one side only fails here)."""
from __future__ import annotations

from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _bounds():
    from a3fast.conformance import MAX_OUTPUT_BYTES
    from a3fast.harness.client import MAX_ANSWER_BYTES, STDERR_KEPT
    from a3fast.replay.reading import OFFERED_NAMES_KEPT
    from a3fast.service.problems import MAX_PROBLEM_TEXT, MAX_PROBLEMS
    from a3fast.service.state import COMPACT_FROM
    from a3fast.service.tls import RELOAD_CHECK_S

    return [
        ("harness.md", "or one longer than 256 MiB", MAX_ANSWER_BYTES, 256 << 20),
        ("harness.md", "only the last 64 KiB is kept", STDERR_KEPT, 64 << 10),
        ("verify.md", "prints more than 16 MiB", MAX_OUTPUT_BYTES, 16 << 20),
        ("replay.md", "held to 4,194,304 names", OFFERED_NAMES_KEPT, 4_194_304),
        ("service.md", "lists at\nmost 100 problems", MAX_PROBLEMS, 100),
        ("service.md", "at most 1,000 characters long", MAX_PROBLEM_TEXT, 1_000),
        ("service.md", "at most once a second", RELOAD_CHECK_S, 1.0),
        ("service.md", "as many names gone as live agents, and at\nleast 4,096", COMPACT_FROM, 4096),
    ]


@pytest.mark.parametrize("doc, words, constant, figure", _bounds())
def test_a_bound_the_docs_state_is_the_code_s(doc, words, constant, figure):
    text = (DOCS / doc).read_text()
    assert " ".join(words.split()) in " ".join(text.split()), f"docs/{doc} no longer says {words!r}"
    assert constant == figure


def test_the_serve_command_s_help_states_the_compaction_bound_the_service_holds():
    from click.testing import CliRunner

    from a3fast.cli import main
    from a3fast.service.state import COMPACT_FROM

    text = CliRunner().invoke(main, ["serve", "--help"]).output
    assert "(at least 4,096)" in " ".join(text.split())
    assert COMPACT_FROM == 4096
