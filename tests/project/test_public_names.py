"""The names the Python API promises (`a3fast.verify(records)`, `a3fast.Fleet`, …; docs/design.md,
"Contracts other programs rely on") mean the same thing whatever the embedding program imported
first."""
from __future__ import annotations

import subprocess
import sys

import pytest


def fresh_interpreter(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a3fast_verify_is_the_function_even_after_its_module_was_imported():
    result = fresh_interpreter("from a3fast.verify import verify_bytes\nimport a3fast\n"
                               "print(a3fast.verify([]))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"

