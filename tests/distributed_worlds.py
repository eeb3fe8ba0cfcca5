"""Random fleets and the operations on them for the distributed tests: a seeded generator (each
world is reproducible from its seed), a local Ray for a test module, and record comparison with
the §6 timings taken out.

With CI set, a missing Ray fails these tests instead of skipping them.
"""
from __future__ import annotations

import os
import random
import re
import time

import orjson
import pytest

from strategies import CAPS, CEILINGS, CLEARANCES, LABELS, NAMES, SESSIONS, TOOLS

_TIMINGS = re.compile(rb',?"timings":\{[^{}]*\}')


def ray_or_fail():
    """The ray module; a skip where Ray is not installed, a failure under CI."""
    try:
        import ray
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI is set but Ray is not installed: pip install '.[test]' installs it")
        pytest.skip("Ray is not installed (pip install 'a3fast[ray]')")
    return ray


def local_ray():
    """Start a small local Ray on loopback (2 CPUs, no dashboard) for one test module."""
    ray = ray_or_fail()
    if not ray.is_initialized():
        # the shards import what a test names by importable name (a custom scorer) from here
        here = os.path.dirname(os.path.abspath(__file__))
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if here not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([here, *filter(None, paths)])
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1", configure_logging=False)
    return ray


def without_timings(record: bytes) -> bytes:
    """A record's bytes with its §6 `timings` member (measured, so never equal) taken out."""
    return _TIMINGS.sub(b"", record)


def records(p) -> list[tuple[str, bytes]]:
    """A placement's (kind, content) records, timings taken out: what two fleets must agree on."""
    from a3fast.record.write import placement_records

    return [(kind, without_timings(content)) for kind, content in placement_records(p)]


def declaration(rng: random.Random, name: str | None = None, namespace: str = "ns") -> dict:
    doc = {"v": "1.0", "agent": {"name": name or rng.choice(NAMES), "namespace": namespace},
           "capabilities": [dict({"name": rng.choice(CAPS), "version": rng.randint(1, 2)},
                                 **({"evaluation": "probe"} if rng.random() < 0.5 else {}))
                            for _ in range(rng.randint(0, 3))],
           "clearances": rng.sample(CLEARANCES, rng.randint(0, 3))}
    if rng.random() < 0.5:
        doc["tools"] = rng.sample(TOOLS, rng.randint(0, 3))
    if rng.random() < 0.5:
        doc["residency"] = rng.sample(LABELS, rng.randint(0, 2))
    if rng.random() < 0.6:
        model = {"latency_class": rng.choice(["interactive", "batch"])}
        if rng.random() < 0.7:
            model["cost_ceiling_usd"] = rng.choice(CEILINGS)
        doc["model"] = model
    return doc


def requirements(rng: random.Random, names: list[str]) -> dict:
    doc = {"capabilities": [{"name": rng.choice(CAPS), "version": rng.randint(1, 2)}
                            for _ in range(rng.randint(0, 2))],
           "clearances": rng.sample(CLEARANCES, rng.randint(0, 2)),
           "tools": rng.sample(TOOLS, rng.randint(0, 1))}
    if rng.random() < 0.4:
        doc["residency"] = rng.choice(LABELS)
    if rng.random() < 0.3:
        doc["model"] = {"latency_class": rng.choice(["interactive", "batch"])}
    if rng.random() < 0.15:
        doc["agentRef"] = rng.choice(names + ["stranger"])
    if rng.random() < 0.25:
        doc["exclude"] = rng.sample(names + ["stranger"], min(2, rng.randint(1, 2)))
    if rng.random() < 0.4:
        doc["session"] = rng.choice(SESSIONS)
    if rng.random() < 0.2:
        doc["kind"] = rng.choice(["review", "summarise"])
    return doc


#: Names for generated worlds: the shared strategies' names (escapes, UTF-16 order) and plain ones.
WORLD_NAMES = NAMES + [f"agent-{i:02d}" for i in range(30)]


