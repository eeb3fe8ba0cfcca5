"""Peak memory of a scheduler process holding one fleet, measured in a process of its own.

`python -m a3fast.bench.memory N [ENGINE]` builds an N-agent fleet of the standard workload,
places 100 tasks with their §6 JSON, and prints one JSON object: the process's peak RSS, its RSS
before the fleet was built, and the index bytes per agent. A separate process keeps the figure
free of what the benchmark itself holds (baselines, the other engine's fleet, the tasks).
"""
from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

__all__ = ["peak_rss", "measure"]


def peak_rss() -> int:
    """This process's peak resident set size in bytes.

    On Linux, from VmHWM in /proc/self/status: getrusage's ru_maxrss survives exec, so a process
    started by a large one (the benchmark) would report its parent's size.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import resource
    except ImportError:  # Windows: psutil's peak working set
        import psutil

        info = psutil.Process().memory_info()
        return int(getattr(info, "peak_wset", info.rss))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)


def _current_rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _main(n_agents: int, engine: str) -> dict[str, Any]:
    from ..fleet import Fleet
    from ..workload import generate_fleet, generate_tasks

    declarations = generate_fleet(n_agents)
    tasks = generate_tasks(declarations, 100)
    before = _current_rss()
    fleet = Fleet(engine=engine)
    fleet.extend(declarations)
    del declarations
    for task in tasks:
        placement = fleet.place(task, remember_session=False)
        if placement.bound:
            placement.scheduling_json()
    return {"agents": n_agents, "engine": engine, "peak_rss": peak_rss(), "rss_before_fleet": before,
            "rss_after": _current_rss(), "index_bytes_per_agent": fleet.index_nbytes() / max(len(fleet), 1)}


def measure(n_agents: int, engine: str) -> dict[str, Any]:
    """Run the measurement in a fresh interpreter and return its figures."""
    out = subprocess.run([sys.executable, "-m", "a3fast.bench.memory", str(n_agents), engine],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


if __name__ == "__main__":
    print(json.dumps(_main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "native")))
