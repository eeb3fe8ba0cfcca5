"""The compact record's large members written by the engine (`Index.write_compact_lists`): both
engines write the same bytes, and `Encoder.encode_placement` writes exactly what orjson writes for
the compact member's dict form, byte for byte."""
from __future__ import annotations

import base64
import os

import orjson
import pytest

from a3fast import _pure
from a3fast.engines import NATIVE_AVAILABLE
from a3fast.record.compact import KEY, Decoder, Encoder
from a3fast.record.write import reason_text, timings
from a3fast.roaring import deserialize_ids
from a3fast.schema import parse_requirements
from a3fast.workload import generate_fleet, generate_tasks

from factories import declaration, fleet_of, requirements

if NATIVE_AVAILABLE:
    from a3fast import _core
elif os.environ.get("A3FAST_REQUIRE_NATIVE") == "1":
    pytest.fail("A3FAST_REQUIRE_NATIVE=1 but the a3fast._core extension is not built", pytrace=False)

WEIGHTS = (0.4, 0.3, 0.2, 0.1)
COLUMNS = ("total", "affinity", "success_rate", "cost", "substantiated")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _lists_as_dict(expl, scores) -> dict:
    """The members as the compact format defines them, from the explanation's public methods."""
    out: dict = {"failed": [_b64(expl.failed_roaring(k)) if count else ""
                            for k, count in enumerate(expl.failed_counts())]}
    if scores is not None:
        import numpy as np

        out["scores"] = {"ids": _b64(expl.eligible_roaring()) if len(scores) else "",
                         "columns": [[c, "f64", _b64(np.asarray(getattr(scores, c), dtype="<f8").tobytes())]
                                     for c in COLUMNS]}
    return out


def _index(module, n: int):
    """`n` agents over three rows: dense (two in three agents), sparse (one in 1,000), and empty;
    past 65,536 agents, so that sets span Roaring chunks and hold both container kinds."""
    index = module.Index()
    for _ in range(3):
        index.add_row()
    rows = [[r for r, member in ((0, i % 3 != 0), (1, i % 1000 == 0)) if member] for i in range(n)]
    index.put_many(list(range(n)), [f"agent-{i}" for i in range(n)], rows, [(i % 7) / 7 for i in range(n)])
    return index


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the a3fast._core extension is not built")
@pytest.mark.parametrize("rows", [[0, 1], [1, 0], [0], [2], [], [0, 1, 2]])
@pytest.mark.slow
def test_write_compact_lists_is_the_same_on_both_engines_across_roaring_chunks(rows):
    n = 140_000
    native, pure = _index(_core, n), _index(_pure, n)
    for module, index in ((_core, native), (_pure, pure)):
        expl = index.explain(rows, module.NO_AGENT_REF, [])
        scores = index.score(expl, [], -1, -1, WEIGHTS)
        with_scores, without = index.write_compact_lists(expl, scores), index.write_compact_lists(expl, None)
        assert orjson.loads(b"{" + with_scores + b"}") == _lists_as_dict(expl, scores)
        assert orjson.dumps(_lists_as_dict(expl, scores))[1:-1] == with_scores
        assert orjson.dumps(_lists_as_dict(expl, None))[1:-1] == without
        if module is _core:
            native_bytes = (with_scores, without)
        else:
            assert (with_scores, without) == native_bytes
    # the dense set holds bitmap containers, and every id comes back
    failed = orjson.loads(b"{" + native_bytes[1] + b"}")["failed"]
    if rows[:1] == [0]:
        assert sorted(deserialize_ids(base64.b64decode(failed[0]))) == list(range(0, n, 3))


def test_write_compact_lists_refuses_an_explanation_of_another_index(engine):
    module = _core if engine == "native" else _pure
    if module is _pure:
        pytest.skip("the pure engine's explanations carry no owner")
    a, b = _index(module, 10), _index(module, 10)
    with pytest.raises(ValueError, match="another Index"):
        b.write_compact_lists(a.explain([0], module.NO_AGENT_REF, []), None)


