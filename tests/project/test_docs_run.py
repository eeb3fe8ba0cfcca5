"""Every documented example runs as written, from a scratch copy of the repository.

For README.md and each docs/*.md, the ```python blocks and the shell commands run in the order the
file shows them, in one Python namespace per file, in a temporary copy of the tracked files (what a
clone holds), with the installed package. Shell commands are the lines of ```sh/```bash/```shell
blocks and the `$ ` lines of ```console blocks (a trailing `\\` continues a line); a block without
a language, or ```text, is a synopsis and is not run, so a block without a language may not hold a
line that starts with `a3fast` (tag it `sh` to run it or `text` for a synopsis).

A command runs unless one of SKIPPED names it, with its reason (servers, the network, minutes of
measuring); each rule must still match some command, so none outlives what it was written for.
Every command must exit 0, except the `a3fast` commands that NEGATIVE names: the documented negative
answers (unschedulable, a threshold exceeded), which must exit 1 — so a command that fails with 1
for another reason is a failure, and so is an example whose negative answer no longer comes. The
failure names the file, the block and its first line.

`python tests/project/test_docs_run.py DOC` runs one document's examples from the current directory
(what the test does in its scratch copy) and prints one JSON line per failure.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
#: the install step a command may start with: the package under test is installed already
INSTALL_STEP = re.compile(r"^pip install [^&]*&&\s*")

#: (pattern searched in a command, why it is not run here)
SKIPPED: tuple[tuple[str, str], ...] = (
    (r"^a3fast serve\b", "a server: it runs until stopped (tests/service/ start real ones; the README's "
                         "curl examples run against one in tests/project/test_readme_examples.py)"),
    (r"^curl\b", "talks to the server of an `a3fast serve` line, which is not started here"),
    (r"^a3fast bench\b", "measures for minutes (tests/project/test_base_install.py runs a bounded bench)"),
    (r"^pip install", "installs a3fast: the package under test is installed already (.ci/run installs it)"),
    (r"python -m pytest\b", "the test suite or the pytest-benchmark suites themselves"),
    (r"https://agents\.example\.com|github-mcp-server stdio|--fleet fleet.jsonl --requirements task.json",
     "the live-fleet walk-through of docs/interop.md: agents and an MCP server on the network "
     "(tests/interop/test_interop_live.py runs the same flow against real local servers)"),
    (r"--ray\b", "needs a Ray cluster (tests/distributed/ start one)"),
    (r"^mutmut\b", "mutation testing: hours of test runs (docs/testing.md)"),
    (r"^python setup\.py build_ext\b", "builds the Cython core: .ci/run's install builds it, and "
                                        "tests/project/test_packaging.py builds a wheel from the sdist"),
    (r"^kubectl\b", "needs a Kubernetes cluster (tests/service/test_k8s_watch.py runs the watch against a local "
                    "API server; tests/service/test_k8s_deploy.py checks the manifests these lines apply)"),
    (r"^docker\b", "needs a Docker daemon (tests/service/test_k8s_deploy.py parses and lints the Dockerfile)"),
)

#: (pattern searched in an `a3fast` command, the negative answer the document shows it giving: exit 1)
NEGATIVE: tuple[tuple[str, str], ...] = (
    (r"^a3fast place .*--requirements examples/interop/task-unschedulable\.json",
     "docs/interop.md: a task no imported agent can take is unschedulable"),
)


@dataclass(frozen=True)
class Example:
    doc: str
    block: int          # 1-based, counting the file's fenced blocks that run
    line: int           # the first line of the block in the file
    language: str       # "python" or "shell"
    source: str         # the code, or one shell command

    def where(self) -> str:
        return f"{self.doc}, {self.language} block {self.block} (line {self.line})"


def documents() -> list[str]:
    return ["README.md"] + sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))


def skip_reason(command: str) -> str | None:
    return next((reason for pattern, reason in SKIPPED if re.search(pattern, command)), None)


def expected_exit(command: str) -> int:
    """1 for a documented negative answer (NEGATIVE), else 0."""
    negative = command.startswith("a3fast ") and any(re.search(p, command) for p, _ in NEGATIVE)
    return 1 if negative else 0


def shell_commands(language: str, body: str) -> list[str]:
    """The commands of one shell block, continuations joined, install steps removed."""
    lines = body.replace("\\\n", " ").splitlines()
    if language == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    commands = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        commands.append(INSTALL_STEP.sub("", line))
    return commands


def examples(doc: str, text: str | None = None) -> list[Example]:
    """A document's examples in the order it shows them."""
    text = (REPO / doc).read_text() if text is None else text
    found, block = [], 0
    for match in FENCE.finditer(text):
        language, body = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        if language == "python":
            block += 1
            found.append(Example(doc, block, line, "python", body))
        elif language in SHELL_LANGUAGES:
            block += 1
            found += [Example(doc, block, line, "shell", c) for c in shell_commands(language, body)]
    return found


def unmarked_commands(doc: str) -> list[str]:
    """Lines starting with `a3fast` in blocks without a language (neither run nor marked a synopsis)."""
    text = (REPO / doc).read_text()
    return [f"{doc}, line {text.count(chr(10), 0, m.start()) + 1}: {line.strip()}"
            for m in FENCE.finditer(text) if m.group(1) == ""
            for line in m.group(2).splitlines() if line.strip().startswith(("a3fast ", "$ a3fast "))]


