"""`a3fast serve --trace FILE`: the file is the service's trace, never one of the files it reads,
and a trace that cannot be written stops the service with the file cut back to its last whole
record (docs/service.md, "The trace file"). Real processes, a real file-size limit."""
from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def _serve(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "a3fast", "serve", "--stdio", *args], capture_output=True,
                          timeout=60, **kwargs)


def test_a_trace_that_is_the_fleet_it_reads_is_refused_and_the_fleet_kept(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes((EXAMPLES / "fleet.jsonl").read_bytes())
    done = _serve("--fleet", str(fleet), "--trace", str(fleet), input=b'{"op":"list_agents","id":1}\n')
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode() == (f"a3fast: --trace {fleet}: it is the file of --fleet, which the service reads; "
                                    f"the trace would replace it\n")
    assert fleet.read_bytes() == (EXAMPLES / "fleet.jsonl").read_bytes()     # where it was emptied


def test_a_trace_among_the_state_directorys_own_files_is_refused_and_the_state_kept(tmp_path):
    # the trace is cut back and appended to: over the checkpoint, the snapshot or the journal it
    # would leave a directory the next start refuses
    state = tmp_path / "state"
    declaration = json.loads((EXAMPLES / "fleet.jsonl").read_bytes().splitlines()[0])
    first = declaration["agent"]["name"]
    put = json.dumps({"op": "put_agent", "id": 1, "name": first, "declaration": declaration}).encode() + b"\n"
    assert _serve("--state", str(state), input=put).returncode == 0
    files = {p.name: p.read_bytes() for p in state.iterdir()}
    for name in ("checkpoint", "lock", next(n for n in files if n.endswith(".a3snap")), "journal.00000099"):
        done = _serve("--state", str(state), "--trace", str(state / name), input=b'{"op":"list_agents","id":1}\n')
        assert done.returncode == 2 and done.stdout == b"", (name, done.stderr)
        assert done.stderr.decode().startswith(f"a3fast: --trace {state / name}: a file of the state directory {state}")
        assert {p.name: p.read_bytes() for p in state.iterdir()} == files
    # by any other way of naming them: through `..`, a link, or in a directory not made yet
    (tmp_path / "link").symlink_to(state / "checkpoint")
    for given in (state / "sub" / ".." / "checkpoint", tmp_path / "link"):
        done = _serve("--state", str(state), "--trace", str(given), input=b'{"op":"list_agents","id":1}\n')
        assert done.returncode == 2 and b"a file of the state directory" in done.stderr, (given, done.stderr)
        assert {p.name: p.read_bytes() for p in state.iterdir()} == files
    fresh = tmp_path / "fresh"
    done = _serve("--state", str(fresh), "--trace", str(fresh / "journal.00000001"), input=b"")
    assert done.returncode == 2 and b"a file of the state directory" in done.stderr
    # its own trace, named, is where the trace goes anyway
    done = _serve("--state", str(state), "--trace", str(state / "trace.jsonl"), input=b'{"op":"list_agents","id":1}\n')
    assert done.returncode == 0 and json.loads(done.stdout)["names"] == [first]


@pytest.mark.parametrize("token, message", [(b"\xff\xfesecret", "the token is not UTF-8 text (byte 0)"),
                                            (b"sec\tret", None),
                                            (b"sec\x00ret", "the token holds a control character at character 3"),
                                            (b"sec\nret", "the token holds a control character at character 3")])
def test_a_token_no_client_could_send_is_refused_at_the_start(tmp_path, token, message):
    path = tmp_path / "token"
    path.write_bytes(token)
    # a TLS file that is missing stops every start after the token is read: what stops it says
    # whether the token passed
    done = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--token-file", str(path),
                           "--tls-cert", str(tmp_path / "missing.pem"), "--tls-key", str(tmp_path / "missing.pem")],
                          capture_output=True, timeout=60)
    if message is None:     # a tab is a header value's own (RFC 9110): the token passes
        assert done.returncode == 2 and b"missing.pem" in done.stderr and str(path).encode() not in done.stderr
        return
    assert done.returncode == 2 and f"a3fast: {path}: {message}" in done.stderr.decode()
    assert b"internal error" not in done.stderr


