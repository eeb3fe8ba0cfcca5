"""`a3fast replay` over the traces of several replicas of the Kubernetes extender, as kube-scheduler
makes them: each replica writes its own trace (its seq starting at 1), a retried pod can be recorded
by two replicas, and the replay reports them as one — counts that add up, thresholds judged on the
sum, each change named by its trace — while replaying each trace as its own sequence."""
from __future__ import annotations

import random
import subprocess
import sys

import orjson
import pytest

pytest.importorskip("starlette")
pytest.importorskip("kubernetes")

from kubernetes.client import V1Container, V1Node, V1NodeStatus, V1ObjectMeta, V1Pod, V1PodSpec  # noqa: E402
from kubernetes.client import V1ResourceRequirements  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

import a3fast  # noqa: E402
from a3fast.replay import run_replay, run_replays  # noqa: E402
from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from a3fast.workload import generate_fleet, generate_tasks  # noqa: E402
from k8s_extender_client import ExtenderClient, serialise  # noqa: E402
from waiting import until  # noqa: E402

PODS = 160
#: Pods kube-scheduler retries: the second attempt goes to the other replica (same UID, both traces).
RETRIED = 20


def pod(requirements, uid, name):
    return serialise(V1Pod(
        api_version="v1", kind="Pod",
        metadata=V1ObjectMeta(name=name, namespace="default", uid=uid,
                              annotations={"a3.dev/requirements": orjson.dumps(requirements).decode()}),
        spec=V1PodSpec(containers=[V1Container(name="c", image="busybox",
                                               resources=V1ResourceRequirements(limits={"a3.dev/agent": "1"}))])))


def node(name):
    return serialise(V1Node(metadata=V1ObjectMeta(name=name), status=V1NodeStatus(allocatable={"cpu": "4"})))


def a3(*args, cwd, input=None):
    return subprocess.run([sys.executable, "-m", "a3fast", *args], cwd=cwd, capture_output=True, input=input,
                          timeout=300)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    """Two extender replicas serving the same fleet, each writing trace-POD.jsonl; kube-scheduler
    sends each scheduling attempt to one of them, and retries RETRIED pods on the other. Also the
    fleet (JSON Lines) and the fleet with orders.issue revoked."""
    work = tmp_path_factory.mktemp("replicas")
    docs = generate_fleet(60, 7)
    tasks = generate_tasks(docs, PODS, 7)
    rng = random.Random(7)
    nodes = [node(d["agent"]["name"]) for d in docs]
    apps = [create_app(ServiceConfig(trace=work / f"trace-a3fast-{k}.jsonl")) for k in range(2)]
    attempts = {0: 0, 1: 0}
    with TestClient(apps[0]) as first, TestClient(apps[1]) as second:
        clients = [first, second]
        for c in clients:
            until("the replica is ready", lambda: c.get("/readyz").status_code == 200)
            for d in docs:
                assert c.put(f"/v1/agents/{d['agent']['name']}", json=d).status_code == 200
        extenders = [ExtenderClient("http://testserver/k8s/", node_cache_capable=True, client=c) for c in clients]
        for i, task in enumerate(tasks):
            replica = i % 2
            offered = rng.sample(nodes, rng.randint(1, len(nodes)))
            extenders[replica].filter(pod(task, f"uid-{i}", f"pod-{i}"), offered)
            attempts[replica] += 1
            if i < RETRIED:   # the pod was not bound: its next attempt lands on the other replica
                extenders[1 - replica].filter(pod(task, f"uid-{i}", f"pod-{i}"), offered)
                attempts[1 - replica] += 1
    (work / "fleet.jsonl").write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    revoked = [{**d, "clearances": [c for c in d["clearances"] if c != "orders.issue"]} for d in docs]
    (work / "revoked.jsonl").write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in revoked))
    return work, attempts


TRACES = ("trace-a3fast-0.jsonl", "trace-a3fast-1.jsonl")


def test_each_replica_numbers_its_own_trace_from_one(replicas):
    work, _ = replicas
    for name in TRACES:
        first = orjson.loads((work / name).read_bytes().splitlines()[0])
        assert first["seq"] == 1, name


