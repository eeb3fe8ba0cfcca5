"""Requirements from their JSON text: a place request's `requirements` member is kept as its text
and looked up in a bounded cache of prepared Requirements (prepared.py, docs/service.md
"Prepared requirements"). A hit places exactly what parsing the document would have placed, on
both engines; the cache stays within its bound; and whatever the text, a bad member gets the
answer it got before the cache existed."""
from __future__ import annotations

import io
import re

import orjson
import pytest

from a3fast.errors import SchemaError
from a3fast.schema import Requirements, parse_declaration, parse_requirements
from a3fast.service import stdio
from a3fast.service.operations import Operations, PreparedPlace, decode_place_request
from a3fast.prepared import MAX_ENTRIES, MAX_SEEN, MAX_TEXT_BYTES, PreparedRequirements
from a3fast.service.state import ServiceState
from a3fast.workload import generate_fleet, generate_tasks

FLEET = generate_fleet(40, seed=11)
TASKS = generate_tasks(FLEET, 12, seed=11)
_TIMINGS = re.compile(rb',?"timings":\{[^{}]*\}')


def _served(lines: list[bytes], engine: str, monkeypatch=None, general: bool = False) -> bytes:
    """The stdio answers to `lines` on a fresh service over FLEET (measured timings taken out);
    `general`: every request read the general way (a dict, parsed by parse_requirements)."""
    if general:
        monkeypatch.setattr(stdio, "decode_place_request", lambda line: None)
    state = ServiceState(engine=engine)
    state.open()
    try:
        state.put_agents([parse_declaration(d) for d in FLEET])
        out = io.BytesIO()
        data = b"\n".join(lines) + b"\n"
        stdio.serve_stdio_sync(Operations(state, stream=True), io.BytesIO(data), out, len(data) + 1)
        return _TIMINGS.sub(b"", out.getvalue())
    finally:
        state.close()
        if monkeypatch is not None:
            monkeypatch.undo()


def _places(tasks, form: str = "compact") -> list[bytes]:
    return [orjson.dumps({"op": "place", "id": i, "requirements": t, "record": form}) for i, t in enumerate(tasks)]


@pytest.mark.parametrize("form", ["spec", "compact", "compact-stream"])
def test_a_cache_hit_places_and_records_what_parsing_the_document_does(engine, form, monkeypatch):
    # every task three times: a miss, then hits (the same prepared object placed again)
    lines = _places(TASKS * 3, form)
    cached = _served(lines, engine)
    parsed = _served(lines, engine, monkeypatch, general=True)
    assert cached.count(b"\n") == len(lines)
    assert cached == parsed


def _admitted(cache: PreparedRequirements, text: bytes) -> Requirements:
    """The requirements of `text`, kept: a text is kept from its second sighting on."""
    cache.get(text)
    return cache.get(text)


def test_a_repeated_requirements_text_is_the_same_prepared_object():
    cache = PreparedRequirements()
    text = orjson.dumps(TASKS[0])
    seen = cache.get(text)                 # the first sighting: parsed, only its hash remembered
    assert type(seen) is Requirements and len(cache) == 0
    kept = cache.get(text)                 # the second: parsed again and kept
    assert kept is not seen and kept == seen and len(cache) == 1
    assert cache.get(bytes(text)) is kept                        # equal bytes, not the same object
    assert kept == parse_requirements(TASKS[0])
    respelt = orjson.dumps(TASKS[0], option=orjson.OPT_INDENT_2)   # another spelling: its own entry
    again = _admitted(cache, respelt)
    assert again is not kept and again == kept
    assert len(cache) == 2


def test_a_text_seen_once_leaves_nothing_kept_and_the_seen_hashes_are_bounded():
    cache = PreparedRequirements(max_seen=4)
    texts = [b'{"kind":"once-%d"}' % i for i in range(10)]
    for t in texts:
        cache.get(t)
    assert len(cache) == 0 and len(cache._seen) <= 4
    assert MAX_SEEN == 16384


def test_an_operation_places_a_repeated_task_as_one_prepared_object():
    state = ServiceState()
    state.open()
    try:
        ops = Operations(state)
        line = orjson.dumps({"op": "place", "requirements": TASKS[1]})
        _, two, three = (ops.prepared_place(decode_place_request(line)) for _ in range(3))
        assert type(two) is PreparedPlace and type(three) is PreparedPlace
        assert two.requirements is three.requirements
    finally:
        state.close()


