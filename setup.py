"""Build the optional Cython core, `a3fast._core`.

If the compiler or Cython is missing the package still installs and runs on the
pure-Python engine; set A3FAST_REQUIRE_NATIVE=1 to make a failed build fatal.
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

REQUIRE_NATIVE = os.environ.get("A3FAST_REQUIRE_NATIVE") == "1"


def native_extensions():
    if not os.path.exists("src/a3fast/_core.pyx"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if REQUIRE_NATIVE:
            raise
        print("warning: Cython is not available; a3fast installs with its pure engine", file=sys.stderr)
        return []
    extension = Extension(
        "a3fast._core",
        ["src/a3fast/_core.pyx"],
        # -ffp-contract=off: no fused multiply-add, so scores are bit-identical to the pure engine.
        extra_compile_args=["-O3", "-ffp-contract=off"],
    )
    return cythonize([extension], language_level=3, compiler_directives={
        "binding": True, "embedsignature": True, "boundscheck": False, "wraparound": False,
        "cdivision": True, "initializedcheck": False,
    })


class OptionalBuildExt(build_ext):
    """Build the extension, or warn and go on without it (like markupsafe and simplejson)."""

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
        print(f"warning: building a3fast._core failed ({exc}); a3fast installs with its pure engine",
              file=sys.stderr)


setup(ext_modules=native_extensions(), cmdclass={"build_ext": OptionalBuildExt})
