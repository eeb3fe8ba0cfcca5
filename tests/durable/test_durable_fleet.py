"""The durable cycle (a3fast.durable.DurableFleet) on both of its owners — the service's state and a
shard of a ShardedFleet, in this process without Ray — and the checks of every journal entry and
checkpoint before a start trusts it."""
from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from a3fast import SnapshotError
from a3fast.durable.journal import frame, read_entries
from a3fast.durable.statedir import StateError
from a3fast.schema import parse_declaration

OWNERS = ["service", "shard"]
PREFIX = {"service": "", "shard": "shard-0."}
KIND = "order.investigate"


def decl(name: str, version: int = 1, namespace: str = "durable") -> dict:
    return {"v": "1.0", "agent": {"name": name, "namespace": namespace},
            "capabilities": [{"name": KIND, "version": version}], "clearances": [], "residency": ["eu"]}


class Owner:
    """One owner of a DurableFleet, opened on a directory: what the tests ask of both."""

    def __init__(self, kind: str, directory: Path):
        self.kind = kind
        if kind == "shard":
            from a3fast.distributed.shard import FleetShard

            self.shard = FleetShard(0, state_dir=str(directory), fsync=True, checkpoint_every=10_000)
            self.durable = self.shard.durable
        else:
            from a3fast.service.state import ServiceState

            self.state = ServiceState(directory, log=lambda message: None, checkpoint_every=10_000)
            self.state.open()
            self.durable = self.state.durable_fleet

    @property
    def fleet(self):
        return self.durable.fleet

    def put(self, doc: dict) -> None:
        if self.kind == "shard":
            self.shard.add(doc)
        else:
            self.state.put_agents([parse_declaration(doc)])
            self.durable.sync()          # acknowledged: its entry is durable

    def outcome(self, agent: str, success: bool) -> None:
        if self.kind == "shard":
            self.shard.record_outcome(agent, KIND, success)
        else:
            self.state.record_outcome(agent, KIND, success)
            self.durable.sync()

    def crash(self) -> None:
        """Stop without a checkpoint, as a kill would (every acknowledged entry is on disk)."""
        if self.kind == "shard":
            self.durable.close(checkpoint=False)
        else:
            self.state.close(checkpoint=False)


def test_the_service_and_the_shards_keep_their_fleets_through_one_durable_cycle():
    from a3fast.distributed.shard import FleetShard
    from a3fast.durable import DurableFleet
    from a3fast.service.state import ServiceState

    assert isinstance(ServiceState().durable_fleet, DurableFleet)
    assert isinstance(FleetShard(0).durable, DurableFleet)
    # neither owner keeps a journal or a state directory of its own beside it
    for owner in (ServiceState(), FleetShard(0)):
        assert not [k for k, v in vars(owner).items()
                    if type(v).__name__ in ("Journal", "StateDir") or k in ("journal", "statedir", "_journal", "_state")]


@pytest.mark.parametrize("owner", OWNERS)
def test_after_a_checkpoint_fails_part_way_a_restart_appends_to_the_newest_generation(tmp_path, owner):
    """A checkpoint that fails after starting generation 3 leaves generations 2 and 3 beside the
    checkpoint of generation 2. A restart must append to generation 3: appending to 2 would put a
    change acknowledged after the restart before the changes of 3 at the next start, which would
    silently undo it."""
    first = Owner(owner, tmp_path)
    first.put(decl("x", version=1))
    first.durable.checkpoint()                           # the checkpoint of generation 2
    first.outcome("x", True)
    # a real failure part-way: a directory where the snapshot of generation 3 is to be written
    (tmp_path / f"{PREFIX[owner]}fleet.00000003.a3snap").mkdir()
    assert first.durable.try_checkpoint() is False        # logged; the owner goes on in generation 3
    assert (tmp_path / f"{PREFIX[owner]}journal.00000003").exists()
    first.put(decl("x", version=2))                       # acknowledged, in generation 3
    first.crash()

    second = Owner(owner, tmp_path)
    assert second.fleet.get("x").doc == decl("x", version=2)
    second.put(decl("x", version=3))                      # acknowledged after the restart
    second.crash()

    third = Owner(owner, tmp_path)
    assert third.fleet.get("x").doc == decl("x", version=3)
    assert third.fleet.outcomes("x", KIND) == (1, 1)
    third.crash()