# -- running one document (in the scratch copy's root) -----------------------------------------

def run_document(doc: str) -> list[dict]:
    """Run a document's examples from the current directory; one failure per broken example (the
    examples after a broken Python block still run, so one run shows every broken one)."""
    namespace: dict = {"__name__": "__main__"}
    failures = []
    for example in examples(doc, Path(doc).read_text()):
        if example.language == "python":
            try:
                exec(compile(example.source, f"{example.where()}", "exec"), namespace)
            except BaseException as exc:  # noqa: BLE001 - every failure is reported, none stops the run
                failures.append({"where": example.where(), "what": f"{type(exc).__name__}: {exc}",
                                 "source": example.source.splitlines()[0] if example.source else ""})
        elif not skip_reason(example.source):
            done = subprocess.run(["bash", "-o", "pipefail", "-c", example.source], capture_output=True,
                                  text=True, timeout=300, stdin=subprocess.DEVNULL)
            expected = expected_exit(example.source)
            if done.returncode != expected:
                failures.append({"where": example.where(), "source": example.source,
                                 "what": f"exit {done.returncode}, not {expected}: {done.stderr.strip()[-600:]}"})
    return failures


if __name__ == "__main__":
    for failure in run_document(sys.argv[1]):
        print(json.dumps(failure))
    sys.exit(0)


# -- the tests ---------------------------------------------------------------------------------

import pytest  # noqa: E402  (the module also runs as a script, above, without pytest's import cost)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A copy of the tracked files: what a clone of the repository holds."""
    root = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if not name:
            continue
        source, target = REPO / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    return root


def _env() -> dict[str, str]:
    """The installed package (the one this suite imports), on PATH as `a3fast` too."""
    import a3fast

    env = {k: v for k, v in os.environ.items() if k not in ("A3FAST_VECTORS", "A3FAST_DEBUG")}
    package_root = str(Path(a3fast.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.slow
@pytest.mark.parametrize("doc", documents())
def test_every_example_of_the_document_runs_as_written(scratch, doc):
    # each document starts from a clean copy: one document's outputs are not another's inputs
    work = scratch.parent / f"run-{doc.replace('/', '-')}"
    shutil.copytree(scratch, work, symlinks=True)
    try:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), doc], cwd=work, env=_env(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    failures = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert not failures, "examples that do not run as written:\n" + "\n".join(
        f"  {f['where']}: {f['what']}\n    {f['source']}" for f in failures)


def test_no_unmarked_block_holds_an_a3fast_command():
    unmarked = [line for doc in documents() for line in unmarked_commands(doc)]
    assert not unmarked, ("blocks without a language holding a3fast commands (tag them `sh` to run them "
                          "here, or `text` for a synopsis):\n" + "\n".join(unmarked))


def test_every_skip_rule_still_matches_a_documented_command():
    commands = [e.source for doc in documents() for e in examples(doc) if e.language == "shell"]
    unused = [pattern for pattern, _ in SKIPPED + NEGATIVE if not any(re.search(pattern, c) for c in commands)]
    assert not unused, f"skip or negative-answer rules that match no documented command (remove them): {unused}"


def test_the_runner_reports_file_block_and_line(tmp_path, monkeypatch):
    doc = tmp_path / "docs" / "x.md"
    doc.parent.mkdir()
    doc.write_text("t\n\n```python\nx = 1\n```\n\n```sh\ntrue\n```\n\n```python\nundefined_name\n```\n"
                   "\n```console\n$ exit 2\n```\n")
    monkeypatch.chdir(tmp_path)
    failures = run_document("docs/x.md")
    assert [(f["where"], f["what"].split(":")[0]) for f in failures] == [
        ("docs/x.md, python block 3 (line 11)", "NameError"), ("docs/x.md, shell block 4 (line 15)", "exit 2, not 0")]


def test_an_a3fast_command_exits_1_only_where_a_negative_answer_is_documented(tmp_path, monkeypatch):
    doc = tmp_path / "docs" / "x.md"
    doc.parent.mkdir()
    (tmp_path / "fleet.jsonl").write_bytes((REPO / "examples" / "quickstart" / "fleet.jsonl").read_bytes())
    (tmp_path / "nothing-takes-it.json").write_text('{"v":"1.0","capabilities":[{"name":"no.such","version":1}]}')
    # an unschedulable task the document does not name as a negative answer; then the one it
    # names, whose task file is missing here (exit 2, a mistake, not the negative answer)
    doc.write_text("```sh\na3fast place --fleet fleet.jsonl --requirements nothing-takes-it.json\n"
                   "a3fast place --fleet fleet.jsonl --requirements examples/interop/task-unschedulable.json\n```\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    failures = run_document("docs/x.md")
    assert [f["what"].split(":")[0] for f in failures] == ["exit 1, not 0", "exit 2, not 1"]


def test_the_shell_reading_joins_continuations_and_drops_the_install_step():
    assert shell_commands("sh", "pip install . && a3fast demo\n# a comment\na3fast verify \\\n  t.jsonl\n") == [
        "a3fast demo", "a3fast verify    t.jsonl"]
    assert shell_commands("console", "$ a3fast verify t\nt: valid\n$ echo $?\n0\n") == ["a3fast verify t", "echo $?"]
