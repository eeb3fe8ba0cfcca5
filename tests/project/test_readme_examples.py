"""The README's examples run as written, and say what they really give.

Python: the ```python blocks run in order in one namespace; an expression statement whose comment
is a Python literal (`p.bound, p.agent  # (True, 'order-analyst')`) must evaluate to that value.
Shell: each command of the ```sh and ```console blocks runs in a scratch directory (with the
repository's `examples/`), and a console block's shown output must be exactly what it prints.
`pip install` and `python -m pytest` steps are not run here: installing is what .ci/run and
tests/project/test_packaging.py do, and the suite is what runs this.
"""
from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from service_process import Server

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
NOT_RUN_HERE = ("pip install", "python -m pytest")


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README) if lang == language]


# -- Python ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StatedValue:
    line: int       # in its block
    source: str     # the expression
    value: object   # what its comment says it gives


def stated_values(code: str) -> dict[int, StatedValue]:
    """Top-level expression statements whose trailing comment is a Python literal, by the line
    their statement ends on."""
    comments = {tok.start[0]: tok.string[1:].strip()
                for tok in tokenize.generate_tokens(io.StringIO(code).readline)
                if tok.type == tokenize.COMMENT}
    out = {}
    for node in ast.parse(code).body:
        comment = comments.get(node.end_lineno)
        if not isinstance(node, ast.Expr) or comment is None:
            continue
        try:
            value = ast.literal_eval(comment)
        except (ValueError, SyntaxError):
            continue  # a comment in words, not a stated value
        out[node.end_lineno] = StatedValue(node.end_lineno, ast.get_source_segment(code, node), value)
    return out


def run_python_blocks() -> list[tuple[StatedValue, object]]:
    """Run every Python block in order; (stated value, actual value) for each checked statement."""
    namespace: dict = {"__name__": "readme"}
    checked = []
    for code in blocks("python"):
        stated = stated_values(code)
        for node in ast.parse(code).body:
            if node.end_lineno in stated:
                actual = eval(compile(ast.Expression(node.value), "README.md", "eval"), namespace)
                checked.append((stated[node.end_lineno], actual))
            else:
                exec(compile(ast.Module([node], type_ignores=[]), "README.md", "exec"), namespace)
    return checked


def test_readme_python_examples_give_the_values_their_comments_state(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checked = run_python_blocks()
    wrong = [f"{s.source}  # README says {s.value!r}, got {actual!r}" for s, actual in checked
             if actual != s.value]
    assert wrong == []
    sources = {s.source for s, _ in checked}
    # the values a newcomer reads first are among those checked (the reading of comments works)
    assert {"p.bound, p.agent", "p.summary()", "str(problems[1])"} <= sources


def test_a_comment_in_words_is_not_taken_for_a_stated_value():
    code = "x = 1\nx  # 1\nx  # the number one\ny = x  # 2\n"
    assert [(s.source, s.value) for s in stated_values(code).values()] == [("x", 1)]


# -- shell -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShellExample:
    command: str            # as the README shows it
    output: str | None      # what a console block shows it printing; None for an sh block

    def runnable(self) -> str:
        """The command without its install and test-suite steps ('' when nothing is left)."""
        steps = [s.strip() for s in self.command.split("&&")]
        return " && ".join(s for s in steps if not s.startswith(NOT_RUN_HERE))


def shell_examples() -> list[ShellExample]:
    """Every shell example, in README order."""
    found = []
    for lang, body in BLOCK.findall(README):
        if lang == "sh":
            found.append(ShellExample(body.replace("\\\n", " ").strip(), None))
        elif lang == "console":
            for chunk in re.split(r"^\$ ", body, flags=re.M)[1:]:
                command, _, output = chunk.partition("\n")
                found.append(ShellExample(command.strip(), output.rstrip("\n")))
    return found


def python_example_inputs() -> tuple[list, dict]:
    """The fleet and the task of the README's first Python example (the §10 example)."""
    calls = [node for node in ast.walk(ast.parse(blocks("python")[0]))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "fleet"]
    added = [ast.literal_eval(c.args[0]) for c in calls if c.func.attr == "add"]
    (placed,) = [ast.literal_eval(c.args[0]) for c in calls if c.func.attr == "place"]
    return added, placed


def test_the_quickstart_files_are_the_first_python_example():
    """examples/quickstart/, which the `place | verify` example reads, holds the §10 fleet and task
    of the first Python example, so the shell and the Python examples tell the same story."""
    added, placed = python_example_inputs()
    quickstart = ROOT / "examples" / "quickstart"
    assert [orjson.loads(line) for line in (quickstart / "fleet.jsonl").read_bytes().splitlines()] == added
    assert orjson.loads((quickstart / "req.json").read_bytes()) == placed


def _json_values(text: str) -> list:
    import json

    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
        while at < len(text) and text[at].isspace():
            at += 1
    return values


#: Where the README's service examples expect `a3fast serve` (its default address).
SERVED = "localhost:8421"


@pytest.mark.slow
def test_readme_shell_examples_run_and_print_what_they_show(tmp_path):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if k != "A3FAST_VECTORS"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    ran, problems = [], []
    server = None
    try:
        for example in shell_examples():
            command = example.runnable()
            if not command:
                continue
            if SERVED in command:   # the service examples talk to a real server on a free port
                if server is None:
                    server = Server("--state", str(tmp_path / "state"))
                command = command.replace(SERVED, server.url.removeprefix("http://"))
            done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=120)
            ran.append(command)
            if done.returncode != 0:
                problems.append(f"{command}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
            elif example.output is not None and done.stdout.rstrip("\n") != example.output:
                problems.append(f"{command}: README shows\n{example.output}\nbut it printed\n{done.stdout}")
            elif SERVED in example.command and "/v1/place" in command:
                answers = _json_values(done.stdout)   # one JSON answer per curl, unseparated
                kinds = [r["kind"] for r in answers[-1]["records"]]
                if kinds != ["task.submitted", "task.admitted", "task.bound"]:
                    problems.append(f"{command}: expected the §10 records, got {kinds}")
    finally:
        if server is not None:
            server.stop()
    assert problems == []
    # the demo, place | verify, explain and resolve examples all ran
    assert len(ran) >= 4 and any(c.startswith("a3fast demo") for c in ran)
