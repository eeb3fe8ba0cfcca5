"""Every refusal to start names the file, the entry and the reason, and exits 2 (never a hang,
never a traceback) — over HTTP and over stdio."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from a3fast.durable.journal import frame, read_entries
from service_process import Server

pytest.importorskip("starlette")


def decl(name):
    return {"v": "1.0", "agent": {"name": name, "namespace": "refuse"},
            "capabilities": [{"name": "order.investigate", "version": 1}], "clearances": [], "residency": ["eu"]}


def _state(tmp_path: Path, checkpoint: bool = False) -> Path:
    state = tmp_path / "state"
    s = Server("--state", str(state))
    for k in range(3):
        assert s.client.put(f"/v1/agents/r{k}", json=decl(f"r{k}")).status_code == 200
    if checkpoint:
        assert s.stop() == 0
        s = Server("--state", str(state))
        assert s.client.put("/v1/agents/after", json=decl("after")).status_code == 200
    s.kill()
    return state


def _refused(state: Path, *, stdio: bool) -> str:
    args = [sys.executable, "-m", "a3fast", "serve", "--state", str(state)]
    args += ["--stdio"] if stdio else ["--port", "0"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=30, input="")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    return r.stderr


def _append(state: Path, payload: bytes, generation: int = 1) -> Path:
    journal = state / f"journal.{generation:08d}"
    with open(journal, "ab") as fh:
        fh.write(frame(payload))
    return journal


@pytest.mark.parametrize("stdio", [False, True], ids=["http", "stdio"])
@pytest.mark.parametrize("payload, reason", [
    (b"J{not json", "its payload is not JSON"),
    (b'J{"op": "delete"}', "change 'delete' lacks 'name'"),
    (b'J{"op": "rename", "name": "r0"}', "unknown change 'rename'"),
    (b'T["r0"]\n', "is not [agent, session]"),
    (b"X{}", "unknown entry type"),
    (b'J{"op": "delete", "name": "nobody"}', "does not apply to the fleet before it"),
    (b'J{"op": "delete", "name": 5}', "unreadable: change 'delete': field 'name': expected a string, found 5"),
])
def test_a_whole_entry_that_cannot_be_read_refuses_to_start_naming_the_file_and_the_entry(tmp_path, payload, reason, stdio):
    state = _state(tmp_path)
    journal = _append(state, payload)
    err = _refused(state, stdio=stdio)
    assert f"{journal}: entry 4 (generation 1, byte " in err and reason in err


def test_damage_in_the_middle_refuses_naming_the_entry_and_its_generation(tmp_path):
    state = _state(tmp_path)
    journal = state / "journal.00000001"
    data = bytearray(journal.read_bytes())
    data[20] ^= 0x01                          # entry 1's payload: entries 2 and 3 follow it
    journal.write_bytes(bytes(data))
    err = _refused(state, stdio=False)
    assert f"{journal}: entry 1 at byte 0 is damaged" in err and "(generation 1)" in err


def test_a_missing_journal_beside_a_checkpoint_refuses_to_start(tmp_path):
    state = _state(tmp_path, checkpoint=True)
    (state / "journal.00000002").unlink()
    err = _refused(state, stdio=False)
    assert f"{state / 'journal.00000002'}: missing beside {state / 'checkpoint'}" in err


def test_a_journal_generation_without_its_checkpoint_refuses_to_start(tmp_path):
    state = _state(tmp_path, checkpoint=True)
    (state / "checkpoint").unlink()
    err = _refused(state, stdio=False)
    assert f"{state / 'journal.00000002'}: journal generation 2 has no checkpoint" in err


def test_a_missing_generation_between_two_refuses_to_start(tmp_path):
    state = _state(tmp_path, checkpoint=True)
    (state / "journal.00000003").write_bytes(b"")
    (state / "journal.00000002").unlink()
    (state / "journal.00000004").write_bytes(b"")
    err = _refused(state, stdio=False)
    assert "journal.00000002" in err


def test_a_missing_fleet_snapshot_refuses_to_start(tmp_path):
    state = _state(tmp_path, checkpoint=True)
    (snapshot,) = state.glob("fleet.*.a3snap")
    snapshot.unlink()
    err = _refused(state, stdio=True)
    assert f"{snapshot}: the fleet snapshot named by {state / 'checkpoint'} is missing" in err


def test_a_checkpoint_field_of_the_wrong_type_refuses_to_start_naming_the_file_and_the_field(tmp_path):
    """A checkpoint whose frame holds (rewritten with its checksum) is still checked field by field
    (every field of both owners: tests/durable/test_durable_fleet.py)."""
    from a3fast.durable.journal import read_entries

    field, value = "next_seq", 2.5
    state = _state(tmp_path, checkpoint=True)
    checkpoint = state / "checkpoint"
    (payload,) = read_entries(checkpoint.read_bytes()).entries
    checkpoint.write_bytes(frame(orjson.dumps({**orjson.loads(payload), field: value})))
    err = _refused(state, stdio=False)
    assert err.startswith(f"a3fast: cannot start: {checkpoint}: field {field!r}: "), err
    assert len(err.strip().splitlines()) == 1, err


def test_a_torn_tail_in_a_generation_before_the_last_refuses_to_start(tmp_path):
    state = _state(tmp_path)
    journal = state / "journal.00000001"
    with open(journal, "ab") as fh:
        fh.write(frame(orjson.dumps({"op": "put"}))[:6])
    (state / "journal.00000002").write_bytes(b"")
    err = _refused(state, stdio=False)
    assert f"{journal}: the last 6 bytes" in err and "a later generation follows" in err


def _old_layout(state: Path) -> None:
    """A state directory of the layout before journal generations: a fleet of "kept" ("gone" was
    removed), a trace of one record, and a journal that adds "later", holds "s" on "kept" and adds
    "gone" again."""
    import zlib

    from a3fast import Fleet
    from a3fast.durable.journal import encode_change

    state.mkdir()
    fleet = Fleet()
    fleet.add(decl("kept"))
    fleet.add(decl("gone"))
    fleet.remove("gone")
    fleet.save(state / "fleet.0123456789abcdef.a3snap")
    trace = b'{"seq":1}\n'
    (state / "trace.jsonl").write_bytes(trace)
    (state / "snapshot").write_bytes(frame(orjson.dumps({
        "format": 3, "fleet": "fleet.0123456789abcdef.a3snap", "names": ["kept", "gone"], "outcomes": [],
        "sessions": [], "next_seq": 2, "trace_bytes": len(trace), "trace_tail_crc": zlib.crc32(trace)})))
    (state / "journal").write_bytes(frame(encode_change("put", decls=[decl("later")]))
                                    + frame(encode_change("hold", agent="kept", session="s"))
                                    + frame(encode_change("put", decls=[decl("gone")])))


def test_a_state_directory_of_the_layout_before_generations_is_moved_and_keeps_everything(tmp_path):
    """`snapshot` (format 3, naming a fleet snapshot file) and one `journal` become a checkpoint at
    generation 1 and `journal.00000001`; the fleet, the trace and the journal's changes are kept."""
    from a3fast.service.state import ServiceState

    state = tmp_path / "old"
    _old_layout(state)
    st = ServiceState(state, log=lambda message: None)
    st.open()
    try:
        assert st.fleet.names() == ["kept", "gone", "later"]      # "gone" took back its place
        assert st.fleet.holds_session("kept", "s") and st.next_seq == 2
    finally:
        st.close()
    assert sorted(p.name for p in state.iterdir()) == ["checkpoint", "fleet.00000002.a3snap",
                                                       "journal.00000002", "lock", "trace.jsonl"]


