"""The switch point: which engine is chosen, and that CI cannot silently test the fallback twice."""
import os
import subprocess
import sys

import pytest

import a3fast
from a3fast.engines import NATIVE_AVAILABLE, engine_module


def test_native_extension_is_present_when_required():
    if os.environ.get("A3FAST_REQUIRE_NATIVE") != "1":
        pytest.skip("A3FAST_REQUIRE_NATIVE is not set")
    assert NATIVE_AVAILABLE, "the a3fast._core extension must be built here"
    assert a3fast.ENGINE == "native"


def test_default_engine_is_native_when_built_else_pure():
    if os.environ.get("A3FAST_ENGINE"):
        pytest.skip("A3FAST_ENGINE forces the engine")
    assert a3fast.ENGINE == ("native" if NATIVE_AVAILABLE else "pure")


def test_environment_variable_forces_the_pure_engine():
    out = subprocess.run([sys.executable, "-c", "import a3fast; print(a3fast.ENGINE)"],
                         env={**os.environ, "A3FAST_ENGINE": "pure"}, capture_output=True, text=True)
    assert out.stdout.strip() == "pure"


def test_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="unknown engine"):
        engine_module("gpu")


def test_fleet_takes_its_engine(engine):
    fleet = a3fast.Fleet(engine=engine)
    assert fleet.engine == engine
    assert fleet.index.__class__.__module__ == engine_module(engine).__name__


def test_version_names_the_engine():
    out = subprocess.run([sys.executable, "-m", "a3fast", "--version"], capture_output=True, text=True)
    assert out.returncode == 0
    assert f"engine: {a3fast.ENGINE}" in out.stdout
