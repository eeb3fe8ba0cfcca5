"""The README's promises that a newcomer relies on."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_quick_start_is_exactly_two_commands():
    commands = quick_start_commands()
    assert len(commands) == 2
    assert "a3fast demo" in commands[0] and "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    assert quick_start_commands()[1] in (ROOT / ".ci" / "run").read_text()
