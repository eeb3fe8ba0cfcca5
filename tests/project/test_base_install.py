"""The base install fails well: every command runs in a venv holding only a3fast's base dependencies
(those of pyproject's `dependencies`, none of an extra), and every command or option that needs an
extra names it (`pip install 'a3fast[EXTRA]'`) and exits 2, never 3.

The venv is built once per test session (about 45 s here: pip installs the base dependencies from
the local wheel index, hence `slow`); a3fast itself is this checkout's src/ through a .pth file,
with the compiled core as built in the checkout, so no compile is repeated.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _base_dependencies() -> list[str]:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


@pytest.fixture(scope="session")
def base(tmp_path_factory):
    """(python of the base venv, a work directory, seconds the venv took to build)."""
    work = tmp_path_factory.mktemp("base-install")
    venv = work / "venv"
    env = _env()
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, env=env, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--quiet", *_base_dependencies()], check=True, env=env,
                   timeout=600, capture_output=True)
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, env=env, capture_output=True, text=True).stdout.strip())
    (site / "a3fast-checkout.pth").write_text(f"{REPO / 'src'}\n")
    took = time.monotonic() - started
    probe = subprocess.run([python, "-c", "import a3fast, importlib.util as u; print(a3fast.__file__); "
                                          "print([m for m in ('httpx', 'mcp', 'joserfc', 'starlette', 'uvicorn', "
                                          "'prometheus_client', 'ray', 'anyio') if u.find_spec(m)])"],
                           check=True, env=env, capture_output=True, text=True)
    where, extras = probe.stdout.splitlines()
    assert where.startswith(str(REPO / "src")) and extras == "[]", probe.stdout
    return python, work, took


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "A3FAST_DEBUG")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "venv" not in p)
    return env


def a3fast(base, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    python, work, _ = base
    return subprocess.run([python, "-m", "a3fast", *map(str, args)], cwd=work, env=_env(), input=stdin,
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="session")
def inputs(base):
    """A fleet, a task, a trace and the tool listing the commands below read."""
    _, work, _ = base
    fleet = work / "fleet.jsonl"
    assert a3fast(base, "gen-fleet", "--agents", "40", "-o", fleet).returncode == 0
    tasks = work / "tasks.jsonl"
    assert a3fast(base, "gen-tasks", "--fleet", fleet, "--tasks", "3", "-o", tasks).returncode == 0
    task = work / "task.json"
    task.write_text(tasks.read_text().splitlines()[0])
    trace = work / "trace.jsonl"
    assert a3fast(base, "demo", "--agents", "40", "--tasks", "10", "-o", trace).returncode == 0
    listing = work / "tools.json"
    listing.write_text(json.dumps({"tools": [{"name": "get_order", "inputSchema": {"type": "object"}}]}))
    card = work / "card.json"
    card.write_text(json.dumps({"name": "planner", "skills": [{"id": "plan-trip"}]}))
    return {"fleet": fleet, "task": task, "trace": trace, "listing": listing, "card": card, "work": work}


#: Commands that need no extra: each runs to its answer on the base install.
BASE_COMMANDS = {
    "place": lambda i: ["place", "--fleet", i["fleet"], "--requirements", i["task"], "-o", i["work"] / "p.jsonl"],
    "verify": lambda i: ["verify", i["trace"]],
    "explain": lambda i: ["explain", i["trace"]],
    "report": lambda i: ["report", i["trace"], "-o", i["work"] / "report.html"],
    "encode": lambda i: ["encode", i["trace"], "-o", i["work"] / "compact.jsonl"],
    "conformance": lambda i: ["conformance"],
    "replay": lambda i: ["replay", i["trace"], "--fleet", i["fleet"], "-o", i["work"] / "changes.jsonl",
                         "--report", i["work"] / "replay.html"],
    "schema": lambda i: ["schema", "place.request"],
    "gen-fleet": lambda i: ["gen-fleet", "--agents", "5", "-o", i["work"] / "gen.jsonl"],
    "gen-tasks": lambda i: ["gen-tasks", "--fleet", i["fleet"], "--tasks", "2", "-o", i["work"] / "gen-tasks.jsonl"],
    "demo": lambda i: ["demo", "--agents", "30", "--tasks", "5", "-o", i["work"] / "demo" / "trace.jsonl"],
    "decode": lambda i: ["decode", i["work"] / "compact.jsonl", "-o", i["work"] / "decoded.jsonl"],
    "resolve": lambda i: ["resolve", *(a for name in ("contracts", "mappings", "skills", "connection", "engagement",
                                                       "policy")
                                       for a in (f"--{name}", REPO / "examples" / "authority" / f"{name}.json")),
                          "--now", "2026-03-01T12:30:00Z", "--require", "chess.play", "--require", "chess.resign"],
    # bounded: one small fleet, a few tasks, without the rows of other subjects (they need extras)
    "bench": lambda i: ["bench", "--quick", "--no-extras", "--sizes", "200", "--tasks", "3"],
    "serve --stdio": lambda i: ["serve", "--stdio"],
    "import a2a FILE": lambda i: ["import", "a2a", i["card"], "--namespace", "n", "-o", i["work"] / "a2a.jsonl"],
    "import mcp LISTING": lambda i: ["import", "mcp", i["listing"], "--bind", "a", "--namespace", "n",
                                     "--capability", "a.b/1", "-o", i["work"] / "mcp.jsonl"],
}

#: Commands and options that need an extra: (the extra, arguments).
EXTRA_COMMANDS = {
    "import a2a URL": ("import", lambda i: ["import", "a2a", "http://127.0.0.1:9/"]),
    "import a2a --card-key": ("import", lambda i: ["import", "a2a", "--card-key", i["card"], i["card"]]),
    "import mcp --server-url": ("import", lambda i: ["import", "mcp", "--server-url", "http://127.0.0.1:9/mcp",
                                                     "--bind", "a"]),
    "import mcp --server-command": ("import", lambda i: ["import", "mcp", "--server-command", "true", "--bind", "a"]),
    "verify --ray": ("ray", lambda i: ["verify", "--ray", "local", i["trace"]]),
    "serve": ("serve", lambda i: ["serve", "--port", "0"]),
    "bench": ("serve,import", lambda i: ["bench", "--quick"]),
}


def test_every_command_is_run_here():
    from a3fast.cli import COMMANDS

    run = {name.split()[0] for name in (*BASE_COMMANDS, *EXTRA_COMMANDS)}
    assert set(COMMANDS) <= run, f"commands the base-install test does not run: {set(COMMANDS) - run}"


@pytest.mark.parametrize("command", sorted(BASE_COMMANDS))
def test_rule_every_base_command_runs_on_the_base_install(base, inputs, command):
    if command == "decode":   # reads what `encode` writes
        assert a3fast(base, *BASE_COMMANDS["encode"](inputs)).returncode == 0
    done = a3fast(base, *BASE_COMMANDS[command](inputs), stdin="" if command == "serve --stdio" else None)
    # an answer: 0; `place` may give a negative one, 1 (a generated task may be unschedulable).
    # Nothing else may: 1 from `verify` or `conformance` would be a failed check, not an answer
    assert done.returncode in ((0, 1) if command == "place" else (0,)), done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", sorted(EXTRA_COMMANDS))
def test_rule_a_command_that_needs_an_extra_names_it_and_exits_2(base, inputs, command):
    extra, args = EXTRA_COMMANDS[command]
    done = a3fast(base, *args(inputs))
    assert done.returncode == 2, done.stderr
    assert f"pip install 'a3fast[{extra}]'" in done.stderr, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert "… " not in done.stderr, "the missing extra is named before anything is measured"


def test_the_base_venv_builds_in_bounded_time(base):
    assert base[2] < 600, f"the base venv took {base[2]:.0f} s"
