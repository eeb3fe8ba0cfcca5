"""Prometheus metrics of the service, declared once; labels are few and bounded (route templates,
two results, the predicate kinds of §5).

The metrics every request moves — placements by result, unschedulable ones by predicate kind, the
request latency histogram — are plain numbers (`_Tally`, `_Latency`) that one collector turns into
Prometheus metric families when /metrics is scraped: prometheus_client's Counter and Histogram take
a lock and check their state in Python on every update, about 200 bytecodes of a placement's
request. The rest (gauges, the watches' counters) move rarely and stay prometheus_client's.

The stdio protocol runs on the base install, which has no prometheus_client: there the
prometheus_client metrics are counted nowhere, and a stdio service moves no tally either
(`Operations(counted=False)`: nothing could read them); the HTTP service, which serves them, needs
the 'serve' extra anyway."""
from __future__ import annotations

import bisect
import threading
import time
from typing import Any, Iterator

try:
    from prometheus_client import REGISTRY, Counter, Gauge
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
    from prometheus_client.utils import floatToGoString
except ModuleNotFoundError:
    REGISTRY = None  # type: ignore[assignment]

    class _Uncounted:
        """A metric of an install without prometheus_client: every update does nothing."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def labels(self, *args: Any) -> "_Uncounted":
            return self

        def inc(self, amount: float = 1) -> None:
            pass

        def set(self, value: float) -> None:
            pass

    Counter = Gauge = _Uncounted  # type: ignore[misc, assignment]

__all__ = ["PLACEMENTS", "UNSCHEDULABLE", "REQUEST_SECONDS", "FLEET_AGENTS", "JOURNAL_LAG",
           "JOURNAL_ENTRIES", "WATCH_CHECKS", "WATCH_RUNNING", "K8S_WATCH_RUNNING", "K8S_REQUESTS", "K8S_EVENTS",
           "K8S_INVALID", "predicate_kind", "watched"]

def _created_series() -> bool:
    """Whether metrics carry their `_created` series, as prometheus_client's own do: not when
    PROMETHEUS_DISABLE_CREATED_SERIES is set or `disable_created_metrics()` was called (read where
    prometheus_client keeps it; a version without that switch always writes them)."""
    import prometheus_client.metrics

    return bool(getattr(prometheus_client.metrics, "_use_created", True))


class _Tally:
    """A counter by label values, kept as plain numbers (the lock keeps a count exact if ever moved
    from two threads; the service moves it on its event loop). `fixed` label values are counted
    from the start, at 0, as a labelled Counter's children made at import are."""

    def __init__(self, name: str, documentation: str, label: str, fixed: tuple[str, ...] = ()):
        self.name, self.documentation, self.label = name, documentation, label
        self.counts: dict[str, float] = dict.fromkeys(fixed, 0)
        self.created: dict[str, float] = dict.fromkeys(fixed, time.time())
        self.lock = threading.Lock()

    def inc(self, value: str, amount: float = 1) -> None:
        with self.lock:
            count = self.counts.get(value)
            if count is None:
                self.created[value] = time.time()
                count = 0
            self.counts[value] = count + amount

    def family(self) -> Any:
        family = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        with self.lock:
            counted = [(value, count, self.created[value]) for value, count in self.counts.items()]
        keep_created = _created_series()
        for value, count, created in counted:
            family.add_metric([value], count, created=created if keep_created else None)
        return family


