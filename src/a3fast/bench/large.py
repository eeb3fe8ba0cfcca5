"""Fleets of a million: what the large-fleet targets name, each step in a process of its own.

At a size of `BenchConfig.large_from` agents or more, `a3fast bench` does not run the per-size
scenarios and baselines (the baselines alone would take hours); it measures how a scheduler gets
and keeps such a fleet, from a JSON Lines file of the standard workload written to a temp dir:

1. `write`: generate the workload (declarations and tasks) and write it out. A process of its own,
   because the declarations as Python dicts take several GiB that no later step should inherit.
2. `decode`: the floor any reader of the file stands on, in a process of its own: reading the file
   and decoding every line with orjson, keeping nothing (what `ready` is quoted against), and, where
   pysimdjson is installed, parsing every line with simdjson.
3. `ready`: `Fleet.load_jsonl` (time, peak RSS when the fleet is ready), then placements with a
   compact record from prepared requirements (each task's best of interleaved rounds, median, as
   the (b) scenario), then `fleet.save` of its snapshot (time, bytes, the process's peak after it).
4. `load`: `Fleet.load` of that snapshot in a fresh process (time, peak RSS).
5. `shells`: what a user runs on the same file, each a real process, `runs` times (medians): the
   wall time of `a3fast place --fleet F --requirements R` (from start to exit) and of `a3fast serve
   --fleet F` (from start to a 200 on /readyz, on 127.0.0.1 and port 0), each process's peak RSS,
   and, between them in the same run, orjson turning the lines into dicts (kept, as a loader that
   builds on them keeps them), so that every ratio is to an orjson time measured beside it.

`python -m a3fast.bench.large STEP ...` runs one step and prints its figures as one JSON object.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

__all__ = ["bench_large"]

FLEET, TASKS, SNAPSHOT = "fleet.jsonl", "tasks.json", "fleet.snapshot"


def _write(directory: str, n_agents: int, n_tasks: int, seed: int) -> dict[str, Any]:
    import orjson

    from ..workload import generate_fleet, generate_tasks

    started = time.perf_counter()
    declarations = generate_fleet(n_agents, seed)
    with open(os.path.join(directory, FLEET), "wb") as out:
        for decl in declarations:
            out.write(orjson.dumps(decl) + b"\n")
    with open(os.path.join(directory, TASKS), "wb") as out:
        out.write(orjson.dumps(generate_tasks(declarations, n_tasks, seed)))
    return {"seconds": time.perf_counter() - started,
            "jsonl_bytes": os.path.getsize(os.path.join(directory, FLEET))}


def _decode(directory: str) -> dict[str, Any]:
    import orjson

    loads = orjson.loads
    started, cpu = time.perf_counter(), time.process_time()
    with open(os.path.join(directory, FLEET), "rb", buffering=1 << 20) as fh:
        for line in fh:
            loads(line)
    # CPU time beside wall time: on a shared machine the wall time also counts other processes'
    figures = {"decode_s": time.perf_counter() - started, "decode_cpu_s": time.process_time() - cpu}
    try:
        import simdjson
    except ImportError:         # the second floor is measured where pysimdjson is installed
        return figures
    parse = simdjson.Parser().parse
    started, cpu = time.perf_counter(), time.process_time()
    with open(os.path.join(directory, FLEET), "rb", buffering=1 << 20) as fh:
        for line in fh:
            parse(line)         # the whole document is parsed and validated; values are made lazily
    figures.update(simdjson_s=time.perf_counter() - started, simdjson_cpu_s=time.process_time() - cpu)
    return figures


def _dicts(directory: str) -> dict[str, Any]:
    """orjson turning every line into a dict, the dicts kept as a loader that builds on them keeps
    them (the baseline the `place` and `serve` processes are quoted against)."""
    import orjson

    loads = orjson.loads
    started = time.perf_counter()
    with open(os.path.join(directory, FLEET), "rb", buffering=1 << 20) as fh:
        documents = [loads(line) for line in fh]
    seconds = time.perf_counter() - started
    return {"dicts_s": seconds, "documents": len(documents)}


def _ready(directory: str, engine: str, rounds: int, budget_s: float) -> dict[str, Any]:
    import orjson

    from ..fleet import Fleet
    from ..schema import parse_requirements
    from .harness import measure_cells
    from .memory import peak_rss

    started, cpu = time.perf_counter(), time.process_time()
    fleet = Fleet.load_jsonl(os.path.join(directory, FLEET), engine)
    ready_s, ready_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    ready_peak = peak_rss()

    with open(os.path.join(directory, TASKS), "rb") as fh:
        tasks = [parse_requirements(doc) for doc in orjson.loads(fh.read())]

    def place(req):
        placement = fleet.place(req, remember_session=False)
        fleet.forget_explanations()      # a task met afresh, as the (b) scenario
        return placement

    cell, = measure_cells(len(fleet), "place", [(engine, place)], tasks, rounds=rounds,
                          budget_s=budget_s, min_tasks=3)
    path = os.path.join(directory, SNAPSHOT)
    started = time.perf_counter()
    fleet.save(path)
    save_s = time.perf_counter() - started
    return {"agents": len(fleet), "engine": fleet.engine, "ready_s": ready_s, "ready_cpu_s": ready_cpu_s,
            "ready_peak_rss": ready_peak,
            "place_ns": cell.median_ns, "place_tasks": cell.tasks, "save_s": save_s,
            "snapshot_bytes": os.path.getsize(path), "save_peak_rss": peak_rss()}


def _load(directory: str, engine: str) -> dict[str, Any]:
    from ..fleet import Fleet
    from .memory import peak_rss

    started, cpu = time.perf_counter(), time.process_time()
    fleet = Fleet.load(os.path.join(directory, SNAPSHOT), engine)
    load_s, load_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    return {"agents": len(fleet), "load_s": load_s, "load_cpu_s": load_cpu_s, "load_peak_rss": peak_rss()}


def _place_process(directory: str) -> tuple[float, int]:
    """(seconds, peak RSS bytes) of `a3fast place --fleet F --requirements R`, start to exit."""
    with open(os.path.join(directory, TASKS), "rb") as fh:
        import orjson

        requirements = os.path.join(directory, "requirements.json")
        with open(requirements, "wb") as out:
            out.write(orjson.dumps(orjson.loads(fh.read())[0]))
    with tempfile.TemporaryFile() as stderr:   # a file: a long error can never fill a pipe
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "a3fast", "place", "--fleet",
                                    os.path.join(directory, FLEET), "--requirements", requirements,
                                    "-o", os.devnull], stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            _, status, usage = os.wait4(process.pid, 0)   # the child's own peak RSS comes with its exit
        except BaseException:       # interrupted: the child is not left running
            process.kill()
            process.wait()
            raise
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode not in (0, 1):
            stderr.seek(0)
            raise RuntimeError(f"a3fast place exited {process.returncode}: {stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss * 1024


def _serve_process(directory: str, timeout_s: float = 600.0) -> tuple[float, int]:
    """(seconds, peak RSS bytes) of `a3fast serve --fleet F` from start to a 200 on /readyz."""
    import re
    import urllib.error
    import urllib.request

    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--host", "127.0.0.1", "--port", "0",
                                "--fleet", os.path.join(directory, FLEET)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None  # a pipe was asked for
        line = process.stdout.readline()
        match = re.search(r"a3fast: loading; listening on (http://\S+)", line)
        if match is None:
            raise RuntimeError(f"a3fast serve printed {line!r}, not where it serves")
        url = match.group(1) + "/readyz"
        while True:
            if time.perf_counter() - started > timeout_s or process.poll() is not None:
                raise RuntimeError(f"a3fast serve was not ready within {timeout_s:.0f} s "
                                   f"(exit code {process.poll()})")
            try:
                with urllib.request.urlopen(url, timeout=timeout_s) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        peak = _peak_rss_of(process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return seconds, peak


def _peak_rss_of(pid: int) -> int:
    """A running process's peak RSS in bytes (VmHWM; psutil's RSS now where /proc has none)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import psutil

    return int(psutil.Process(pid).memory_info().rss)


