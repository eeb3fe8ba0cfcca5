"""The package is whole: the sdist holds what builds and tests it, a wheel built from that sdist
without Cython still has the native core and the conformance vectors, and an installed a3fast runs
the vectors from any directory.

The build tests take about a minute (one sdist, one compile of the generated C at -O1, one fresh venv); they
run when A3FAST_PACKAGING_TESTS=1, as in .ci/run.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from a3fast.conformance import default_vectors_dir

ROOT = Path(__file__).resolve().parents[2]
#: sha256 of the Apache License 2.0 text as the ASF publishes it (apache.org/licenses/LICENSE-2.0.txt).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
STEP_TIMEOUT = 600

builds = pytest.mark.skipif(os.environ.get("A3FAST_PACKAGING_TESTS") != "1",
                            reason="builds and installs the package; set A3FAST_PACKAGING_TESTS=1")


def test_license_file_is_the_exact_apache_2_text():
    text = (ROOT / "LICENSE").read_bytes()
    assert text.lstrip().startswith(b"Apache License\n                           Version 2.0, January 2004")
    assert hashlib.sha256(text).hexdigest() == APACHE_2_SHA256


def test_license_is_declared_as_an_spdx_expression_with_its_file():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"
    assert pyproject["project"]["license-files"] == ["LICENSE"]
    # setuptools reads the SPDX string and license-files from 77 on.
    assert "setuptools>=77" in pyproject["build-system"]["requires"]


def test_vectors_a3fast_finds_by_default_are_the_checkouts_vectors(monkeypatch, tmp_path):
    """Installed (the copy the build ships) or editable (the checkout itself), the same files."""
    monkeypatch.delenv("A3FAST_VECTORS", raising=False)
    monkeypatch.chdir(tmp_path)
    found = default_vectors_dir()
    assert found is not None
    shipped = {p.relative_to(found).as_posix(): p.read_bytes() for p in found.rglob("*") if p.is_file()}
    source = {p.relative_to(ROOT / "vectors").as_posix(): p.read_bytes()
              for p in (ROOT / "vectors").rglob("*") if p.is_file()}
    assert shipped == source


def test_vectors_environment_variable_comes_first(monkeypatch, tmp_path):
    monkeypatch.setenv("A3FAST_VECTORS", str(tmp_path))
    assert default_vectors_dir() == tmp_path


def files_under(*folders: str) -> set[str]:
    """The files of these checkout folders, relative to the checkout (no bytecode caches)."""
    out = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                out.add(path.relative_to(ROOT).as_posix())
    return out


def run(argv: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=STEP_TIMEOUT, check=False)


def ok(argv: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    done = run(argv, cwd, env)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def clean_env(**extra: str) -> dict:
    """The environment of a user's shell: no a3fast switches, nothing on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("A3FAST_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


def is_native_core(name: str) -> bool:
    return name.startswith("a3fast/_core.") and name.endswith((".so", ".pyd"))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("packaging")


@pytest.fixture(scope="module")
def sdist(work) -> Path:
    """The sdist, built as a release would be (isolated, with Cython, generating `_core.c`)."""
    ok([sys.executable, "-m", "build", "--sdist", "--outdir", work / "dist", ROOT], ROOT, clean_env())
    (found,) = (work / "dist").glob("a3fast-*.tar.gz")
    return found


@pytest.fixture(scope="module")
def unpacked(sdist, work) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(work / "unpacked", filter="tar")
    (top,) = (work / "unpacked").iterdir()
    return top


@pytest.fixture(scope="module")
def venv_without_cython(work) -> Path:
    """A fresh venv with only the build tools a3fast's build needs besides Cython."""
    venv = work / "venv"
    ok([sys.executable, "-m", "venv", venv], work, clean_env())
    ok([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "setuptools>=77", "wheel"], work, clean_env())
    assert run([venv / "bin" / "python", "-c", "import Cython"], work, clean_env()).returncode != 0
    return venv


