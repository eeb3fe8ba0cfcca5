"""A sharded batch that fails lets go every session hold it sent (docs/scale.md: failure is never
partial), including the last wave's, sent after the driver returned and not acknowledged: the
bookkeeping of `_ShardedStages`, over a coordinator whose shard calls are recorded (the Ray suites
run the real calls: tests/distributed/test_distributed_failure.py)."""
from __future__ import annotations

from a3fast.distributed.sharded import ShardError, _ShardedStages


class _Call:
    def __init__(self, shard: int):
        self.shard = shard

    def remote(self, pairs):
        return ("hold_sessions", self.shard, list(pairs))


class _Shard:
    def __init__(self, shard: int):
        self.hold_sessions = _Call(shard)


class _Coordinator:
    """What `_ShardedStages` asks of a ShardedFleet; a shard that does not acknowledge its holds."""

    def __init__(self, late: set[int]):
        self._shards = [_Shard(0), _Shard(1)]
        self._changes = [0, 0]
        self.generation = 0
        self.timeout = 1.0
        self.late = late
        self.released: list[tuple[str, str]] = []

    def _owner(self, agent: str) -> int:
        return 0 if agent < "m" else 1

    def _gather(self, refs, what, shards=None):
        late = [shard for shard in shards or () if shard in self.late]
        if late:
            raise ShardError(late[0], f"no answer to {what} within 1 s", late)
        return [self._changes[shard] + len(ref[2]) for shard, ref in zip(shards, refs)]

    def _check_changes(self, shard, changes, expected):
        assert changes == expected

    def release_session(self, agent: str, session: str) -> None:
        self.released.append((agent, session))


def test_the_last_waves_holds_are_let_go_when_their_acknowledgement_fails():
    fleet = _Coordinator(late={1})
    stages = _ShardedStages(fleet, None, batch=True)
    assert stages.hold("a", "s1") and stages.hold("z", "s2")     # built in the last wave
    try:
        stages.send_holds()
    except ShardError:
        stages.undo()
    assert sorted(fleet.released) == [("a", "s1"), ("z", "s2")]
    assert stages.made == [] and stages.queued == [[], []]


def test_a_hold_never_sent_is_dropped_and_one_sent_is_let_go_once():
    fleet = _Coordinator(late=set())
    stages = _ShardedStages(fleet, None, batch=True)
    stages.hold("a", "s1")
    stages.send_holds()                     # acknowledged: the generation moves on by one
    assert fleet.generation == 1
    stages.hold("z", "s2")                  # queued for the next wave, never sent
    for agent, session in (("a", "s1"), ("z", "s2")):   # what the driver does for a failed batch
        stages.release(agent, session)
    stages.undo()
    assert fleet.released == [("a", "s1")]
    assert stages.made == [] and stages.queued == [[], []]
