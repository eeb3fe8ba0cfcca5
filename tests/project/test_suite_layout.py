"""The suite mirrors the package (docs/testing.md, "Where the tests are"): every test module sits
in a folder named for the package or module of a3fast it holds, or in project/ for the repository
as a whole; no two test modules share a basename (pytest imports them by basename); the shared
modules at tests/ import from every folder."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import a3fast

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = Path(a3fast.__file__).parent
#: Folders of tests/ that hold no test modules: test data and the scripts mypy checks.
NOT_SUITES = {"data", "typing", "__pycache__"}
#: The one folder named for what it holds rather than for part of the package: the repository as
#: a whole (README, docs, typing, packaging, structure, the suite itself).
OWN_NAMES = {"project"}


def suite_folders() -> list[Path]:
    return sorted(p for p in TESTS.iterdir() if p.is_dir() and p.name not in NOT_SUITES)


def test_no_test_module_at_the_top_of_tests():
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []


def test_every_test_folder_is_named_for_a_package_or_module_of_a3fast():
    names = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert [p.name for p in suite_folders() if p.name not in names | OWN_NAMES] == []


def test_test_folders_hold_no_folders_of_their_own():
    # one level: a path computed from __file__ in a test module is always parents[1] for tests/
    assert [str(p.relative_to(TESTS)) for folder in suite_folders() for p in folder.iterdir()
            if p.is_dir() and p.name != "__pycache__" and not p.name.startswith(".")] == []


def test_test_module_basenames_are_unique():
    counts = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, n in counts.items() if n > 1] == []


@pytest.mark.slow  # a second pytest collecting one file: 2-8 s on the shared machine
def test_the_shared_modules_import_from_a_test_folder():
    # a pytest started in one folder, as a user runs one file, finds factories and the fixtures
    folder = TESTS / "fleet"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--collect-only", "-q", str(folder / "test_pipeline.py")],
                          cwd=folder, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "[native]" in done.stdout and "[pure]" in done.stdout
