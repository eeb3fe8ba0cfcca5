"""A checkpoint stopped at each of its filesystem steps, and kill -9 under concurrent writers: the
state read back is exactly what was acknowledged — agents, outcomes, sessions, trace and next seq —
with nothing lost and nothing applied twice. The sweeps run through a3fast.durable.DurableFleet on
both of its owners: the service (ServiceState) and a shard of a ShardedFleet (FleetShard, driven in
process without Ray)."""
from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from a3fast.service.state import ServiceState

pytest.importorskip("starlette")

HERE = Path(__file__).resolve().parents[1]  # tests/, where state_driver.py lives
DRIVER = str(HERE / "state_driver.py")
sys.path.insert(0, str(HERE))
from distributed_worlds import without_timings  # noqa: E402
from state_driver import AGAIN, KIND, decl  # noqa: E402

AGENTS = [f"r{r}-{n}" for r in (1, 2, 3) for n in ("a0", "a1", "a2", "a3", "solo")]
SESSIONS = [(a, s) for a in AGENTS for s in ("kept", "let-go", "r1-placed", "r2-placed", "r3-placed")]
OWNERS = ["service", "shard"]
#: each owner's files in its state directory begin so
PREFIX = {"service": "", "shard": "shard-0."}


def _drive(directory: Path, what: str, owner: str = "service", stop_at: int | None = None,
           step_log: Path | None = None, fail_at: int | None = None) -> int:
    env = dict(os.environ)
    env.pop("A3FAST_STOP_AT_STEP", None)
    env.pop("A3FAST_FAIL_AT_STEP", None)
    if stop_at is not None:
        env["A3FAST_STOP_AT_STEP"] = str(stop_at)
    if fail_at is not None:
        env["A3FAST_FAIL_AT_STEP"] = str(fail_at)
    if step_log is not None:
        env["A3FAST_STEP_LOG"] = str(step_log)
    args = [sys.executable, DRIVER, str(directory), what] + (["shard"] if owner == "shard" else [])
    return subprocess.run(args, env=env, timeout=60, capture_output=True).returncode


def observed(directory: Path, owner: str = "service") -> dict:
    """Everything a restart reads back, from the directory as a new process finds it."""
    if owner == "shard":
        from a3fast.distributed.shard import FleetShard

        shard = FleetShard(0, state_dir=str(directory), fsync=True)
        try:
            return {**_fleet_state(shard.fleet), "local_names": shard.local_names(),
                    "changes": shard.state()["changes"]}
        finally:
            shard.durable.close(checkpoint=False)   # no checkpoint: what the next reader finds is the crash's
    state = ServiceState(directory, log=lambda message: None)
    state.open()
    try:
        return {**_fleet_state(state.fleet), "trace": state.trace_path.read_bytes(), "next_seq": state.next_seq}
    finally:
        state.close(checkpoint=False)   # no checkpoint: what the next reader finds is the crash's


def _fleet_state(fleet) -> dict:
    return {
        "names": fleet.names(),
        "declarations": {n: fleet.get(n).doc for n in fleet.names()},
        "outcomes": {a: fleet.outcomes(a, KIND) for a in AGENTS},
        "sessions": sorted(p for p in SESSIONS if fleet.holds_session(*p)),
    }


