"""The compiled engine and reader built with AddressSanitizer and UBSan, in a directory of their own.

`build(into)` copies the checkout's build inputs (setup.py, pyproject.toml, src/) into `into`,
leaving out the compiled and generated files, and runs `setup.py build_ext --inplace` there with
`-fsanitize=address,undefined -fno-sanitize-recover=undefined`: any undefined behaviour (a signed
overflow, a misaligned load, a shift too far) ends the process with UBSan's report, and any
out-of-bounds or freed-memory access with ASan's. The source tree is never written to.

`sanitized_env(src)` is the environment that runs Python on that copy: the ASan runtime preloaded
(CPython itself is not built with it, and it must be the first library loaded), leak detection
off (CPython keeps objects alive until exit by design), Python's allocator replaced by malloc so
that ASan sees every object, and A3FAST_REQUIRE_NATIVE=1 so that a build that failed cannot pass
on the pure engine unnoticed.

By hand (docs/testing.md): `python tests/sanitized_build.py DIR` builds into DIR and prints the
environment lines to run pytest with.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-g"]
#: what a copy of the checkout needs to build the extensions
_INPUTS = ("setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in")
#: left out of the copy; the generated .c files are kept (Cython writes them again only when a
#: .pyx is newer, and the copy keeps the files' times)
_GENERATED = ("*.so", "__pycache__", "*.pyc")


def runtime(name: str) -> str | None:
    """The path of gcc's sanitizer runtime `name` (libasan.so, libubsan.so), or None without one."""
    compiler = shutil.which("gcc")
    if compiler is None:
        return None
    found = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return found if os.path.isabs(found) and os.path.exists(found) else None


def build(into: Path) -> Path:
    """Build the sanitized extensions in a copy of the checkout under `into`; the copy's `src`."""
    copy = into / "checkout"
    copy.mkdir(parents=True, exist_ok=True)
    for name in _INPUTS:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, copy / name)
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns(*_GENERATED), dirs_exist_ok=True)
    flags = " ".join(SANITIZE)
    # -O1, as ASan's documentation advises: the build took 37 s against 64 s at the default -O3, and
    # the suites under the sanitizers as long (122 s and 129 s)
    env = {**os.environ, "CFLAGS": flags, "LDFLAGS": "-fsanitize=address,undefined", "A3FAST_REQUIRE_NATIVE": "1",
           "A3FAST_BUILD_OPT": "-O1"}
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=copy, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the sanitized build failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return copy / "src"


def sanitized_env(src: Path) -> dict[str, str]:
    """The environment that runs Python on the sanitized copy at `src` (see the module docstring)."""
    asan = runtime("libasan.so")
    if asan is None:
        raise RuntimeError("gcc's libasan.so is not installed")
    return {**os.environ, "PYTHONPATH": str(src), "LD_PRELOAD": asan, "PYTHONMALLOC": "malloc",
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87",
            "A3FAST_REQUIRE_NATIVE": "1"}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/sanitized_build.py DIR")
    src = build(Path(sys.argv[1]).resolve())
    env = sanitized_env(src)
    for key in ("PYTHONPATH", "LD_PRELOAD", "PYTHONMALLOC", "ASAN_OPTIONS", "UBSAN_OPTIONS", "A3FAST_REQUIRE_NATIVE"):
        print(f"export {key}={env[key]}")