@pytest.fixture(scope="module")
def wheel(sdist, venv_without_cython, work) -> Path:
    """A wheel built from the sdist where Cython is not installed, the native core required. It is
    compiled at -O1 (A3FAST_BUILD_OPT): what is tested is what the wheel holds and that it runs, and
    -O1 compiles in about half the time of the default -O3."""
    ok([venv_without_cython / "bin" / "python", "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "--wheel-dir", work / "wheels", sdist], work, clean_env(A3FAST_REQUIRE_NATIVE="1", A3FAST_BUILD_OPT="-O1"))
    (found,) = (work / "wheels").glob("a3fast-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel, venv_without_cython, work) -> Path:
    """The venv with the wheel and its dependencies installed; its bin/ directory."""
    venv = venv_without_cython
    ok([venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel], work, clean_env())
    return venv / "bin"


@pytest.mark.packaging
@builds
def test_sdist_holds_what_builds_and_tests_the_package(sdist):
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    needed = files_under("tests", "vectors", "examples", "docs", "deploy", "benchmarks", "src")
    needed -= {p for p in needed if p.endswith((".so", ".html")) or "egg-info" in p
               or p.startswith("src/a3fast/vectors/")}
    needed |= {"LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in", ".ci/run",
               "src/a3fast/_core.c", "src/a3fast/_core.pyx", "src/a3fast/_ingest.c", "src/a3fast/_ingest.pyx",
               "tests/conftest.py", "tests/strategies.py"}
    assert top == sdist.name.removesuffix(".tar.gz")
    assert sorted(needed - members) == []


@pytest.mark.packaging
@builds
def test_sdist_tests_collect_without_the_checkout(unpacked):
    """The sdist's own tests find their conftest, strategies and data inside the sdist."""
    done = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                unpacked / "tests"], unpacked, clean_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.packaging
@builds
def test_wheel_built_without_cython_has_the_native_core_vectors_and_license(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        version = wheel.name.split("-")[1]
        license_text = archive.read(f"a3fast-{version}.dist-info/licenses/LICENSE")
    assert any(is_native_core(n) for n in names)
    shipped = {n.removeprefix("a3fast/") for n in names if n.startswith("a3fast/vectors/")}
    assert shipped == files_under("vectors")
    assert license_text == (ROOT / "LICENSE").read_bytes()
    assert not any(n.endswith((".c", ".html")) for n in names)


@pytest.mark.packaging
@builds
def test_installed_package_runs_the_conformance_vectors_from_any_directory(installed, work):
    elsewhere = work / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    version = ok([installed / "a3fast", "--version"], elsewhere, clean_env())
    assert "engine: native" in version.stdout
    for suite in ("capability-schema", "matching"):
        done = ok([installed / "a3fast", "conformance", "--suite", suite], elsewhere, clean_env())
        assert done.stdout.strip().splitlines()[-1].endswith(" passed, 0 failed"), done.stdout


@pytest.mark.packaging
@builds
def test_without_cython_or_a_generated_c_file_the_build_falls_back_to_pure(unpacked, venv_without_cython, work):
    tree = work / "no-generated-c"
    shutil.copytree(unpacked, tree)
    (tree / "src" / "a3fast" / "_core.c").unlink()
    python = venv_without_cython / "bin" / "python"
    refused = run([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir",
                   work / "refused", tree], work, clean_env(A3FAST_REQUIRE_NATIVE="1"))
    assert refused.returncode != 0
    assert "Cython is not installed and there is no generated src/a3fast/_core.c" in refused.stdout + refused.stderr
    ok([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", work / "pure",
        tree], work, clean_env())
    (pure,) = (work / "pure").glob("a3fast-*.whl")
    assert not any(is_native_core(n) for n in zipfile.ZipFile(pure).namelist())


@pytest.mark.packaging
@builds
def test_a_generated_c_file_older_than_the_pyx_is_not_built(unpacked, venv_without_cython, work):
    tree = work / "stale-c"
    shutil.copytree(unpacked, tree)
    pyx, c_source = tree / "src" / "a3fast" / "_core.pyx", tree / "src" / "a3fast" / "_core.c"
    os.utime(c_source, (pyx.stat().st_mtime - 60, pyx.stat().st_mtime - 60))
    refused = run([venv_without_cython / "bin" / "python", "-m", "pip", "wheel", "--no-deps",
                   "--no-build-isolation", "--wheel-dir", work / "stale", tree], work,
                  clean_env(A3FAST_REQUIRE_NATIVE="1"))
    assert refused.returncode != 0
    assert "src/a3fast/_core.c is older than src/a3fast/_core.pyx" in refused.stdout + refused.stderr


@pytest.mark.packaging
@builds
def test_a_setuptools_older_than_77_is_told_what_to_install(unpacked, work):
    venv = work / "old-setuptools"
    ok([sys.executable, "-m", "venv", venv], work, clean_env())
    ok([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "setuptools<77"], work, clean_env())
    refused = run([venv / "bin" / "python", "setup.py", "--version"], unpacked, clean_env())
    assert refused.returncode == 1
    assert "a3fast needs setuptools>=77 to build" in refused.stderr
    assert "Traceback" not in refused.stderr