def test_both_replicas_on_their_own_fleet_change_nothing(replicas):
    work, attempts = replicas
    for compare in (("--baseline", "fleet.jsonl"), ()):
        done = a3("replay", *TRACES, "--fleet", "fleet.jsonl", *compare, "--fail-on", "changed>0", "--json",
                  cwd=work)
        assert done.returncode == 0, done.stderr
        answer = orjson.loads(done.stdout)
        # a retried pod is a placement in each trace that recorded it: every attempt counts once
        assert answer["summary"]["placements"] == attempts[0] + attempts[1] == PODS + RETRIED
        assert answer["summary"]["changed"] == 0
        assert answer["traces"] == list(TRACES) and answer["trace"] is None
        assert [(f["trace"], f["summary"]["placements"]) for f in answer["files"]] == \
            [(TRACES[0], attempts[0]), (TRACES[1], attempts[1])]


def test_a_fleet_change_is_reported_per_trace_with_counts_that_add_up(replicas):
    work, _ = replicas
    done = a3("replay", *TRACES, "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--json", "--show",
              "1000", "-o", "changes.jsonl", cwd=work)
    assert done.returncode == 0, done.stderr
    answer = orjson.loads(done.stdout)
    alone = [orjson.loads(a3("replay", t, "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--json",
                             cwd=work).stdout)["summary"] for t in TRACES]
    summary = answer["summary"]
    assert all(s["changed"] > 0 for s in alone), "the revocation changes placements in both traces"
    for key in ("placements", "changed", "knock_on", "offered_new"):
        assert summary[key] == alone[0][key] + alone[1][key], key
    for kind, count in summary["kinds"].items():
        assert count == alone[0]["kinds"][kind] + alone[1]["kinds"][kind], kind
    assert [f["summary"] for f in answer["files"]] == [{k: v for k, v in s.items() if k != "fleet"} for s in alone]
    # every change names its trace; -o holds every change of both, trace after trace
    lines = [orjson.loads(line) for line in (work / "changes.jsonl").read_bytes().splitlines()]
    assert len(lines) == summary["changed"]
    assert [line["trace"] for line in lines] == sorted(line["trace"] for line in lines)
    for name, s in zip(TRACES, alone):
        assert sum(line["trace"] == name for line in lines) == s["changed"]
        seqs = [line["seq"] for line in lines if line["trace"] == name]
        assert seqs == sorted(seqs), "trace order within each trace"
    assert {c["trace"] for c in answer["changes"]} == set(TRACES)
    # on the terminal: each trace's totals, each change named with its trace
    text = a3("replay", *TRACES, "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--show", "50",
              cwd=work).stdout.decode()
    assert f"placements of 2 traces ({TRACES[0]}, {TRACES[1]})" in text
    for name, s in zip(TRACES, alone):
        assert f"of which {name}: {s['placements']:,} placements, {s['changed']:,} would change" in text
        assert f"({name} seq " in text


def test_thresholds_are_judged_on_the_combined_counts(replicas):
    work, _ = replicas
    alone = [orjson.loads(a3("replay", t, "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--json",
                             cwd=work).stdout)["summary"]["changed"] for t in TRACES]
    total = sum(alone)
    assert max(alone) < total
    for rule, code in ((f"changed>={total}", 1), (f"changed>{total}", 0)):
        done = a3("replay", *TRACES, "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--json",
                  "--fail-on", rule, cwd=work)
        assert done.returncode == code, (rule, done.stderr)
        threshold = orjson.loads(done.stdout)["thresholds"][0]
        assert (threshold["measured"], threshold["exceeded"]) == (total, code == 1)


def test_standard_input_is_one_of_the_traces_at_most_once(replicas):
    work, _ = replicas
    done = a3("replay", TRACES[0], "-", "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--json",
              cwd=work, input=(work / TRACES[1]).read_bytes())
    assert done.returncode == 0, done.stderr
    answer = orjson.loads(done.stdout)
    assert [f["trace"] for f in answer["files"]] == [TRACES[0], "standard input"]
    both = orjson.loads(a3("replay", *TRACES, "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--json",
                           cwd=work).stdout)
    assert answer["summary"] == both["summary"]
    twice = a3("replay", "-", "-", "--fleet", "fleet.jsonl", cwd=work, input=b"")
    assert twice.returncode == 2
    assert twice.stderr.decode().strip().splitlines() == [
        "a3fast: -: standard input can be read only once; give the other traces as files"]