@pytest.mark.parametrize("field, value, found", [
    ("next_seq", ..., "nothing"), ("trace_bytes", "12", "string '12'"), ("trace_tail_crc", 1 << 32, str(1 << 32)),
    ("next_seq", 0, "0"), ("fleet", "", "string ''"), ("fleet", "..", "string '..'"),
    ("fleet", "../elsewhere.a3snap", "string '../elsewhere.a3snap'"), ("fleet", "/tmp/x.a3snap", "string '/tmp/x.a3snap'"),
    # the directory's own files, which would be moved over the fleet snapshot
    ("fleet", "trace.jsonl", "string 'trace.jsonl'"), ("fleet", "journal", "string 'journal'"),
    ("fleet", "snapshot", "string 'snapshot'"), ("fleet", "journal.00000001", "string 'journal.00000001'")])
def test_an_old_layout_snapshot_missing_a_field_is_refused_before_anything_moves(tmp_path, field, value, found):
    state = tmp_path / "old"
    _old_layout(state)
    snapshot = state / "snapshot"
    document = orjson.loads(read_entries(snapshot.read_bytes(), str(snapshot)).entries[0])
    if value is ...:
        del document[field]
    else:
        document[field] = value
    snapshot.write_bytes(frame(orjson.dumps(document)))
    before = sorted(p.name for p in state.iterdir())
    err = _refused(state, stdio=True)
    assert f"{snapshot}: field {field!r}: expected " in err and f"found {found}; restore" in err
    assert "KeyError" not in err and "Traceback" not in err
    assert sorted(p.name for p in state.iterdir() if p.name != "lock") == before       # nothing renamed


