"""The per-request metrics kept as plain numbers (`metrics._Tally`, `metrics._Latency`) read as
prometheus_client's own Counter and Histogram read after the same updates: the same samples, names,
labels and values (each series' `_created` time aside), bucket boundaries included."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

prometheus_client = pytest.importorskip("prometheus_client")

from a3fast.service import metrics  # noqa: E402

BUCKETS = metrics.REQUEST_SECONDS.bounds


def _exposition(*collectors) -> list[str]:
    registry = prometheus_client.CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    text = prometheus_client.generate_latest(registry).decode()
    return [line for line in text.splitlines() if not re.match(r"^\w+_created\b", line)]


class _Families:
    """A collector of tallies, as the service's registers its own."""

    def __init__(self, *tallies):
        self.tallies = tallies

    def collect(self):
        for tally in self.tallies:
            yield tally.family()


observations = st.lists(st.tuples(st.sampled_from([("/v1/place", "POST"), ("/v1/agents", "GET")]),
                                  st.one_of(st.sampled_from(BUCKETS), st.floats(0, 10, allow_nan=False))),
                        max_size=40)


@settings(max_examples=60, deadline=None)
@given(observations)
def test_the_latency_tally_reads_as_a_prometheus_histogram(observed):
    ours = metrics._Latency("t_request_seconds", "doc", ("route", "method"), BUCKETS)
    theirs_registry = prometheus_client.CollectorRegistry()
    theirs = prometheus_client.Histogram("t_request_seconds", "doc", ["route", "method"], buckets=BUCKETS,
                                         registry=theirs_registry)
    for (route, method), seconds in observed:
        ours.observe(route, method, seconds)
        theirs.labels(route, method).observe(seconds)
    text = prometheus_client.generate_latest(theirs_registry).decode()
    expected = [line for line in text.splitlines() if not re.match(r"^\w+_created\b", line)]
    assert _exposition(_Families(ours)) == expected
    # each series carries its _created sample, as prometheus_client's does
    created = {s.labels["route"] for f in [ours.family()] for s in f.samples if s.name.endswith("_created")}
    assert created == {route for (route, _), _ in observed}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["capability", "tool", "none", "bound"]), st.integers(1, 5)),
                max_size=30))
def test_the_counter_tally_reads_as_a_prometheus_counter(increments):
    ours = metrics._Tally("t_things", "doc", "kind", ("fixed",))
    theirs_registry = prometheus_client.CollectorRegistry()
    theirs = prometheus_client.Counter("t_things", "doc", ["kind"], registry=theirs_registry)
    theirs.labels("fixed")
    for kind, n in increments:
        ours.inc(kind, n)
        theirs.labels(kind).inc(n)
    text = prometheus_client.generate_latest(theirs_registry).decode()
    expected = [line for line in text.splitlines() if not re.match(r"^\w+_created\b", line)]
    assert _exposition(_Families(ours)) == expected


def test_no_created_series_when_prometheus_client_writes_none(monkeypatch):
    import prometheus_client.metrics

    monkeypatch.setattr(prometheus_client.metrics, "_use_created", False)
    tally = metrics._Tally("t_off", "doc", "kind", ("fixed",))
    latency = metrics._Latency("t_off_seconds", "doc", ("route", "method"), BUCKETS)
    tally.inc("x")
    latency.observe("/", "GET", 0.01)
    names = {s.name for f in (tally.family(), latency.family()) for s in f.samples}
    assert names and not any(name.endswith("_created") for name in names)