def test_encode_placement_writes_the_compact_members_dict_form_byte_for_byte(engine):
    declarations = generate_fleet(300, 3)
    fleet = fleet_of(engine, declarations, batch=True)
    encoder, decoder = Encoder(), Decoder()
    seq, bound, rejected = 1, 0, 0
    for doc in generate_tasks(declarations, 120, 3):
        p = fleet.place(parse_requirements(doc), remember_session=False)
        records = encoder.encode_placement(seq, p)
        kind, content = records[-1]
        written = orjson.loads(content)
        decoded = decoder.decode_content(seq + len(records) - 1, kind, written)
        member = written[KEY]
        compact = {"format": 1, "fleet": member["fleet"], "filters_passed": list(p.predicates),
                   **_lists_as_dict(p.explanation, p.scores if p.bound else None)}
        tail = {"route": p.route} if p.route is not None else {}
        if p.session is not None:
            # placed with remember_session=False: the task's session is held by no agent
            assert p.session_held is False
            tail["a3fast.session_held"] = False
        tail["timings"] = timings(p)
        if p.bound:
            bound += 1
            compact.update(requirements=p.requirements.doc, declaration=p.declaration.doc, rest=tail)
            expected = {KEY: compact}
        else:
            rejected += 1
            # a3fast's own reason is the one the lists give: the compact form derives it
            compact.update(format=2, derived_reason=True)
            expected = {"code": "unschedulable", "requirements": p.requirements.doc, KEY: compact, **tail}
            assert decoded == p.rejection
        assert orjson.dumps(expected) == content, (kind, seq)
        seq += len(records)
    assert bound and rejected


def test_a_reason_shortened_by_reason_limit_is_kept_and_not_derived(engine):
    declarations = generate_fleet(300, 3)
    fleet = fleet_of(engine, declarations, batch=True)
    encoder = Encoder()
    seq = 1
    for doc in generate_tasks(declarations, 60, 3):
        p = fleet.place(parse_requirements(doc), remember_session=False, reason_limit=1)
        records = encoder.encode_placement(seq, p)
        kind, content = records[-1]
        written = orjson.loads(content)
        if kind == "task.rejected":
            assert written["reason"] == reason_text(p)
            assert written[KEY]["format"] == 1 and "derived_reason" not in written[KEY]
        seq += len(records)


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the a3fast._core extension is not built")
def test_failed_names_joins_the_same_names_on_both_engines_with_any_limit():
    names = ["agent-0", "agént-é", "名前", "a\"b", "z"] + [f"agent-{i}" for i in range(5, 200)]
    texts = []
    for module in (_core, _pure):
        index = module.Index()
        index.add_row()
        index.put_many(list(range(len(names))), names, [[0] if i % 2 else [] for i in range(len(names))],
                       [0.0] * len(names))
        expl = index.explain([0], module.NO_AGENT_REF, [])
        failed = [names[i] for i in expl.failed_ids(0)]
        for limit in (0, 1, 3, len(failed), len(failed) + 10):
            text = index.failed_names(expl, 0, limit)
            assert text == ", ".join(failed[:limit])
            texts.append(text)
    assert texts[:5] == texts[5:]


def test_a_rejection_reason_names_every_candidate_that_failed_first(engine):
    fleet = fleet_of(engine, [declaration(name, capabilities=[("a.b", 1)], residency=["eu"])
                              for name in ("r-1", "r-2", "r-3")], batch=True)
    p = fleet.place(requirements(capabilities=[("a.b", 1)], residency="us"))
    assert reason_text(p) == "no eligible agent among 3 candidates: residency:us failed by r-1, r-2, r-3"
    p = fleet.place({"v": "1.0", "residency": "us"}, reason_limit=2)
    assert reason_text(p) == "no eligible agent among 3 candidates: residency:us failed by r-1, r-2 and 1 more"