def test_the_cache_keeps_at_most_its_bound_least_recently_used_out():
    cache = PreparedRequirements(max_entries=3)
    texts = [orjson.dumps({"v": "1.0", "kind": f"k{i}"}) for i in range(5)]
    kept = [_admitted(cache, t) for t in texts[:3]]
    assert cache.get(texts[0]) is kept[0]          # used again: now the most recent
    _admitted(cache, texts[3])                      # evicts texts[1], the least recently used
    assert len(cache) == 3
    assert cache.get(texts[0]) is kept[0]
    assert cache.get(texts[2]) is kept[2]
    assert cache.get(texts[1]) is not kept[1]      # parsed again
    for t in texts:
        _admitted(cache, t)
    assert len(cache) == 3


def test_the_default_bound_is_the_documented_one():
    assert (MAX_ENTRIES, MAX_TEXT_BYTES) == (4096, 4096)
    cache = PreparedRequirements()
    for i in range(MAX_ENTRIES + 100):
        _admitted(cache, b'{"kind":"k%d"}' % i)
    assert len(cache) == MAX_ENTRIES


def test_a_text_past_the_size_bound_is_parsed_each_time_and_not_kept():
    cache = PreparedRequirements(max_text_bytes=64)
    long_text = orjson.dumps({"v": "1.0", "kind": "k" * 100})
    first = _admitted(cache, long_text)
    assert cache.get(long_text) is not first and cache.get(long_text) == first
    assert len(cache) == 0


def test_bad_requirements_are_refused_every_time_and_never_kept():
    cache = PreparedRequirements()
    text = b'{"capabilities": 7}'
    with pytest.raises(SchemaError) as direct:
        parse_requirements({"capabilities": 7})
    for _ in range(2):
        with pytest.raises(SchemaError) as raised:
            cache.get(text)
        assert [str(p) for p in raised.value.problems] == [str(p) for p in direct.value.problems]
    assert len(cache) == 0


#: `requirements` members the typed reading must hand to the general path, or refuse as it would:
#: not an object, duplicate keys, values JSON or the document rule refuses, bounds
BAD_MEMBERS = [b"7", b"null", b"[]", b'"text"', b"true",
               b'{"capabilities": 7}', b'{"kind": "a", "kind": 7}', b'{"v": "1.0", "v": "2"}',
               b'{"x": 1e400}', b'{"x": "\xff\xfe"}', b'{"x": "\\ud800"}', b'{"x": 18446744073709551616}',
               b'{"x": ' + b"[" * 40 + b"]" * 40 + b"}", b'{"kind": "' + b"k" * 70_000 + b'"}',
               b'{"capabilities": [{"name": "a.b", "version": -1}]}', b'{"clearances": ["NOT AN ID"]}',
               b'{"exclude": "agent"}', b'{"model": {"latency_class": "warp"}}', b"{", b'{"a": }']


def test_bad_requirements_members_get_the_answers_the_general_path_gives(engine, monkeypatch):
    lines = []
    for i, member in enumerate(BAD_MEMBERS):
        for repeat in range(2):            # twice: a refusal is not kept as an answer
            lines.append(b'{"op": "place", "id": "%d-%d", "requirements": %b}' % (i, repeat, member))
    lines.append(_places(TASKS[:1])[0])
    typed = _served(lines, engine)
    general = _served(lines, engine, monkeypatch, general=True)
    assert typed.count(b"\n") == len(lines)
    assert typed == general
    answers = [orjson.loads(a) for a in typed.splitlines()]
    assert [a["ok"] for a in answers] == [False] * (len(lines) - 1) + [True]
    assert all(a["status"] in (400, 413) for a in answers[:-1])


def test_pods_of_one_workload_share_their_prepared_requirements():
    """The extender reads a pod's requirements annotation through a cache of its own, keyed on the
    annotation's text: the pods of one workload carry the same text and are placed as one prepared
    object; a bad annotation is refused each time with the same message."""
    pytest.importorskip("kubernetes")
    from test_k8s_extender import pod

    from a3fast.service.k8s import _NODE, ExtenderError, pod_requirements

    task = {**TASKS[0], "kind": "pods-of-one-workload"}
    _, second, third = (pod_requirements(_NODE.decode(orjson.dumps(pod(task, uid=f"uid-{i}")))) for i in range(3))
    assert second is third and second == parse_requirements(task)
    bad = _NODE.decode(orjson.dumps(pod({"capabilities": 7})))
    messages = []
    for _ in range(2):
        with pytest.raises(ExtenderError) as refused:
            pod_requirements(bad)
        messages.append(str(refused.value))
    assert messages[0] == messages[1] and "a3.dev/requirements" in messages[0]