def _history(owner: str, directory: Path) -> None:
    """Two agents, a checkpoint, then one entry more, acknowledged."""
    o = Owner(owner, directory)
    o.put(decl("a"))
    o.put(decl("b"))
    o.durable.checkpoint()
    o.outcome("a", True)
    o.crash()


def _rewrite_checkpoint(path: Path, change) -> None:
    """The checkpoint with its document changed and its frame (length, CRC) made anew, as a
    careless tool would leave it: only the checks of its fields can refuse it."""
    (payload,) = read_entries(path.read_bytes()).entries
    document = orjson.loads(payload)
    change(document)
    path.write_bytes(frame(orjson.dumps(document)))


def _refusal(owner: str, directory: Path) -> str:
    with pytest.raises(StateError) as caught:
        Owner(owner, directory)
    assert isinstance(caught.value, SnapshotError)
    return str(caught.value)


COMMON_CHECKPOINT = [
    ("format", "4"), ("format", 4.0), ("format", 3), ("generation", True), ("generation", 0),
    ("generation", 2.0), ("generation", "2"), ("generation", 10 ** 12), ("fleet", "../fleet.00000002.a3snap"),
    ("fleet", "fleet.00000001.a3snap"), ("fleet", None),
]
OWN_CHECKPOINT = {
    "service": [("next_seq", 1.5), ("next_seq", "3"), ("next_seq", 0), ("trace_bytes", -1),
                ("trace_bytes", None), ("trace_tail_crc", 1 << 32), ("trace_tail_crc", [])],
    "shard": [("seq", -1), ("seq", 2.0), ("names", "ab"), ("names", ["a", "a", "b"]), ("names", [1, 2]),
              ("names", ["b"])],
}


@pytest.mark.parametrize("owner, field, value",
                         [(o, f, v) for o in OWNERS for f, v in COMMON_CHECKPOINT + OWN_CHECKPOINT[o]])
def test_a_checkpoint_field_of_the_wrong_type_or_range_refuses_to_start_naming_the_file_and_the_field(
        tmp_path, owner, field, value):
    _history(owner, tmp_path)
    checkpoint = tmp_path / f"{PREFIX[owner]}checkpoint"
    if owner == "shard" and field == "fleet" and isinstance(value, str):
        value = PREFIX[owner] + value
    _rewrite_checkpoint(checkpoint, lambda document: document.__setitem__(field, value))
    message = _refusal(owner, tmp_path)
    assert message.startswith(f"{checkpoint}: field {field!r}: "), message


@pytest.mark.parametrize("owner", OWNERS)
@pytest.mark.parametrize("field", ["next_seq", "seq", "names"])
def test_a_checkpoint_lacking_a_field_of_its_owner_refuses_to_start_naming_it(tmp_path, owner, field):
    if (field == "next_seq") != (owner == "service"):
        pytest.skip("a field of the other owner")
    _history(owner, tmp_path)
    checkpoint = tmp_path / f"{PREFIX[owner]}checkpoint"
    _rewrite_checkpoint(checkpoint, lambda document: document.pop(field))
    assert _refusal(owner, tmp_path) == (f"{checkpoint}: field {field!r}: missing; restore the state "
                                         f"directory from a copy")


@pytest.mark.parametrize("owner", OWNERS)
@pytest.mark.parametrize("payload, reason", [
    (b"[]", "is array of 0, not a JSON object"),
    (b"{not json", "is not JSON"),
])
def test_a_checkpoint_that_is_not_a_json_object_refuses_to_start(tmp_path, owner, payload, reason):
    _history(owner, tmp_path)
    checkpoint = tmp_path / f"{PREFIX[owner]}checkpoint"
    checkpoint.write_bytes(frame(payload))
    message = _refusal(owner, tmp_path)
    assert message.startswith(f"{checkpoint}: ") and reason in message, message