def test_a_bad_trace_among_several_is_told_in_one_line_naming_it(replicas):
    work, _ = replicas
    (work / "empty.jsonl").write_bytes(b"")
    cases = [(("empty.jsonl",), "empty.jsonl: the trace holds no placement"),
             (("fleet.jsonl",), "fleet.jsonl"),   # declarations, not a trace
             (("missing.jsonl",), "missing.jsonl: cannot read: No such file or directory"),
             ((TRACES[0],), f"{TRACES[0]}: given twice")]
    for extra, words in cases:
        done = a3("replay", *TRACES, *extra, "--fleet", "fleet.jsonl", "-o", "out.jsonl", cwd=work)
        lines = done.stderr.decode().strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, (extra, done.stderr)
        assert lines[0].startswith("a3fast: ") and words in lines[0], (extra, lines)
        assert "Traceback" not in done.stderr.decode() and not (work / "out.jsonl").exists()
    broken = (work / TRACES[1]).read_bytes() + b'{"seq": 99999, "kind": "task.rejected", "content": {}}\n'
    (work / "broken.jsonl").write_bytes(broken)
    done = a3("replay", TRACES[0], "broken.jsonl", "--fleet", "fleet.jsonl", cwd=work)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("a3fast: broken.jsonl: "), lines


def test_the_page_lists_the_changes_of_every_trace(replicas):
    work, _ = replicas
    done = a3("replay", *TRACES, "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--report",
              "replay.html", cwd=work)
    assert done.returncode == 0, done.stderr
    page = (work / "replay.html").read_text()
    for name in TRACES:
        assert f'data-trace="{name}"' in page and f'id="{name}-seq-' in page
        assert f"<tr><td><code>{name}</code></td>" in page, "each trace's own totals"
    assert 'data-testid="traces"' in page
    one = a3("replay", TRACES[0], "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--report",
             "one.html", cwd=work)
    assert one.returncode == 0 and 'data-testid="traces"' not in (work / "one.html").read_text()


def test_the_python_api_takes_a_list_of_traces(replicas):
    work, attempts = replicas
    fleet = a3fast.Fleet.load_jsonl(work / "fleet.jsonl")
    revoked = a3fast.Fleet.load_jsonl(work / "revoked.jsonl")
    paths = [work / t for t in TRACES]
    verdicts = list(a3fast.replay(paths, revoked, baseline=fleet))
    assert [sum(v.trace == str(p) for v in verdicts) for p in paths] == [attempts[0], attempts[1]]
    combined, each, kept = run_replays(paths, revoked, baseline=fleet)
    assert combined.placements == len(verdicts) and combined.changed == sum(v.changed for v in verdicts)
    for (label, part), path in zip(each, paths):
        alone, _ = run_replay(path, revoked, baseline=fleet)
        assert label == str(path) and (part.placements, part.kinds) == (alone.placements, alone.kinds)
    assert kept and all(v.trace in {str(p) for p in paths} for v in kept)
    assert combined.fleet.digest == each[0][1].fleet.digest
    # the fleets given are left as they were (each trace is placed on its own copies)
    assert list(a3fast.replay(paths, fleet, baseline=fleet)) and all(
        not v.changed for v in a3fast.replay(paths, fleet, baseline=fleet))


def test_compact_traces_are_each_read_with_their_own_snapshots(replicas):
    """The extender writes compact records, each trace carrying its own fleet snapshots: replayed
    together, they give what the same traces in the spec's form give, and so does a mix of both."""
    work, _ = replicas
    spec = []
    for name in TRACES:
        assert b'"a3fast.compact"' in (work / name).read_bytes(), "the replica writes compact records"
        out = f"spec-{name}"
        assert a3("decode", name, "-o", out, cwd=work).returncode == 0
        assert b'"a3fast.compact"' not in (work / out).read_bytes()
        spec.append(out)
    compact = a3("replay", *TRACES, "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--json", cwd=work)
    assert compact.returncode == 0, compact.stderr
    expected = orjson.loads(compact.stdout)["summary"]
    for pair in (spec, [TRACES[0], spec[1]], [spec[0], TRACES[1]]):
        done = a3("replay", *pair, "--fleet", "revoked.jsonl", "--baseline", "fleet.jsonl", "--json", cwd=work)
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout)["summary"] == expected, pair