def test_a_trace_that_fails_under_a_trace_request_of_the_same_batch_still_stops_the_service(tmp_path):
    # the `trace` request flushes the batch's lines first; its failure, logged there, must still
    # keep the batch's placement from being answered as recorded
    trace = tmp_path / "trace.jsonl"
    requirements = json.loads((EXAMPLES / "req.json").read_bytes())
    batch = (json.dumps({"id": 1, "op": "place", "requirements": requirements}) + "\n"
             + json.dumps({"id": 2, "op": "trace"}) + "\n").encode()

    def tiny_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))
    done = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--stdio", "--fleet", str(EXAMPLES / "fleet.jsonl"),
                           "--trace", str(trace)], input=batch, capture_output=True, timeout=60, preexec_fn=tiny_files)
    assert done.returncode == 2, done.stderr
    assert done.stdout == b""           # neither the placement nor the trace answered
    assert b"cannot write the trace: File too large" in done.stderr and b"stopped" in done.stderr


def test_a_trace_that_is_no_regular_file_is_refused_naming_it():
    done = _serve("--trace", "/dev/null", input=b"")
    assert done.returncode == 2
    assert done.stderr.decode().startswith("a3fast: --trace /dev/null: not a regular file")


def test_a_trace_that_cannot_be_written_stops_the_service_and_stays_whole(tmp_path):
    trace = tmp_path / "trace.jsonl"
    requirements = json.loads((EXAMPLES / "req.json").read_bytes())
    limit = 24_000

    def small_files():      # the trace may not grow past `limit` bytes (Python ignores SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    service = subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--stdio", "--fleet",
                                str(EXAMPLES / "fleet.jsonl"), "--trace", str(trace)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=small_files)
    answered = 0
    try:
        for i in range(200):      # one at a time, each answer awaited: each is its own batch
            try:
                service.stdin.write(json.dumps({"id": i, "op": "place", "requirements": requirements}).encode()
                                    + b"\n")
                service.stdin.flush()
            except BrokenPipeError:
                break
            line = service.stdout.readline()
            if not line:
                break
            assert json.loads(line)["ok"] is True
            answered += 1
        service.stdin.close()
        assert service.wait(timeout=60) == 2
        stderr = service.stderr.read().decode()
    finally:
        if service.poll() is None:
            service.kill()
    assert 0 < answered < 200
    assert f"a3fast: {trace}: cannot write the trace: File too large; it ends at its last whole record" in stderr
    assert "Traceback" not in stderr and "output" not in stderr      # where it blamed standard output
    assert trace.stat().st_size <= limit
    verified = subprocess.run([sys.executable, "-m", "a3fast", "verify", str(trace)], capture_output=True,
                              timeout=60)
    assert verified.returncode == 0, verified.stdout + verified.stderr     # no record cut in half
    records = [json.loads(line) for line in trace.read_bytes().splitlines()]
    assert sum(1 for r in records if r["kind"] in ("task.bound", "task.rejected")) == answered


def test_with_a_journal_a_trace_that_cannot_be_written_is_cut_back_and_named(tmp_path):
    # the journal's commit writes the trace lines too: it cut back only the journal, left half a
    # record in the trace and named the journal
    trace = tmp_path / "state" / "trace.jsonl"
    requirements = json.loads((EXAMPLES / "req.json").read_bytes())
    limit = 24_000

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    service = subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--stdio", "--state", str(tmp_path / "state"),
                                "--fleet", str(EXAMPLES / "fleet.jsonl")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=small_files)
    answers = []
    try:
        for i in range(200):
            service.stdin.write(json.dumps({"id": i, "op": "place", "requirements": requirements}).encode() + b"\n")
            service.stdin.flush()
            answers.append(json.loads(service.stdout.readline()))
            if not answers[-1]["ok"]:
                break
        service.stdin.close()
        service.wait(timeout=60)
    finally:
        if service.poll() is None:
            service.kill()
    placed = sum(1 for a in answers if a["ok"])
    assert 0 < placed < 200 and answers[-1]["status"] == 503
    assert answers[-1]["problems"][0]["found"].startswith(f"writing {trace} failed: File too large")
    verified = subprocess.run([sys.executable, "-m", "a3fast", "verify", str(trace)], capture_output=True, timeout=60)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    records = [json.loads(line) for line in trace.read_bytes().splitlines()]
    assert sum(1 for r in records if r["kind"] in ("task.bound", "task.rejected")) == placed