def write_world(path, rng, agents, *, odd_shapes=True):
    """A fleet file with replaced names, blank lines and (with `odd_shapes`) lines whose members
    come in an unusual order, escaped names and CRLF line ends."""
    with open(path, "wb") as out:
        for i in range(agents):
            name = rng.choice(WORLD_NAMES) + str(rng.randint(0, agents // 3))
            doc = declaration(rng, name)
            line = orjson.dumps(doc)
            if odd_shapes and i % 7 == 3:
                # members reordered: the agent object last, namespace before name
                doc = {k: doc[k] for k in reversed(list(doc))}
                doc["agent"] = {"namespace": doc["agent"]["namespace"], "name": doc["agent"]["name"]}
                line = orjson.dumps(doc)
            if odd_shapes and i % 11 == 5:
                line = line.replace(b'"agent":{"name":"', b'"agent":{"name":"\\u0041', 1)  # an escaped name
            out.write(line + (b"\r\n" if odd_shapes and i % 13 == 0 else b"\n"))
            if i % 17 == 0:
                out.write(b"\n   \n")
    return path


def commit_lines(shard, path, *, by_place=True):
    """`shard`, a FleetShard of one, reads every line of the file at `path` and commits them as
    one change: from the file where they lie (`by_place`, journaled as an `F` entry: their place
    and CRC-32) or from the bytes a coordinator sends when the shards cannot all reach the file
    (a `T` entry: the bytes themselves and their CRC-32). The names it committed."""
    from a3fast.distributed.jsonl_split import read_share

    if by_place:
        _, shares = read_share(str(path), 0, 1, 1)
        problems, names, _, _ = shard.stage_jsonl(str(path), [0], *shares)
    else:
        _, *shares = shard.deal_range(0, path.read_bytes())
        problems, names, _, _ = shard.stage_jsonl(None, [0], *shares)
    assert not problems and names
    shard.commit_jsonl()
    return names


def committed_shard(tmp_path, docs, *, by_place=True):
    """A FleetShard of one (state in tmp_path/state) that committed `docs` as the lines of
    tmp_path/fleet.jsonl (`commit_lines`). The file and the shard."""
    from a3fast.distributed.shard import FleetShard

    path = tmp_path / "fleet.jsonl"
    path.write_bytes(b"".join(orjson.dumps(doc) + b"\n" for doc in docs))
    shard = FleetShard(0, state_dir=str(tmp_path / "state"))
    assert len(commit_lines(shard, path, by_place=by_place)) == len({d["agent"]["name"] for d in docs})
    return path, shard


def name_length_scorer(task, agents) -> list[dict]:
    """A custom scorer that scores each agent on its own, importable by every shard of a sharded
    fleet as "distributed_worlds:name_length_scorer"."""
    return [{"total": float(len(a.agent.name) % 5) + (0.5 if task.holds_session(a.agent.name) else 0.0),
             "done": float(task.outcomes(a.agent.name)[0])} for a in agents]


def slow_once_held_scorer(task, agents) -> list[dict]:
    """A custom scorer that takes 2 s to score a task whose session one of the agents already holds
    (a shard slow to answer a batch's later wave), importable as
    "distributed_worlds:slow_once_held_scorer"."""
    held = [task.session is not None and task.holds_session(a.agent.name) for a in agents]
    if any(held):
        time.sleep(2.0)
    return [{"total": 1.0 if h else 0.5} for h in held]


def gone(ray, actor, within: float = 30.0) -> None:
    """Returns once the killed `actor` answers no more: ray.kill returns before its process is
    gone, and a request sent meanwhile can still be answered (under load, it was)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            ray.get(actor.state.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.05)
    raise AssertionError(f"the killed actor still answered after {within} s")


def restarted(many, shard, pid, within=30.0):
    """The shard's state once its actor answers from a process other than `pid` (ray.kill
    returns before the process is gone, and the restart takes a moment)."""
    from a3fast.distributed import ShardError

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = many.shard_states()[shard]
        except ShardError:
            state = None
        if state is not None and state["pid"] != pid:
            return state
        time.sleep(0.2)
    raise AssertionError(f"shard {shard} did not restart within {within} s")
