"""Test setup shared by every suite: one fixture runs each matching test on both engines, and one
starts a local Ray for each distributed module that asks for it.

The native engine is skipped only where the extension is not built; with A3FAST_REQUIRE_NATIVE=1
(as in .ci/run) a missing extension fails instead, so CI never tests the fallback twice.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from a3fast.engines import NATIVE_AVAILABLE

settings.register_profile("default", deadline=None, max_examples=100,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=2000,
                          suppress_health_check=[HealthCheck.too_slow])
# fewer examples for the run under AddressSanitizer and UBSan (tests/engines/test_sanitizers.py),
# where every allocation and call is checked and a test takes several times as long
settings.register_profile("sanitizers", deadline=None, max_examples=20,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("A3FAST_HYPOTHESIS_PROFILE", "default"))

REQUIRE_NATIVE = os.environ.get("A3FAST_REQUIRE_NATIVE") == "1"
#: The engines the `engine` fixture runs each test on: both, or those A3FAST_TEST_ENGINES names (a
#: comma-separated list). The sanitizer run takes "native": the pure engine runs no compiled code.
ENGINES = [name for name in os.environ.get("A3FAST_TEST_ENGINES", "native,pure").split(",") if name]
if not ENGINES or set(ENGINES) - {"native", "pure"}:
    raise pytest.UsageError(f"A3FAST_TEST_ENGINES={os.environ['A3FAST_TEST_ENGINES']!r}: expected native, pure "
                            f"or both, separated by a comma")


@pytest.fixture(scope="session", params=ENGINES)
def engine(request) -> str:
    """The engine name a test runs on; every matching test takes it."""
    if request.param == "native" and not NATIVE_AVAILABLE:
        if REQUIRE_NATIVE:
            pytest.fail("A3FAST_REQUIRE_NATIVE=1 but the a3fast._core extension is not built")
        pytest.skip("the a3fast._core extension is not built")
    return request.param


@pytest.fixture(scope="module")
def ray():
    """A local Ray for the test module that asks for it (distributed_worlds.local_ray), shut down
    after the module's last test: each distributed module starts its own."""
    from distributed_worlds import local_ray

    ray = local_ray()
    yield ray
    ray.shutdown()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    """A test that needs a Ray cluster (the `ray` fixture of the distributed suites) is `slow`: each
    module's cluster takes 2–4 s to start, whichever of its tests comes first (docs/testing.md)."""
    for item in items:
        if "ray" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
