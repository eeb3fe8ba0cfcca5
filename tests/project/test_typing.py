"""The typed API: mypy accepts the package, and `mypy --strict` a user's script written from the README.

mypy runs as a user would run it (`python -m mypy`, the `[tool.mypy]` settings of pyproject.toml),
with its cache in a temporary directory so that no run depends on an earlier one.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_SCRIPT = ROOT / "tests" / "typing" / "readme_api.py"
FLEET_PROTOCOL = ROOT / "tests" / "typing" / "fleet_protocol.py"

if importlib.util.find_spec("mypy") is None:
    if os.environ.get("CI"):
        pytest.fail("mypy is not installed; it is in the test extra", pytrace=False)
    pytest.skip("mypy is not installed (pip install '.[test]')", allow_module_level=True)
if not (ROOT / "pyproject.toml").is_file():
    pytest.skip("needs the source tree's pyproject.toml (its [tool.mypy] settings)", allow_module_level=True)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def mypy(cache_dir: Path, *args: str) -> None:
    """Run mypy from the repository root; fail with its report unless it found nothing."""
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache_dir), "--no-color-output",
                          "--no-error-summary", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = (run.stdout + run.stderr).strip()
    assert run.returncode == 0, f"mypy {' '.join(args)} reported:\n{report}"


@pytest.mark.slow
def test_the_package_type_checks(cache_dir: Path) -> None:
    mypy(cache_dir)  # the files and settings of [tool.mypy]: src/a3fast, check_untyped_defs


@pytest.mark.slow
def test_a_script_using_the_readme_api_type_checks_strictly(cache_dir: Path) -> None:
    mypy(cache_dir, "--strict", str(README_SCRIPT.relative_to(ROOT)))


def test_both_fleets_satisfy_the_fleet_protocol(cache_dir: Path) -> None:
    mypy(cache_dir, "--strict", str(FLEET_PROTOCOL.relative_to(ROOT)))


def test_the_typed_readme_script_runs() -> None:
    # the types it states are the ones the API returns at run time, not only on paper
    run = subprocess.run([sys.executable, str(README_SCRIPT)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_the_lazy_authority_names_are_declared_for_type_checkers() -> None:
    # a3fast.authority loads its modules on first use; its TYPE_CHECKING imports say what each name is
    source = ROOT / "src" / "a3fast" / "authority" / "__init__.py"
    tree = ast.parse(source.read_text())
    lazy = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "_MODULES" for t in node.targets))
    checking = next(node for node in tree.body if isinstance(node, ast.If)
                    and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    declared = {node.module: tuple(alias.name for alias in node.names) for node in checking.body
                if isinstance(node, ast.ImportFrom)}
    assert declared == lazy