def test_the_move_to_journal_generations_stopped_at_any_step_is_finished_by_the_next_start(tmp_path):
    """Killed before each filesystem step of a start that moves the old layout (and takes its first
    checkpoint), in turn: the next start finishes the move and serves the same fleet."""
    import os

    from a3fast.service.state import ServiceState

    expected = None
    for stop_at in range(1, 40):
        state = tmp_path / f"old-{stop_at}"
        _old_layout(state)
        env = {**os.environ, "A3FAST_STOP_AT_STEP": str(stop_at)}
        run = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--stdio", "--state", str(state)],
                             input="", capture_output=True, text=True, timeout=60, env=env)
        if run.returncode == 0:
            break       # the start took fewer steps than this: every step was stopped before
        assert run.returncode == -9, (stop_at, run.returncode, run.stderr)
        st = ServiceState(state, log=lambda message: None)
        st.open()
        try:
            found = (st.fleet.names(), st.fleet.holds_session("kept", "s"), st.next_seq)
        finally:
            st.close()
        assert found == (["kept", "gone", "later"], True, 2), stop_at
        expected = found
    assert expected is not None and stop_at > 3


def test_an_old_layout_snapshot_naming_a_missing_fleet_file_is_refused_before_anything_moves(tmp_path):
    state = tmp_path / "old"
    _old_layout(state)
    snapshot = state / "snapshot"
    document = orjson.loads(read_entries(snapshot.read_bytes(), str(snapshot)).entries[0])
    document["fleet"] = "fleet.00000000ffffffff.a3snap"
    snapshot.write_bytes(frame(orjson.dumps(document)))
    before = sorted(p.name for p in state.iterdir())
    err = _refused(state, stdio=True)
    assert f"{state / 'fleet.00000000ffffffff.a3snap'}: missing" in err
    assert sorted(p.name for p in state.iterdir() if p.name != "lock") == before


def _placed_state(tmp_path: Path) -> Path:
    """A state directory whose journal holds three agents and then two placements."""
    state = tmp_path / "state"
    s = Server("--state", str(state))
    for k in range(3):
        assert s.client.put(f"/v1/agents/r{k}", json=decl(f"r{k}")).status_code == 200
    task = {"requirements": {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 1}]}}
    for _ in range(2):
        assert s.client.post("/v1/place", json=task).status_code == 200
    s.kill()
    return state


def test_a_placement_entry_copied_after_itself_refuses_to_start_never_a_trace_that_repeats_seqs(tmp_path):
    state = _placed_state(tmp_path)
    journal = state / "journal.00000001"
    data = journal.read_bytes()
    last = read_entries(data).offsets[-1]
    journal.write_bytes(data + data[last:])
    err = _refused(state, stdio=True)
    assert f"{journal}: entry 6 (generation 1, byte " in err, err
    assert "unreadable: its trace line 1 is the record of seq 4 where the trace goes on from seq 7" in err


@pytest.mark.parametrize("lines, reason", [
    (b"not json at all", "its trace lines do not end with a whole record"),
    (b'{"seq":7}\n', "its trace line 1 is not a record as this service writes one"),
    (b'{"seq":7,"kind":"task.submitted","content":{}}\n{"seq":9,"kind":"task.rejected","content":{}}\n',
     "its trace line 2 is the record of seq 9 where the trace goes on from seq 8"),
])
def test_a_trace_entry_whose_lines_are_not_the_next_records_refuses_to_start(tmp_path, lines, reason):
    state = _placed_state(tmp_path)
    journal = _append(state, b"Tnull\n" + lines)
    err = _refused(state, stdio=False)
    assert f"{journal}: entry 6 (generation 1, byte " in err and reason in err, err


