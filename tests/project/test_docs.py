"""Every reference to the design resolves inside the repository: files cite docs/design.md (never a
design document a clone does not hold), and every "reading N" they cite is one docs/design.md
numbers."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN_DOC = ROOT / "docs" / "design.md"
#: Where code, tests and prose live; the compiled extensions and generated C are not read.
SEARCHED = ("src", "tests", "docs", "examples", "benchmarks", "vectors", "deploy")
TEXT_SUFFIXES = {".py", ".pyx", ".pyi", ".md", ".json", ".c", ".j2", ".yaml", ".txt", ".toml"}

#: "reading 3", "readings 1, 4 and 5", "readings 2–4": the numbers cited.
CITED = re.compile(r"\breadings? (\d+(?:(?:, | and |, and |–|-)\d+)*)\b")
DEFINED = re.compile(r"^### Reading (\d+): ", re.M)
#: A design document by another name, or one outside the repository.
FOREIGN_DESIGN = re.compile(r"\bDESIGN\b")


def searched_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for top in SEARCHED:
        # a build's metadata (src/a3fast.egg-info) lists the tree as it was built: not a document
        files += [p for p in sorted((ROOT / top).rglob("*"))
                  if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts
                  and not any(part.endswith(".egg-info") for part in p.parts)]
    generated = {p.with_suffix(".c") for p in (ROOT / "src").rglob("*.pyx")}
    return [p for p in files if p not in generated]


def cited_numbers(text: str) -> set[int]:
    numbers: set[int] = set()
    for match in CITED.finditer(text):
        for part in re.split(r", and |, | and ", match.group(1)):
            if re.fullmatch(r"\d+[–-]\d+", part):
                low, high = map(int, re.split(r"[–-]", part))
                numbers.update(range(low, high + 1))
            else:
                numbers.add(int(part))
    return numbers


def defined_readings() -> list[int]:
    return [int(n) for n in DEFINED.findall(DESIGN_DOC.read_text(encoding="utf-8"))]


def test_design_document_numbers_its_readings_once_each_from_one():
    numbers = defined_readings()
    assert numbers == list(range(1, len(numbers) + 1))
    assert len(numbers) >= 9


def test_no_file_cites_a_design_document_the_repository_does_not_hold():
    found = []
    for path in searched_files():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if FOREIGN_DESIGN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []


def test_every_cited_reading_is_defined_in_the_design_document():
    defined = set(defined_readings())
    found = []
    for path in searched_files():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            missing = cited_numbers(line) - defined
            if missing:
                found.append(f"{path.relative_to(ROOT)}:{n}: reading {sorted(missing)} is not in docs/design.md")
    assert found == []


#: A test file named by its path ("tests/fleet/test_matching.py", "tests/service/test_k8s*.py").
TEST_PATH = re.compile(r"(?<![\w/.])tests/[\w/*]+\.py\b")


def test_every_test_file_a_document_names_is_there():
    found = []
    for path in [*searched_files(), ROOT / ".ci" / "run"]:
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{n}: {named}" for named in TEST_PATH.findall(line)
                      if not list(ROOT.glob(named))]
    assert found == []


def test_the_test_path_pattern_finds_what_files_write():
    assert TEST_PATH.findall("(`tests/fleet/test_ingest.py` holds it)") == ["tests/fleet/test_ingest.py"]
    assert TEST_PATH.findall("# tests/service/test_k8s*.py build Pods") == ["tests/service/test_k8s*.py"]
    assert TEST_PATH.findall("python tests/live_mcp_server.py MODE") == ["tests/live_mcp_server.py"]


def test_the_citation_pattern_finds_what_files_write():
    # the forms the code and docs use, so the check above cannot pass by matching nothing
    assert cited_numbers("(docs/design.md, reading 3)") == {3}
    assert cited_numbers("(§5, docs/design.md, readings 1, 4 and 5)") == {1, 4, 5}
    assert cited_numbers("readings 2–4") == {2, 3, 4}
    assert cited_numbers("reading the trace") == set()
    foreign = "DES" + "IGN"  # spelled apart so that this file does not cite it
    assert FOREIGN_DESIGN.search(f"see {foreign}.md") and FOREIGN_DESIGN.search(f"({foreign} 7)")
