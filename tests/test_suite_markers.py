"""The `slow` marker: registered, and on every test that needs a Ray cluster, so that
`python -m pytest -m "not slow"` is a quick loop and the default run still runs everything."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAY_SUITES = sorted((ROOT / "tests").glob("test_distributed*.py"))


def test_slow_is_a_registered_marker():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(marker.startswith("slow:") for marker in options["markers"])


def ray_free_tests(path: Path) -> set[str]:
    """The tests of a module whose arguments do not ask for the `ray` fixture."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
            and "ray" not in {a.arg for a in node.args.args}}


def collected(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--collect-only", "-q",
                           *args, *map(str, RAY_SUITES)], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split("::")[1].split("[")[0] for line in done.stdout.splitlines() if "::" in line}


def test_a_test_that_needs_a_ray_cluster_is_slow():
    assert RAY_SUITES
    quick = collected("-m", "not slow")
    assert quick == set().union(*map(ray_free_tests, RAY_SUITES))
    assert quick < collected()