def _steps(log: Path) -> list[tuple[str, str]]:
    """(step, path) of each line of a step log (`N NAME PATH`)."""
    return [tuple(line.split(" ", 2)[1:]) for line in log.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("owner", OWNERS)
def test_a_checkpoint_stopped_at_any_filesystem_step_recovers_exactly_what_was_acknowledged(tmp_path, owner):
    base = tmp_path / "base"
    assert _drive(base, "history", owner) == 0
    expected = observed(base, owner)
    assert expected["outcomes"]["r2-a0"] == (1, 2)
    assert ("r2-a3", "kept") in expected["sessions"] and ("r2-a0", "let-go") not in expected["sessions"]
    assert expected.get("next_seq", 2) > 1 and expected.get("changes", 1) > 0
    # the steps of one checkpoint, as they are taken
    log = tmp_path / "steps.log"
    listed = tmp_path / "listed"
    shutil.copytree(base, listed)
    assert _drive(listed, "checkpoint", owner, step_log=log) == 0
    steps = _steps(log)
    names = [name for name, _ in steps]
    for kind in ("create", "fsync", "fsync-dir", "snapshot", "write", "rename", "remove"):
        assert kind in names, (kind, steps)
    assert observed(listed, owner) == expected
    for n in range(1, len(steps) + 1):
        crashed = tmp_path / f"crash-{n}"
        shutil.copytree(base, crashed)
        assert _drive(crashed, "checkpoint", owner, stop_at=n) == -signal.SIGKILL, steps[n - 1]
        assert observed(crashed, owner) == expected, f"stopped before step {steps[n - 1]}"
        # and once more: recovery itself is repeatable, and a checkpoint after it keeps everything
        assert observed(crashed, owner) == expected, f"second start after step {steps[n - 1]}"
        assert _drive(crashed, "checkpoint", owner) == 0
        assert observed(crashed, owner) == expected, f"checkpoint after the crash at {steps[n - 1]}"


@pytest.mark.slow
@pytest.mark.parametrize("owner", OWNERS)
def test_a_checkpoint_that_fails_at_any_filesystem_step_loses_nothing_then_or_later(tmp_path, owner):
    """A disk error at a step of a checkpoint is logged; the owner goes on, and what it acknowledges
    afterwards is kept with everything before (whichever generation it went to). A restart then
    appends to the newest generation: a change acknowledged after it is not undone by the next
    start replaying an older generation after it."""
    base = tmp_path / "base"
    assert _drive(base, "history", owner) == 0
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    log = tmp_path / "steps.log"
    assert _drive(reference, "checkpoint-and-go-on", owner, step_log=log) == 0
    steps = _steps(log)
    expected = observed(reference, owner)
    assert expected["outcomes"]["r3-a0"] == (1, 2)
    assert _drive(reference, "change-again", owner) == 0
    expected_again = observed(reference, owner)
    assert expected_again["declarations"][AGAIN] == decl(AGAIN, version=2)
    for state in (expected, expected_again):
        state["trace"] = without_timings(state["trace"]) if "trace" in state else None
    for n in range(1, len(steps) + 1):
        failed = tmp_path / f"fail-{n}"
        shutil.copytree(base, failed)
        assert _drive(failed, "checkpoint-and-go-on", owner, fail_at=n) == 0
        found = observed(failed, owner)
        # round 3 placed anew in each run: its records differ only in their measured §6 timings
        found["trace"] = without_timings(found["trace"]) if "trace" in found else None
        assert found == expected, f"failed at step {steps[n - 1]}"
        assert _drive(failed, "change-again", owner) == 0
        again = observed(failed, owner)
        again["trace"] = without_timings(again["trace"]) if "trace" in again else None
        assert again == expected_again, f"a change after a restart, after a failure at step {steps[n - 1]}"


@pytest.mark.parametrize("owner", OWNERS)
def test_the_journal_written_before_a_checkpoint_is_removed_only_after_the_checkpoint_is_in_place(tmp_path, owner):
    """The generation a checkpoint covers stays whole on disk until the checkpoint naming the next
    one is renamed into place and the directory fsynced."""
    base = tmp_path / "s"
    assert _drive(base, "history", owner) == 0
    log = tmp_path / "steps.log"
    assert _drive(base, "checkpoint", owner, step_log=log) == 0
    steps = _steps(log)
    prefix = PREFIX[owner]
    renamed = steps.index(("rename", str(base / f"{prefix}checkpoint")))
    removed = steps.index(("remove", str(base / f"{prefix}journal.00000002")))
    assert steps[renamed + 1] == ("fsync-dir", str(base)) and removed > renamed + 1


@pytest.mark.parametrize("owner", OWNERS)
def test_a_new_journal_generation_is_created_fsynced_and_its_directory_fsynced_before_anything_goes_to_it(tmp_path, owner):
    """At a fresh start and at every checkpoint, the new generation's file is created, fsynced, and
    then the state directory itself fsynced — the very next step, before the snapshot is written or
    any entry appended: a journal file whose directory entry a power loss could take away would
    take acknowledged changes with it."""
    base = tmp_path / "s"
    log = tmp_path / "steps.log"
    assert _drive(base, "history", owner, step_log=log) == 0
    steps = _steps(log)
    journal = str(base / f"{PREFIX[owner]}journal.")
    created = [k for k, (name, path) in enumerate(steps) if name == "create"]
    assert [steps[k][1] for k in created] == [journal + "00000001", journal + "00000002"], steps
    for k in created:
        assert steps[k + 1] == ("fsync", steps[k][1]), steps
        assert steps[k + 2] == ("fsync-dir", str(base)), steps


def _server(state: Path, *args: str):
    from service_process import Server

    return Server("--state", str(state), "--checkpoint-every", "15", *args)


@pytest.mark.slow
def test_20_rounds_of_kill_9_under_concurrent_writers_lose_nothing_and_apply_nothing_twice(tmp_path):
    import httpx

    state = tmp_path / "state"
    task = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 1}], "residency": "eu"}
    acknowledged: dict[str, dict | None] = {}          # name -> declaration, None once deleted
    in_flight: dict[str, dict | None] = {}             # a change sent when the kill came: maybe made
    outcomes_acked: dict[str, int] = {}                # agent -> attempts acknowledged
    outcomes_sent: dict[str, int] = {}                 # agent -> attempts sent (some maybe not applied)
    placed: set[int] = set()
    started = time.monotonic()
    server = _server(state)
    for round_ in range(20):
        stop = threading.Event()
        rng = random.Random(round_)

        async def load():
            async with httpx.AsyncClient(base_url=server.url, timeout=5) as client:
                async def worker(w):
                    k = 0
                    while not stop.is_set() and k < 200:
                        k += 1
                        name = f"w{w}-{rng.randrange(6)}"
                        roll = rng.random()
                        try:
                            if roll < 0.4:
                                d = in_flight[name] = decl(name, version=rng.choice([1, 2]))
                                r = await client.put(f"/v1/agents/{name}", json=d)
                                if r.status_code == 200:
                                    acknowledged[name] = d
                                del in_flight[name]
                            elif roll < 0.5 and acknowledged.get(name):
                                in_flight[name] = None
                                r = await client.delete(f"/v1/agents/{name}")
                                if r.status_code == 200:
                                    acknowledged[name] = None
                                del in_flight[name]
                            elif roll < 0.75 and acknowledged.get(name):
                                outcomes_sent[name] = outcomes_sent.get(name, 0) + 1
                                r = await client.post("/v1/outcomes", json={"agent": name, "kind": KIND,
                                                                            "success": True})
                                if r.status_code == 200:
                                    outcomes_acked[name] = outcomes_acked.get(name, 0) + 1
                                    assert r.json()["attempts"] <= outcomes_sent[name]
                            else:
                                r = await client.post("/v1/place", json={"requirements": task, "session": f"s{w}"})
                                if r.status_code == 200:
                                    placed.add(r.json()["records"][-1]["seq"])
                        except httpx.TransportError:
                            return
                await asyncio.gather(*(worker(w) for w in range(6)))

        thread = threading.Thread(target=lambda: asyncio.run(load()))
        thread.start()
        time.sleep(0.15 + 0.1 * (round_ % 3))
        server.kill()                  # mid-load, possibly mid-checkpoint (every 15 entries)
        stop.set()
        thread.join(timeout=30)
        server = _server(state)
        for name, d in list(acknowledged.items()):
            r = server.client.get(f"/v1/agents/{name}")
            found = r.json()["declaration"] if r.status_code == 200 else None
            allowed = [d] + ([in_flight[name]] if name in in_flight else [])
            assert found in allowed, (round_, name)
            acknowledged[name] = found        # what the next round starts from
        in_flight.clear()
        trace = [orjson.loads(x) for x in server.client.get("/v1/trace").content.splitlines()]
        seqs = [r["seq"] for r in trace]
        assert seqs == list(range(1, len(seqs) + 1)), round_          # nothing replayed twice
        assert placed <= set(seqs), round_
        assert time.monotonic() - started < 240
    assert server.stop() == 0
    after = ServiceState(state, log=lambda message: None)
    after.open()
    try:
        for name, acked in outcomes_acked.items():
            if name in after.fleet:
                attempts = after.fleet.outcomes(name, KIND)[1]
                assert acked <= attempts <= outcomes_sent[name], name   # none lost, none twice
    finally:
        after.close()
    assert len(placed) > 20 and sum(outcomes_acked.values()) > 20


