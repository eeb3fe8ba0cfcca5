"""A real two-node Ray cluster on this machine for the tests and the benchmark: a head node and a
second node started with `ray start` on 127.0.0.1, each with its own CPUs, its own custom resource
and its own temp dir, so that the processes of each node are known by their command lines.

`stop()` ends every process of both nodes by its id (never `ray stop`, which would end every Ray
on the machine, other tests' too) and removes the temp dirs.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

_ADDRESS = re.compile(r"ray start --address='([^']+)'")


def processes_of(marker: str) -> dict[int, str]:
    """Process id -> command line of every process whose command line holds `marker`."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                line = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in line:
            out[int(entry)] = line
    return out


class TwoNodeCluster:
    """`head` and `second`: the custom resource name of each node (one unit per shard it may hold)."""

    def __init__(self, cpus: int = 1, units: int = 8, timeout: float = 60.0):
        tag = f"{os.getpid()}_{time.monotonic_ns() % 10**9}"
        self.head, self.second = f"a3fast_head_{tag}", f"a3fast_second_{tag}"
        # short paths: Ray's socket paths must fit in 107 bytes
        self.dirs = [tempfile.mkdtemp(prefix="a3h", dir="/tmp"), tempfile.mkdtemp(prefix="a3s", dir="/tmp")]
        self.address = ""
        # the driver's authentication mode for the nodes too: a Ray started earlier in this
        # process leaves RAY_AUTH_MODE=token behind (the user's token file), a fresh one has none
        mode = os.environ.get("RAY_AUTH_MODE", "disabled")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")}, "RAY_AUTH_MODE": mode}
        ray = [os.path.join(os.path.dirname(sys.executable), "ray")]
        common = ["--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus), "--disable-usage-stats"]
        try:
            started = subprocess.run(
                ray + ["start", "--head", "--port", "0", "--include-dashboard", "false",
                       "--resources", json.dumps({self.head: units}), "--temp-dir", self.dirs[0], *common],
                capture_output=True, text=True, timeout=timeout, env=env)
            found = _ADDRESS.search(started.stdout + started.stderr)
            if started.returncode != 0 or found is None:
                raise RuntimeError(f"ray start --head failed:\n{started.stdout}\n{started.stderr}")
            self.address = "127.0.0.1:" + found.group(1).rsplit(":", 1)[1]
            joined = subprocess.run(
                ray + ["start", "--address", self.address, "--resources", json.dumps({self.second: units}),
                       "--temp-dir", self.dirs[1], *common],
                capture_output=True, text=True, timeout=timeout, env=env)
            if joined.returncode != 0:
                raise RuntimeError(f"ray start --address failed:\n{joined.stdout}\n{joined.stderr}")
        except BaseException:
            self.stop()
            raise

    def raylet_pid(self, node: int) -> int:
        """The raylet of node 0 (head) or 1 (second), by its temp dir in its command line."""
        pids = [pid for pid, line in processes_of(self.dirs[node]).items() if "/raylet/raylet " in line]
        if len(pids) != 1:
            raise RuntimeError(f"expected one raylet under {self.dirs[node]}, found {pids}")
        return pids[0]

    def kill_raylet(self, node: int) -> int:
        pid = self.raylet_pid(node)
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self) -> None:
        """Every process of both nodes ended (SIGTERM, then SIGKILL after 5 s), temp dirs removed."""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            pids = [pid for d in self.dirs for pid in processes_of(d)]
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(processes_of(d) for d in self.dirs):
                time.sleep(0.1)
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)

    def left(self) -> dict[int, str]:
        """Processes of the cluster still running (none after `stop`)."""
        return {pid: line for d in self.dirs for pid, line in processes_of(d).items()}