class _Latency:
    """A histogram by (route, method), kept as plain numbers: per series the count of each bucket
    (an observation falls in the first whose upper bound it does not pass, as prometheus_client
    counts it), the sum, and when the series began."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, str], buckets: tuple[float, ...]):
        self.name, self.documentation, self.labels = name, documentation, labels
        self.bounds = buckets
        self.series: dict[tuple[str, str], list[Any]] = {}     # [bucket counts (+Inf last), sum, created]
        self.lock = threading.Lock()

    def observe(self, route: str, method: str, seconds: float) -> None:
        at = bisect.bisect_left(self.bounds, seconds)
        with self.lock:
            series = self.series.get((route, method))
            if series is None:
                series = self.series[(route, method)] = [[0] * (len(self.bounds) + 1), 0.0, time.time()]
            series[0][at] += 1
            series[1] += seconds

    def family(self) -> Any:
        family = HistogramMetricFamily(self.name, self.documentation, labels=list(self.labels))
        with self.lock:
            taken = [(key, list(counts), total, created) for key, (counts, total, created) in self.series.items()]
        bounds = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        keep_created = _created_series()
        for key, counts, total, created in taken:
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, counts):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric(list(key), buckets, total)
            if keep_created:
                family.add_sample(self.name + "_created", dict(zip(self.labels, key)), created)
        return family


PLACEMENTS = _Tally("a3fast_placements", "Placements made, by result.", "result", ("bound", "unschedulable"))
UNSCHEDULABLE = _Tally("a3fast_unschedulable",
                       "Unschedulable placements, by the kind of each predicate that removed a candidate.",
                       "predicate_kind")
REQUEST_SECONDS = _Latency("a3fast_request_seconds", "Time to answer a request, by route and method.",
                           ("route", "method"),
                           (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0))


class _RequestCollector:
    """What a scrape reads of the per-request metrics: one collector for the three."""

    def collect(self) -> Iterator[Any]:
        yield PLACEMENTS.family()
        yield UNSCHEDULABLE.family()
        yield REQUEST_SECONDS.family()


if REGISTRY is not None:
    REGISTRY.register(_RequestCollector())
FLEET_AGENTS = Gauge("a3fast_fleet_agents", "Agents in the served fleet.")
JOURNAL_LAG = Gauge("a3fast_journal_lag_bytes", "Journal bytes written but not yet fsynced.")
WATCH_CHECKS = Counter("a3fast_watch_checks_total",
                       "Checks of watched Agent Cards and MCP servers, by result: changed, unchanged, invalid "
                       "(kept the last good agents or tools), missing (404/410; an MCP server's agent not in "
                       "the fleet), removed (after --watch-remove-after misses), "
                       "error (unreachable; backs off).", ["result"])
WATCH_RUNNING = Gauge("a3fast_watch_running",
                      "1 while the watch of --watch-cards/--watch-mcp runs, 0 once it has stopped.")
# One series per watched source (the sources are fixed at start, so the label set is bounded); the
# text of a source's last error is served at /v1/watch.
WATCH_SOURCE_FAILING = Gauge("a3fast_watch_source_failing",
                             "1 when the last check of this watched source ended in an error.", ["source"])
WATCH_SOURCE_ERRORS = Gauge("a3fast_watch_source_errors",
                            "Checks of this watched source that ended in an error, since the start.", ["source"])
WATCH_SOURCE_LAST_ERROR = Gauge("a3fast_watch_source_last_error_timestamp_seconds",
                                "When this watched source's last error happened (Unix time).", ["source"])
WATCH_SOURCE_LAST_CHECK = Gauge("a3fast_watch_source_last_check_timestamp_seconds",
                                "When this watched source was last checked (Unix time).", ["source"])
JOURNAL_ENTRIES = Gauge("a3fast_journal_entries", "Journal entries since the last snapshot.")

_KINDS = ("capability", "clearance", "tool", "residency", "model.latency_class", "agentRef", "anti-affinity")


def predicate_kind(predicate: str) -> str:
    """The §5 kind of a predicate string (the part before its first colon), bounded to the known
    kinds so a hostile predicate cannot grow the label set."""
    kind = predicate.partition(":")[0]
    return kind if kind in _KINDS else "other"


#: The methods a request is counted under by name; any other (a client's own word: h11 passes any
#: token, httptools some thirty) is counted as "other", so no client can add series.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


def observe_request(route: str, method: str, seconds: float) -> None:
    """A request answered in `seconds`, in the latency histogram."""
    REQUEST_SECONDS.observe(route, method if method in METHODS else "other", seconds)


def count_placement(p) -> None:
    count_placements([p])


#: predicate -> its kind, for the predicates met so far (emptied when it grows past _KINDS_KEPT,
#: so hostile predicates cannot grow it without bound)
_KIND_OF: dict[str, str] = {}
_KINDS_KEPT = 4096


def _new_kind(predicate: str) -> str:
    """A predicate's kind, kept in _KIND_OF (which is emptied first once it holds _KINDS_KEPT)."""
    if len(_KIND_OF) >= _KINDS_KEPT:
        _KIND_OF.clear()
    kind = _KIND_OF[predicate] = predicate_kind(predicate)
    return kind


def count_placements(placements) -> None:
    """Count placements, each counter moved once for all of them (an increment takes a lock). A
    rejection counts once for each kind of predicate that removed a candidate (its failed count
    not 0), or once as "none"."""
    bound = 0
    kinds: dict[str, int] = {}
    kind_of = _KIND_OF.get
    for p in placements:
        if p.agent is not None:
            bound += 1
            continue
        # the failed counts beside their predicates, read without a dict of them (the predicates
        # of a placement are distinct, so a dict would hold the same pairs); a loop, not a set
        # comprehension, whose frame cost more than the few kinds it collects
        failing: list[str] = []
        for predicate, n in zip(p.requirements.predicates, p.explanation.failed_counts()):
            if n:
                kind = kind_of(predicate) or _new_kind(predicate)
                if kind not in failing:
                    failing.append(kind)
        for kind in failing or ("none",):
            kinds[kind] = kinds.get(kind, 0) + 1
    if bound:
        PLACEMENTS.inc("bound", bound)
    rejected = len(placements) - bound
    if rejected:
        PLACEMENTS.inc("unschedulable", rejected)
    for kind, n in kinds.items():
        UNSCHEDULABLE.inc(kind, n)


def watched(source: str, *, failing: bool, errors: int, last_error_at: float | None, checked_at: float) -> None:
    """The per-source watch series after a check of `source`."""
    WATCH_SOURCE_FAILING.labels(source).set(1 if failing else 0)
    WATCH_SOURCE_ERRORS.labels(source).set(errors)
    if last_error_at is not None:
        WATCH_SOURCE_LAST_ERROR.labels(source).set(last_error_at)
    WATCH_SOURCE_LAST_CHECK.labels(source).set(checked_at)


# -- the watch of the cluster (--watch-k8s) ---------------------------------------------------------
K8S_WATCH_RUNNING = Gauge("a3fast_k8s_watch_running", "1 while the watch of the cluster (--watch-k8s) runs.")
K8S_REQUESTS = Counter("a3fast_k8s_requests_total",
                       "Requests to the API server by the watch, by kind (Node, AgentDeclaration, Event) and "
                       "what they were: list, watch, create, error (a failed request; retried with backoff).",
                       ["kind", "request"])
K8S_EVENTS = Counter("a3fast_k8s_events_total",
                     "What the watch applied, by kind and result: replace (a full list), put, delete, invalid "
                     "(an object that is not a valid declaration: it declares no agent until it is fixed).", ["kind", "result"])
K8S_INVALID = Gauge("a3fast_k8s_invalid_objects",
                    "Objects whose declaration is invalid or conflicts with another's now (listed under /v1/watch).")
