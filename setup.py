"""Build the optional Cython core, `a3fast._core`, and ship the conformance vectors in the package.

The core is two extensions, the engine (`_core`) and the JSON Lines reader (`_ingest`), compiled
from their `.pyx` through Cython when Cython is installed, else from the generated `.c` files that
every sdist carries (so a build without Cython still gets the native engine); both or neither. If neither can be built the package still installs and runs on the pure-Python engine;
set A3FAST_REQUIRE_NATIVE=1 to make a failed build fatal.

The checkout's `vectors/` is the one source of the conformance vectors; the build copies it into
the package as `a3fast/vectors/`, where `a3fast.conformance` finds it once installed.
"""
import os
import shutil
import sys

import setuptools
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

# pyproject.toml's SPDX `license` and `license-files` need setuptools 77; older ones refuse them
# with a long schema dump, so say what to do instead (isolated builds get 77 from build-system).
if int(setuptools.__version__.split(".")[0]) < 77:
    sys.exit(f"a3fast needs setuptools>=77 to build (this is {setuptools.__version__}): "
             "pip install --upgrade 'setuptools>=77', or build with pip (isolated)")

REQUIRE_NATIVE = os.environ.get("A3FAST_REQUIRE_NATIVE") == "1"
MODULES = ("_core", "_ingest")
#: what `_core` takes from `_ingest` at C level, read when either is generated
PXD = "src/a3fast/_ingest.pxd"
VECTORS = "vectors"
# -ffp-contract=off: no fused multiply-add, so scores are bit-identical to the pure engine.
# A3FAST_BUILD_OPT replaces -O3 with another optimisation level: the test suite's own builds (the
# sanitizer build, the packaging test's wheel) take -O1, which compiles in about half the time.
OPTIMIZE = os.environ.get("A3FAST_BUILD_OPT", "-O3")
if OPTIMIZE not in ("-O0", "-O1", "-O2", "-O3", "-Os", "-Og"):
    sys.exit(f"A3FAST_BUILD_OPT={OPTIMIZE!r}: expected one of -O0, -O1, -O2, -O3, -Os, -Og")
COMPILE_ARGS = [OPTIMIZE, "-ffp-contract=off"]


def _warn(message):
    print(f"warning: {message}", file=sys.stderr)


def _source(module, suffix):
    return f"src/a3fast/{module}.{suffix}"


def native_extensions():
    if not all(os.path.exists(_source(m, "pyx")) for m in MODULES):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        return _from_generated_c()
    extensions = [Extension(f"a3fast.{m}", [_source(m, "pyx")], extra_compile_args=COMPILE_ARGS)
                  for m in MODULES]
    return cythonize(extensions, language_level=3, compiler_directives={
        "binding": True, "embedsignature": True, "boundscheck": False, "wraparound": False,
        "cdivision": True, "initializedcheck": False,
    })


def _from_generated_c():
    """The extensions from their `.c` files when Cython is missing, if each was generated from the
    `.pyx` beside it and the `.pxd` both modules read (it is not older than either); a stale one
    would give an engine out of step."""
    for m in MODULES:
        pyx, c_source = _source(m, "pyx"), _source(m, "c")
        newest = max(os.path.getmtime(path) for path in (pyx, PXD) if os.path.exists(path))
        if os.path.exists(c_source) and os.path.getmtime(c_source) >= newest:
            continue
        why = (f"{c_source} is older than {pyx}" if os.path.exists(c_source)
               else f"there is no generated {c_source}")
        if REQUIRE_NATIVE:
            raise RuntimeError(f"A3FAST_REQUIRE_NATIVE=1, but Cython is not installed and {why}")
        _warn(f"Cython is not installed and {why}; a3fast installs with its pure engine")
        return []
    return [Extension(f"a3fast.{m}", [_source(m, "c")], extra_compile_args=COMPILE_ARGS) for m in MODULES]


class OptionalBuildExt(build_ext):
    """Build the extension, or warn and go on without it (like markupsafe and simplejson)."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            # the two extensions compile side by side: each is most of a minute of one core at -O3
            self.parallel = min(len(MODULES), os.cpu_count() or 1)

    def run(self):
        try:
            super().run()
        except Exception as exc:  # compiler missing or failing
            self._fallback(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._fallback(exc)

    def _fallback(self, exc):
        if REQUIRE_NATIVE:
            raise exc
        _warn(f"building a3fast._core failed ({exc}); a3fast installs with its pure engine")


class BuildPyWithVectors(build_py):
    """Copy the checkout's `vectors/` into the built package as `a3fast/vectors/`."""

    def _ships_vectors(self):
        # An editable install runs from src/, and a3fast finds the checkout's vectors/ itself.
        return not getattr(self, "editable_mode", False) and os.path.isdir(VECTORS)

    def run(self):
        super().run()
        if self._ships_vectors():
            target = os.path.join(self.build_lib, "a3fast", VECTORS)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(VECTORS, target)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if self._ships_vectors():
            base = os.path.join(self.build_lib, "a3fast", VECTORS)
            outputs += [os.path.join(base, os.path.relpath(os.path.join(folder, name), VECTORS))
                        for folder, _, names in os.walk(VECTORS) for name in names]
        return outputs


setup(ext_modules=native_extensions(),
      cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithVectors})
