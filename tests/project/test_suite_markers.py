"""The `slow` marker: registered, and on every test that needs a Ray cluster, so that
`python -m pytest -m "not slow"` is a quick loop and the default run still runs everything."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAY_SUITES = sorted((ROOT / "tests").rglob("test_distributed*.py"))  # wherever the suites live


def test_slow_is_a_registered_marker():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(marker.startswith("slow:") for marker in options["markers"])


def functions_of(path: Path) -> dict[str, bool]:
    """Each test function of a module, and whether its arguments ask for the `ray` fixture."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name: "ray" in {a.arg for a in node.args.args} for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


@pytest.mark.slow  # a second pytest collecting three suites: 2.6 s of CPU
def test_a_test_that_needs_a_ray_cluster_is_slow():
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--collect-only", "-q", "-m", "not slow", *map(str, RAY_SUITES)],
                          cwd=ROOT, capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    quick = {line.split("::")[1].split("[")[0] for line in done.stdout.splitlines() if "::" in line}
    tests = {name: needs_ray for path in RAY_SUITES for name, needs_ray in functions_of(path).items()}
    assert any(tests.values()) and quick == {name for name, needs_ray in tests.items() if not needs_ray}