def test_a_checkpoint_whose_next_seq_is_not_where_its_trace_ends_refuses_to_start(tmp_path):
    state = _placed_state(tmp_path)
    s = Server("--state", str(state))        # a clean stop takes a checkpoint: next_seq 7
    assert s.stop() == 0
    checkpoint = state / "checkpoint"
    (payload,) = read_entries(checkpoint.read_bytes()).entries
    assert orjson.loads(payload)["next_seq"] == 7
    checkpoint.write_bytes(frame(orjson.dumps({**orjson.loads(payload), "next_seq": 1})))
    err = _refused(state, stdio=True)
    assert "trace.jsonl: the trace the checkpoint covers ends with the record of seq 6 where the checkpoint " \
           "goes on from seq 1" in err, err


@pytest.mark.parametrize("name", ["journal", "journal.00000001"])
def test_another_programs_file_named_as_a_journal_is_refused_and_left_as_it_was(tmp_path, name):
    state = tmp_path / "state"
    state.mkdir()
    foreign = state / name
    foreign.write_bytes(b"2026-12-06 started\n2026-12-06 stopped\nnot ours\n")
    err = _refused(state, stdio=True)
    assert f"{foreign}: not an a3fast journal (it does not begin with A3J1)" in err, err
    assert foreign.read_bytes() == b"2026-12-06 started\n2026-12-06 stopped\nnot ours\n"


def test_a_first_write_cut_short_as_zeros_is_a_torn_tail_not_another_programs_file():
    # a crash while the file grew leaves zeros where the entry's bytes were to come
    recovered = read_entries(b"\0" * 40, "journal.00000001")
    assert (recovered.entries, recovered.good_bytes, recovered.cut_bytes) == ([], 0, 40)


def _stdio(state: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--stdio", "--state", str(state)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _ask(proc: subprocess.Popen, request: dict) -> dict:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(orjson.dumps(request) + b"\n")
    proc.stdin.flush()
    return orjson.loads(proc.stdout.readline())


def test_a_state_directory_another_process_owns_is_refused_and_the_owner_loses_nothing(tmp_path):
    # two owners would each checkpoint and retire the journal generation the other appends to
    state = tmp_path / "state"
    owner = _stdio(state)
    try:
        assert _ask(owner, {"op": "put_agent", "id": 1, "name": "a1", "declaration": decl("a1")})["ok"]
        err = _refused(state, stdio=True)
        assert f"{state / 'lock'}: the state directory is in use by another a3fast process (pid {owner.pid})" in err
        err = _refused(state, stdio=False)          # over HTTP too
        assert "in use by another a3fast process" in err
        assert _ask(owner, {"op": "put_agent", "id": 2, "name": "a2", "declaration": decl("a2")})["ok"]
    finally:
        owner.stdin.close()
        assert owner.wait(timeout=30) == 0
    # the owner gone, its lock is too: the next process starts, with everything acknowledged
    after = _stdio(state)
    try:
        assert _ask(after, {"op": "list_agents", "id": 3})["names"] == ["a1", "a2"]
    finally:
        after.stdin.close()
        after.wait(timeout=30)


def test_a_killed_owner_leaves_no_lock_behind(tmp_path):
    state = tmp_path / "state"
    owner = _stdio(state)
    assert _ask(owner, {"op": "put_agent", "id": 1, "name": "k1", "declaration": decl("k1")})["ok"]
    owner.kill()
    owner.wait(timeout=30)
    after = _stdio(state)
    try:
        assert _ask(after, {"op": "list_agents", "id": 2})["names"] == ["k1"]
    finally:
        after.stdin.close()
        after.wait(timeout=30)


def test_a_first_entry_damaged_before_valid_ones_is_damage_not_another_programs_file(tmp_path):
    # told "not an a3fast journal; move it out", an operator would start an empty fleet
    state = _state(tmp_path)
    journal = state / "journal.00000001"
    data = bytearray(journal.read_bytes())
    data[0] ^= 1
    journal.write_bytes(bytes(data))
    err = _refused(state, stdio=True)
    assert f"{journal}: entry 1 at byte 0 is damaged" in err and "a valid entry follows" in err
    assert "not an a3fast journal" not in err


def test_an_old_layout_snapshot_of_another_program_is_refused_as_bad_state_not_an_internal_error(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "snapshot").write_bytes(b"hello, not a3fast\n")
    for stdio in (True, False):
        err = _refused(state, stdio=stdio)
        assert f"{state / 'snapshot'}: not a snapshot of the layout before journal generations" in err
        assert "internal error" not in err


def test_a_new_state_directory_is_fsynced_into_each_parent_made_for_it(tmp_path):
    import os

    log = tmp_path / "steps.log"
    state = tmp_path / "new" / "parent" / "state"
    run = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--stdio", "--state", str(state)], input=b"",
                         capture_output=True, timeout=60, env={**os.environ, "A3FAST_STEP_LOG": str(log)})
    assert run.returncode == 0, run.stderr
    fsynced = [line.split(" ", 2)[2] for line in log.read_text().splitlines() if line.split(" ")[1] == "fsync-dir"]
    made = [str(tmp_path), str(tmp_path / "new"), str(tmp_path / "new" / "parent")]
    assert fsynced[:3] == made


