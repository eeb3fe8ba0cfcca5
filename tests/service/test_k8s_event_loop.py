"""No /k8s request holds the event loop: a NodeNames body of 3,000,000 names (46.9 MB, under the
default --max-k8s-body) is decoded, matched, answered and hashed on the worker thread in slices,
and /healthz keeps answering meanwhile. The sliced path gives the bytes of the inline one."""
from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from a3fast.service import k8s
from a3fast.service.k8s import BadArgs, decode_args, decode_large_args

pytest.importorskip("starlette")

from service_process import SECTION_10_TASK, Server, healthz_latencies_while  # noqa: E402

POD = {"metadata": {"name": "p", "namespace": "default", "uid": "u-big",
                    "annotations": {"a3.dev/requirements": orjson.dumps(SECTION_10_TASK).decode()}}}

#: The target is 20 ms (docs/service.md, "Limits"); the bound leaves room for a machine shared with
#: other work, while a loop held for the request (seconds today's way) still fails it.
MAX_BOUND_S = 0.5


def _awkward_names(n: int) -> list[str]:
    """Names whose JSON has quotes, backslashes and commas where a cut could land."""
    shapes = ['plain-{}', 'q"uote-{}', 'back\\\\slash-{}\\', ',lead-comma-{}', 'trail-{}\\"', '",{}",', 'üñí-{}']
    return [shapes[k % len(shapes)].format(k) for k in range(n)]


@pytest.mark.parametrize("spacing", ["", " ", "\n  "])
def test_names_decoded_in_pieces_are_the_names_decoded_whole(monkeypatch, spacing):
    monkeypatch.setattr(k8s, "PIECE_BYTES", 64)
    names = _awkward_names(3000)
    inner = ("," + spacing).join(orjson.dumps(n).decode() for n in names)
    body = ('{"Pod":' + orjson.dumps(POD).decode() + ',"Nodes":null,"NodeNames":[' + spacing + inner + spacing + "]}").encode()
    assert decode_large_args(body).names == decode_args(body).names == names


@pytest.mark.parametrize("tail", ['1]}', '"a",{}]}', '"unterminated]}'])
def test_a_bad_name_is_the_same_error_decoded_in_pieces(monkeypatch, tail):
    monkeypatch.setattr(k8s, "PIECE_BYTES", 64)
    body = ('{"Pod":' + orjson.dumps(POD).decode() + ',"Nodes":null,"NodeNames":['
            + ",".join(orjson.dumps(n).decode() for n in _awkward_names(500)) + "," + tail).encode()
    with pytest.raises(BadArgs) as whole:
        decode_args(body)
    with pytest.raises(BadArgs) as pieces:
        decode_large_args(body)
    assert pieces.value.problems == whole.value.problems


def test_the_sliced_answer_and_digest_are_the_inline_ones(monkeypatch):
    monkeypatch.setattr(k8s, "SLICE", 7)
    names = _awkward_names(100)
    live = frozenset(names[1::3] + names[2::3])
    agents, strays = k8s._split_in_slices(names, live)
    assert agents == [n for n in names if n in live] and sum(strays, []) == names[::3]
    failures = {names[1]: "clearance:orders.read", names[5]: "residency:eu"}
    unresolvable = {**{n: k8s.NOT_AN_AGENT for n in names[::3]}, **failures}
    passed = [n for n in names if n not in unresolvable]
    body, digest = k8s._answer_in_slices(agents, strays, failures, b"req", b"choice")
    assert body == k8s._names_result(passed, unresolvable)
    import hashlib
    assert digest == hashlib.blake2b(b"req" + body + b"choice", digest_size=16).digest()
    totals = {names[0]: 0.5, names[5]: 0.123}
    assert k8s._scores_in_slices(names, totals) == orjson.dumps(
        [{"Host": h, "Score": int(round(totals.get(h, 0.0) * 10))} for h in names])
    assert k8s._scores_in_slices([], {}) == b"[]"
    assert k8s._answer_in_slices([], [], {}, b"", b"")[0] == k8s._names_result([], {})


POSTER = """
import sys, httpx
data = open(sys.argv[2], "rb").read()
r = httpx.post(sys.argv[1] + "/k8s/filter", content=data, timeout=300)
doc = r.json()
print(r.status_code, len(doc["NodeNames"]), len(doc["FailedAndUnresolvableNodes"]), flush=True)
"""


@pytest.mark.slow
def test_healthz_answers_while_a_filter_of_3_000_000_names_runs(tmp_path):
    names = [f"node-{k:07d}a" for k in range(3_000_000)]
    body = orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": names})
    assert 46e6 < len(body) <= 48 * 1024 * 1024, len(body)
    (tmp_path / "body.json").write_bytes(body)
    del body
    agents = [{"v": "1.0", "agent": {"name": names[k], "namespace": "support"},
               "capabilities": [{"name": "order.investigate", "version": 2}],
               "clearances": ["orders.read"], "residency": ["eu"]} for k in range(0, 3_000_000, 600)]
    s = Server()
    try:
        lines = b"\n".join(orjson.dumps(a) for a in agents)
        assert s.client.post("/v1/agents", content=lines).status_code == 200
        poster = subprocess.Popen([sys.executable, "-c", POSTER, s.url, str(tmp_path / "body.json")],
                                  stdout=subprocess.PIPE, text=True)
        latencies = healthz_latencies_while(s.url, poster, seconds=240, pause=0.02)
        out = poster.communicate(timeout=60)[0].split()
        assert out == ["200", "5000", str(3_000_000 - 5000)]
        assert len(latencies) > 20, "the filter ended before /healthz was asked enough to tell"
        print(f"/healthz during the filter: {len(latencies)} asked, slowest (ms): "
              f"{[round(x * 1000) for x in sorted(latencies)[-8:]]}")
        assert max(latencies) < MAX_BOUND_S, sorted(latencies)[-5:]
    finally:
        s.stop()