_OVERLAPPING = r'''
import asyncio, json, os, resource, sys, time
from pathlib import Path
from a3fast.durable import journal
from a3fast.service.operations import Operations
from a3fast.service.state import ServiceState

write = journal.Journal._write
def slower_disk(self, writes, fsync):      # commits take long enough for placements to queue behind one
    time.sleep(0.005)
    return write(self, writes, fsync)
journal.Journal._write = slower_disk

examples, directory = Path(sys.argv[1]), Path(sys.argv[2])
declarations = [json.loads(line) for line in (examples / "fleet.jsonl").read_text().splitlines() if line.strip()]
requirements = json.loads((examples / "req.json").read_text())
state = ServiceState(directory, fsync="group")
state.open()
ops = Operations(state)

async def main():
    await ops.put_agents({"declarations": declarations})
    limit = max(os.path.getsize(state.trace_path), os.path.getsize(state.journal.path)) + 60_000
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    placed = []
    async def one():
        try:
            await ops.place({"requirements": requirements})
            placed.append(1)
        except Exception:
            pass
    tasks = []
    for i in range(400):
        tasks.append(asyncio.create_task(one()))
        if i % 3 == 0:
            await asyncio.sleep(0.0005)
    await asyncio.gather(*tasks)
    return len(placed)

acknowledged = asyncio.run(main())
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))   # room again
state.close(checkpoint=False)
print(acknowledged)
'''


def test_placements_answered_503_never_reach_the_trace_at_the_stop(tmp_path):
    # lines queued behind the commit that failed were written at the stop, once there was room
    # again: the trace held placements its service had refused (58 against 46 acknowledged)
    done = subprocess.run([sys.executable, "-c", _OVERLAPPING, str(EXAMPLES), str(tmp_path / "state")],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    acknowledged = int(done.stdout)
    assert 0 < acknowledged < 400
    trace = tmp_path / "state" / "trace.jsonl"
    records = [json.loads(line) for line in trace.read_bytes().splitlines()]
    assert sum(1 for r in records if r["kind"] in ("task.bound", "task.rejected")) == acknowledged
    seqs = [r["seq"] for r in records]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_an_earlier_trace_is_kept_aside_not_emptied_when_the_service_starts_again(tmp_path):
    # without a state directory a start writes a trace of its own from seq 1; the earlier one was
    # emptied, so a restarted container (the Kubernetes Deployment's trace is named by its pod,
    # which a restart keeps) lost every placement it had recorded
    trace = tmp_path / "trace.jsonl"
    (tmp_path / "trace.1.jsonl").write_bytes(b"someone else's\n")      # never replaced
    request = json.dumps({"id": 1, "op": "place", "requirements": json.loads((EXAMPLES / "req.json").read_bytes())})
    runs = []
    for _ in range(3):
        done = _serve("--fleet", str(EXAMPLES / "fleet.jsonl"), "--trace", str(trace), input=request.encode() + b"\n")
        assert done.returncode == 0, done.stderr
        runs.append((trace.read_bytes(), done.stderr.decode()))
    assert "held an earlier trace" not in runs[0][1]
    assert f"a3fast: {trace} held an earlier trace: kept as {tmp_path}/trace.2.jsonl" in runs[1][1]
    assert f"a3fast: {trace} held an earlier trace: kept as {tmp_path}/trace.3.jsonl" in runs[2][1]
    assert (tmp_path / "trace.1.jsonl").read_bytes() == b"someone else's\n"
    assert (tmp_path / "trace.2.jsonl").read_bytes() == runs[0][0]
    assert (tmp_path / "trace.3.jsonl").read_bytes() == runs[1][0]
    for kept in (trace, tmp_path / "trace.2.jsonl", tmp_path / "trace.3.jsonl"):
        assert json.loads(kept.read_bytes().splitlines()[0])["seq"] == 1
        verified = subprocess.run([sys.executable, "-m", "a3fast", "verify", str(kept)], capture_output=True, timeout=60)
        assert verified.returncode == 0, verified.stdout


def test_an_earlier_trace_that_cannot_be_moved_is_copied_aside_or_the_start_refused(tmp_path, monkeypatch):
    # a trace bind-mounted as a file of its own cannot be linked or renamed (EXDEV, EBUSY): it was
    # emptied before, and moving it aside alone would have stopped the start
    import errno
    import os

    from a3fast.service import state as state_module
    from a3fast.service.state import ServiceState, StateError

    def cannot(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cannot)
    monkeypatch.setattr(os, "rename", cannot)
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b"earlier\n")
    service = ServiceState(trace_path=trace, log=lambda message: None)
    service.open()
    service.close()
    assert (tmp_path / "trace.1.jsonl").read_bytes() == b"earlier\n" and trace.read_bytes() == b""

    def full(source, target):
        raise OSError(errno.ENOSPC, "No space left on device")

    trace.write_bytes(b"later\n")
    monkeypatch.setattr(state_module, "_copy_new", full)
    with pytest.raises(StateError, match=r"trace\.jsonl: held an earlier trace that could not be kept beside it "
                                         r"\(.*trace\.2\.jsonl: No space left on device\)"):
        ServiceState(trace_path=trace, log=lambda message: None).open()
    assert trace.read_bytes() == b"later\n"          # never emptied unkept
    assert not (tmp_path / "trace.2.jsonl").exists()