BAD_CHANGES = [
    ({"op": "delete", "name": 5}, "field 'name': expected a string, found 5"),
    ({"op": "put", "decls": {"v": "1.0"}}, "field 'decls': expected an array of declaration objects"),
    ({"op": "put", "decls": ["a"]}, "field 'decls': expected an array of declaration objects"),
    ({"op": "outcome", "agent": "a", "kind": KIND, "success": 1}, "field 'success': expected true or false, found 1"),
    ({"op": "outcome", "agent": "a", "kind": 7, "success": True}, "field 'kind': expected a task kind"),
    ({"op": "outcomes", "agent": "a", "kind": KIND, "successes": 1.0, "attempts": 2},
     "field 'successes': expected a non-negative integer, found 1.0"),
    ({"op": "outcomes", "agent": "a", "kind": KIND, "successes": 1, "attempts": -2},
     "field 'attempts': expected a non-negative integer, found -2"),
    ({"op": "outcomes", "agent": "a", "kind": KIND, "successes": 3, "attempts": 2},
     "field 'successes': 3 is more than the 2 attempts"),
    ({"op": "hold", "agent": "a", "session": None}, "field 'session': expected a string, found null"),
    ({"op": "release", "agent": ["a"], "session": "s"}, "field 'agent': expected a string, found array of 1"),
]


@pytest.mark.parametrize("owner", OWNERS)
@pytest.mark.parametrize("change, reason", BAD_CHANGES, ids=[c["op"] + "-" + r.split("'")[1] for c, r in BAD_CHANGES])
def test_a_journal_entry_with_a_field_of_the_wrong_type_refuses_to_start_naming_the_entry_and_the_field(
        tmp_path, owner, change, reason):
    _history(owner, tmp_path)
    journal = tmp_path / f"{PREFIX[owner]}journal.00000002"
    with open(journal, "ab") as fh:
        fh.write(frame(b"J" + orjson.dumps(change)))
    message = _refusal(owner, tmp_path)
    assert message.startswith(f"{journal}: entry 2 (generation 2, byte "), message
    assert f"unreadable: change {change['op']!r}: {reason}" in message, message


def test_no_checkpoint_past_the_last_generation_a_journal_name_holds(tmp_path):
    # a journal is named with 8 digits: a checkpoint at generation 10^8 would write a state that the
    # next start refuses; refused and logged instead, the journal keeps every change
    from a3fast import Fleet
    from a3fast.durable.fleet import DurableFleet
    from a3fast.durable.statedir import MAX_GENERATION, StateDir

    directory = tmp_path / "state"
    state = StateDir(directory)
    directory.mkdir()
    state.generation = MAX_GENERATION
    state._create_journal(MAX_GENERATION)
    state.commit(Fleet().save, {})          # as 10^8 - 2 checkpoints before it would leave it
    logged: list[str] = []

    def durable():
        return DurableFleet(directory, empty=Fleet, load=Fleet.load, log=logged.append)

    kept = durable()
    kept.open()
    kept.apply_now({"op": "put", "decls": [decl("a1")]})
    kept.close()
    assert any("no checkpoint taken" in line and "the last journal generation" in line for line in logged)
    again = durable()
    again.open()
    assert again.fleet.names() == ["a1"]
    again.close()


def test_the_lock_stays_while_any_owner_in_this_process_holds_the_directory(tmp_path):
    # owners in one process share the process's lock; the first to close must not let it go while
    # the other still appends, or another process could take the directory under it
    import subprocess
    import sys

    from a3fast import Fleet
    from a3fast.durable.fleet import DurableFleet

    def durable():
        return DurableFleet(tmp_path, empty=Fleet, load=Fleet.load, log=lambda message: None)

    def other_process_opens() -> bool:
        code = ("import sys\nfrom a3fast import Fleet\nfrom a3fast.durable.fleet import DurableFleet\n"
                "from a3fast.durable.statedir import StateError\n"
                f"d = DurableFleet({str(tmp_path)!r}, empty=Fleet, load=Fleet.load, log=lambda m: None)\n"
                "try:\n    d.open()\nexcept StateError:\n    sys.exit(9)\nd.close(checkpoint=False)\n")
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
        assert run.returncode in (0, 9), run.stderr
        return run.returncode == 0

    first, second = durable(), durable()
    first.open()
    second.open()
    first.close()
    assert not other_process_opens()
    second.close()
    assert other_process_opens()