def _limited_serve(state: Path) -> subprocess.CompletedProcess:
    import resource

    def limit():      # 1.5 GiB of address space: a state file read whole past it fails the start
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))
    return subprocess.run([sys.executable, "-m", "a3fast", "serve", "--stdio", "--state", str(state)], input=b"",
                          capture_output=True, timeout=120, preexec_fn=limit)


def test_a_state_file_that_is_a_device_is_refused_not_read_without_end(tmp_path):
    state = _state(tmp_path, checkpoint=True)
    snapshot = next(state.glob("fleet.*.a3snap"))
    for victim in (snapshot, state / "checkpoint", state / "journal.00000002"):
        kept = victim.read_bytes()
        victim.unlink()
        victim.symlink_to("/dev/zero")
        run = _limited_serve(state)
        assert run.returncode == 2, (victim, run.returncode, run.stderr[-300:])
        assert f"{victim}: not a regular file".encode() in run.stderr
        victim.unlink()
        victim.write_bytes(kept)


def test_a_huge_file_in_place_of_a_snapshot_or_checkpoint_is_refused_from_its_first_bytes(tmp_path):
    state = _state(tmp_path, checkpoint=True)
    snapshot = next(state.glob("fleet.*.a3snap"))
    with open(snapshot, "wb") as fh:          # 2 GiB, sparse: no snapshot mark
        fh.write(b"GARBAGE!")
        fh.truncate(2 << 30)
    run = _limited_serve(state)
    assert run.returncode == 2 and b"does not start with the snapshot mark" in run.stderr, run.stderr[-300:]
    checkpoint = state / "checkpoint"
    with open(checkpoint, "r+b") as fh:
        fh.truncate(2 << 30)
    run = _limited_serve(state)
    assert run.returncode == 2 and b"more than any a3fast writes there" in run.stderr, run.stderr[-300:]


@pytest.mark.parametrize("stdio", [False, True], ids=["http", "stdio"])
def test_a_directory_in_place_of_a_state_file_is_named_in_the_systems_words(tmp_path, stdio):
    # Python's form was printed: "[Errno 21] Is a directory: '.../checkpoint'"; and a snapshot that
    # cannot be read asked for the state to be restored from a copy, where its file is what to fix
    state = _state(tmp_path, checkpoint=True)
    snapshot = next(state.glob("fleet.*.a3snap"))
    kept = snapshot.read_bytes()
    snapshot.unlink()
    snapshot.mkdir()
    err = _refused(state, stdio=stdio)
    assert err.endswith(f"a3fast: cannot start: {snapshot}: cannot read the fleet snapshot the checkpoint "
                        f"names: Is a directory\n"), err
    snapshot.rmdir()
    snapshot.write_bytes(kept)
    fresh = tmp_path / "fresh"
    (fresh / "checkpoint").mkdir(parents=True)
    err = _refused(fresh, stdio=stdio)
    assert err.endswith(f"a3fast: cannot start: {fresh / 'checkpoint'}: Is a directory\n"), err