def _shells(directory: str, runs: int) -> dict[str, Any]:
    """Medians over `runs` of `place`, `serve` to ready and the orjson decode measured between them."""
    import statistics

    place, serve, dicts = [], [], []
    for _ in range(runs):
        place.append(_place_process(directory))
        dicts.append(_step("dicts", directory)["dicts_s"])
        serve.append(_serve_process(directory))
    return {"shell_runs": runs,
            "shell_dicts_s": statistics.median(dicts),
            "place_cli_s": statistics.median(s for s, _ in place),
            "place_cli_peak_rss": statistics.median(m for _, m in place),
            "serve_ready_s": statistics.median(s for s, _ in serve),
            "serve_ready_peak_rss": statistics.median(m for _, m in serve)}


def _step(*args: Any) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "a3fast.bench.large", *map(str, args)],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"a3fast.bench.large {args[0]} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def bench_large(n_agents: int, engine: str = "native", *, tasks: int = 200, seed: int = 0, rounds: int = 7,
                budget_s: float = 2.0, shell_runs: int = 3) -> dict[str, Any]:
    """The large-fleet figures for `n_agents` of the standard workload (see module doc);
    `shell_runs` 0 leaves out the `place` and `serve` processes."""
    with tempfile.TemporaryDirectory(prefix="a3fast-large-") as tmp:
        written = _step("write", tmp, n_agents, tasks, seed)
        decoded = _step("decode", tmp)
        ready = _step("ready", tmp, engine, rounds, budget_s)
        loaded = _step("load", tmp, engine)
        shells = _step("shells", tmp, shell_runs) if shell_runs else {}
    if ready["agents"] != n_agents or loaded["agents"] != n_agents:
        raise AssertionError(f"{n_agents} agents written, {ready['agents']} ready from JSON Lines, "
                             f"{loaded['agents']} loaded from the snapshot")
    return {"agents": n_agents, "engine": ready["engine"], "write_s": written["seconds"],
            "jsonl_bytes": written["jsonl_bytes"], **decoded, **{k: v for k, v in ready.items() if k not in ("agents", "engine")},
            **{k: v for k, v in loaded.items() if k != "agents"}, **shells}


if __name__ == "__main__":
    step, args = sys.argv[1], sys.argv[2:]
    if step == "write":
        figures = _write(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif step == "decode":
        figures = _decode(args[0])
    elif step == "ready":
        figures = _ready(args[0], args[1], int(args[2]), float(args[3]))
    elif step == "load":
        figures = _load(args[0], args[1])
    elif step == "dicts":
        figures = _dicts(args[0])
    elif step == "shells":
        figures = _shells(args[0], int(args[1]))
    else:
        raise SystemExit(f"a3fast.bench.large: unknown step {step!r} (write, decode, dicts, ready, load, shells)")
    print(json.dumps(figures))