def _stdio(state: Path, lines: list[dict], *args: str, fail_at: int | None = None,
           kill: bool = False) -> tuple[int, list[dict], str]:
    """A stdio service's exit code, answers and standard error for `lines`; with `kill`, killed
    (SIGKILL, as a crash) once it has answered every line."""
    env = dict(os.environ)
    env.pop("A3FAST_STOP_AT_STEP", None)
    env.pop("A3FAST_FAIL_AT_STEP", None)
    if fail_at is not None:
        env["A3FAST_FAIL_AT_STEP"] = str(fail_at)
    proc = subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--stdio", "--state", str(state), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    proc.stdin.flush()
    answers = []
    if kill:
        for _ in lines:
            line = proc.stdout.readline()
            if not line:
                break
            answers.append(orjson.loads(line))
        proc.kill()
    out, err = proc.communicate(timeout=60)
    answers += [orjson.loads(x) for x in out.splitlines()]
    return proc.returncode, answers, err.decode()


def test_a_seed_from_a_fleet_file_is_kept_whatever_filesystem_step_fails(tmp_path):
    """`serve --state --fleet` on a fresh state puts the fleet read in bulk straight into a
    checkpoint. A step that fails (as a failing disk would) either fails the start — exit 2, nothing
    kept, and the next start seeds again — or the start goes on, and everything it acknowledged,
    the seed included, is read back by a restart without `--fleet` after a crash (SIGKILL once it
    has answered)."""
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(b"".join(orjson.dumps(decl(name)) + b"\n" for name in ("seeded-a", "seeded-b")))
    later = decl("later")
    lines = [{"op": "put_agent", "id": 1, "name": "later", "declaration": later}]
    outcomes = set()
    for fail_at in range(1, 25):
        state = tmp_path / f"state-{fail_at}"
        code, answers, err = _stdio(state, lines, "--fleet", str(fleet), fail_at=fail_at, kill=True)
        assert "Traceback" not in err, err
        if code == 2:       # failed while opening the state, or checkpointing the seed
            assert err.startswith("a3fast: cannot start") and answers == [], err
            outcomes.add("refused" if "could not be checkpointed" in err else "not opened")
            code, answers, err = _stdio(state, lines, "--fleet", str(fleet), kill=True)     # seeded again
        assert code == -9, err
        if answers and answers[0].get("ok"):
            outcomes.add("acknowledged")
            code, listed, err = _stdio(state, [{"op": "list_agents", "id": 2}])
            assert code == 0 and listed[0]["names"] == ["later", "seeded-a", "seeded-b"], (fail_at, listed, err)
    assert outcomes == {"not opened", "refused", "acknowledged"}
