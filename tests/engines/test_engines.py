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


# -- a missing extension is said, once, where the pure engine stands in for it ----------------------

def run_without_extension(code: str, *, forced: str | None = None, warnings_filter: str = "always"):
    """Run `code` in a fresh interpreter where `a3fast._core` cannot be imported (as after a failed
    build), with every warning shown each time it is raised unless the package itself holds back."""
    env = {k: v for k, v in os.environ.items() if k not in ("A3FAST_ENGINE", "A3FAST_REQUIRE_NATIVE")}
    if forced is not None:
        env["A3FAST_ENGINE"] = forced
    script = "import sys\nsys.modules['a3fast._core'] = None\nimport a3fast\n" + code
    return subprocess.run([sys.executable, "-W", warnings_filter, "-c", script], env=env,
                          capture_output=True, text=True, timeout=60)


def test_missing_extension_warns_once_when_the_default_engine_is_used():
    done = run_without_extension("a3fast.Fleet(); a3fast.Fleet(); print(a3fast.ENGINE)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pure"
    assert done.stderr.count("A3FastPerformanceWarning") == 1
    assert "a3fast._core extension is not built" in done.stderr


def test_missing_extension_does_not_warn_at_import():
    done = run_without_extension("print(a3fast.ENGINE)", warnings_filter="error")
    assert done.returncode == 0 and done.stderr == ""


def test_forced_pure_engine_does_not_warn():
    done = run_without_extension("a3fast.Fleet(); print(a3fast.ENGINE)", forced="pure",
                                 warnings_filter="error")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pure" and done.stderr == ""


def test_asking_for_the_pure_engine_does_not_warn():
    done = run_without_extension("a3fast.Fleet(engine='pure')", warnings_filter="error")
    assert done.returncode == 0 and done.stderr == ""


def test_fallback_warning_is_a_runtime_warning_users_can_filter_by_class():
    done = run_without_extension(
        "import warnings\nfrom a3fast.engines import A3FastPerformanceWarning\n"
        "assert issubclass(A3FastPerformanceWarning, RuntimeWarning)\n"
        "warnings.simplefilter('ignore', A3FastPerformanceWarning)\na3fast.Fleet()")
    assert done.returncode == 0 and done.stderr == ""


def test_native_engine_does_not_warn():
    if not NATIVE_AVAILABLE:
        pytest.skip("the a3fast._core extension is not built")
    env = {k: v for k, v in os.environ.items() if k != "A3FAST_ENGINE"}
    done = subprocess.run([sys.executable, "-W", "error", "-c", "import a3fast; a3fast.Fleet()"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""


def test_an_unknown_forced_engine_is_refused_by_every_fleet_on_the_default_engine():
    done = subprocess.run([sys.executable, "-c", "import a3fast\nprint(a3fast.ENGINE)\na3fast.Fleet()"],
                          env={**os.environ, "A3FAST_ENGINE": "turbo"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert done.stdout.strip() == ("native" if NATIVE_AVAILABLE else "pure")    # what it runs unforced
    assert "ImportError: A3FAST_ENGINE='turbo' names no engine: set it to native or pure" in done.stderr


def test_a_bench_on_the_default_engine_is_refused_for_a_forced_engine_that_cannot_run():
    code = "from a3fast.bench.compact import bench_compact\nbench_compact(agents=3, placements=2, repeat=1)"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "A3FAST_ENGINE": "turbo"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "ImportError: A3FAST_ENGINE='turbo' names no engine" in done.stderr


def test_a_fleet_on_a_named_engine_is_not_refused_for_a_forced_engine_that_cannot_run():
    done = subprocess.run([sys.executable, "-c", "import a3fast\na3fast.Fleet(engine='pure')"],
                          env={**os.environ, "A3FAST_ENGINE": "turbo"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("args", [["demo", "--agents", "3"], ["conformance"]])
def test_every_command_takes_an_unknown_forced_engine_for_bad_input(args):
    done = subprocess.run([sys.executable, "-m", "a3fast", *args], env={**os.environ, "A3FAST_ENGINE": "turbo"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == ("a3fast: A3FAST_ENGINE='turbo' names no engine: set it to native or pure, or unset "
                           "it for the native engine where it is built\n")
    assert done.stdout == ""


def test_forcing_the_native_engine_where_it_is_not_built_is_refused_as_bad_input():
    done = run_without_extension("from a3fast.cli import main\nmain(['conformance'], prog_name='a3fast')",
                                 forced="native")
    assert done.returncode == 2
    assert done.stderr == "a3fast: A3FAST_ENGINE=native, but the a3fast._core extension is not built\n"


@pytest.mark.parametrize("value", ["PURE", " pure "])
def test_a_forced_engine_is_read_without_case_or_surrounding_spaces(value):
    out = subprocess.run([sys.executable, "-c", "import a3fast; print(a3fast.ENGINE)"],
                         env={**os.environ, "A3FAST_ENGINE": value}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pure"
