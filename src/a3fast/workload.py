"""The standard workload: deterministic fleets and tasks of any size from a seed.

Every demo and benchmark uses it, so numbers from different runs and machines describe the same
work. Vocabulary: 500 capability names (major versions 1–3), 300 clearances, 400 tools, 6 residency
labels, both latency classes. Agents draw their capabilities, clearances and tools with Zipf skew (a
few very common, a long tail of rare); most declare a residency and a model. Tasks are mostly drawn
from what some agent declares, so about two thirds are schedulable.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

__all__ = ["CAPABILITIES", "CLEARANCES", "TOOLS", "RESIDENCIES", "MAX_SEED", "generate_fleet",
           "generate_tasks"]

#: Seeds are integers from 0 to MAX_SEED (numpy's generators take no negative seed).
MAX_SEED = 2**63 - 1
#: How many agents a fleet's generation reports at a time to a progress callback.
PROGRESS_STEP = 1000


def _check(seed: Any, count: Any, what: str) -> None:
    """ValueError naming the argument, for a seed or a count a caller got wrong."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed: expected an integer from 0 to {MAX_SEED}, found {seed!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"{what}: expected a non-negative integer, found {count!r}")

_DOMAINS = ("order", "case", "text", "code", "data", "image", "audio", "invoice", "refund", "ticket",
            "contract", "policy", "claim", "report", "email", "calendar", "search", "payment",
            "account", "shipment", "inventory", "review", "incident", "campaign", "survey")
_COMPETENCES = ("investigate", "summarise", "translate", "classify", "extract", "review", "draft",
                "plan", "search", "verify", "approve", "triage", "forecast", "reconcile", "annotate",
                "redact", "route", "explain", "compare", "monitor")
_RESOURCES = ("orders", "customers", "refunds", "invoices", "tickets", "cases", "contracts", "claims",
              "payments", "accounts", "shipments", "inventory", "emails", "calendars", "reports",
              "policies", "incidents", "campaigns", "surveys", "documents", "images", "audio",
              "code", "builds", "deployments", "secrets", "logs", "metrics", "users", "data")
_PERMISSIONS = ("read", "write", "delete", "issue", "approve", "export", "share", "admin",
                "pii-read", "audit")
_SERVERS = ("github", "jira", "slack", "gdrive", "postgres", "okta", "stripe", "zendesk", "s3", "filesystem")
_ACTIONS = ("list", "get", "create", "update", "delete", "search", "comment", "assign", "merge",
            "close", "open", "upload", "download", "query", "export", "import", "notify", "approve",
            "archive", "restore", "tag", "untag", "move", "copy", "lock", "unlock", "sync", "watch",
            "sign", "verify", "render", "convert", "summarise", "translate", "schedule", "cancel",
            "refund", "charge", "invite", "revoke")

#: 500 capability names, 300 clearances, 400 tools (names hold ':' and '/', as real ones do).
CAPABILITIES = tuple(f"{d}.{c}" for d in _DOMAINS for c in _COMPETENCES)
CLEARANCES = tuple(f"{r}.{p}" for r in _RESOURCES for p in _PERMISSIONS)
TOOLS = tuple(f"mcp:{s}/{a}" for s in _SERVERS for a in _ACTIONS)
RESIDENCIES = ("eu", "us", "us-gov", "uk", "apac", "ca")
LATENCY_CLASSES = ("interactive", "batch")
NAMESPACES = ("support", "billing", "platform", "research", "sales", "legal", "ops", "security")
ZIPF_EXPONENT = 1.1


def _zipf_cdf(n: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** ZIPF_EXPONENT
    return np.cumsum(weights / weights.sum())


def _distinct(row: list[int], count: int, rng: np.random.Generator, cdf: np.ndarray) -> list[int]:
    """The first `count` distinct indices of a row of skewed draws (more draws in the rare case
    that the row repeats itself too often)."""
    picked = list(dict.fromkeys(row))
    while len(picked) < count:
        extra = np.searchsorted(cdf, rng.random(count)).tolist()
        picked = list(dict.fromkeys(picked + [min(i, len(cdf) - 1) for i in extra]))
    return picked[:count]


def _skewed(rng: np.random.Generator, cdf: np.ndarray, n: int, width: int) -> list[list[int]]:
    """n rows of `width` Zipf-skewed draws, vectorised (draw with replacement, dedupe per row)."""
    draws = np.searchsorted(cdf, rng.random((n, width)))
    return np.minimum(draws, len(cdf) - 1).tolist()


def generate_fleet(n_agents: int, seed: int = 0,
                   progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """`n_agents` §3 declarations, the same for the same seed; `progress(k)` is told of every
    PROGRESS_STEP agents made. ValueError for a negative count or seed."""
    _check(seed, n_agents, "n_agents")
    rng = np.random.default_rng(seed)
    cap_cdf, clr_cdf, tool_cdf = _zipf_cdf(len(CAPABILITIES)), _zipf_cdf(len(CLEARANCES)), _zipf_cdf(len(TOOLS))
    # each capability has a current major version; agents mostly declare the current one
    current = rng.integers(1, 4, size=len(CAPABILITIES)).tolist()
    n = n_agents
    n_caps, n_clear, n_tools = (rng.integers(5, 21, n).tolist(), rng.integers(3, 11, n).tolist(),
                                rng.integers(0, 9, n).tolist())
    cap_rows, clear_rows, tool_rows = _skewed(rng, cap_cdf, n, 48), _skewed(rng, clr_cdf, n, 24), _skewed(rng, tool_cdf, n, 20)
    older, older_pick, evaluated = rng.random((n, 20)).tolist(), rng.random((n, 20)).tolist(), rng.random((n, 20)).tolist()
    has_residency, n_labels, first_label, second_step = (rng.random(n).tolist(), rng.integers(1, 3, n).tolist(),
                                                         rng.integers(0, 6, n).tolist(), rng.integers(1, 6, n).tolist())
    has_model, latency, cost = rng.random(n).tolist(), rng.integers(0, 2, n).tolist(), rng.integers(1, 300, n).tolist()
    fleet = []
    for i in range(n):
        capabilities = []
        for j, c in enumerate(_distinct(cap_rows[i], n_caps[i], rng, cap_cdf)):
            version = current[c] if older[i][j] < 0.8 else 1 + int(older_pick[i][j] * current[c])
            entry: dict[str, Any] = {"name": CAPABILITIES[c], "version": version}
            if evaluated[i][j] < 0.6:
                entry["evaluation"] = f"probe:{CAPABILITIES[c]}/{version}"
            capabilities.append(entry)
        decl: dict[str, Any] = {
            "v": "1.0",
            "agent": {"name": f"agent-{i:06d}", "namespace": NAMESPACES[i % len(NAMESPACES)]},
            "capabilities": capabilities,
            "clearances": [CLEARANCES[c] for c in _distinct(clear_rows[i], n_clear[i], rng, clr_cdf)],
        }
        if n_tools[i]:
            decl["tools"] = [TOOLS[t] for t in _distinct(tool_rows[i], n_tools[i], rng, tool_cdf)]
        if has_residency[i] < 0.9:
            labels = {first_label[i]} if n_labels[i] == 1 else {first_label[i], (first_label[i] + second_step[i]) % 6}
            decl["residency"] = [RESIDENCIES[j] for j in sorted(labels)]
        if has_model[i] < 0.85:
            decl["model"] = {"latency_class": LATENCY_CLASSES[latency[i]], "cost_ceiling_usd": f"{cost[i] / 100:.2f}"}
        fleet.append(decl)
        if progress is not None and (i + 1) % PROGRESS_STEP == 0:
            progress(PROGRESS_STEP)
    if progress is not None and n % PROGRESS_STEP:
        progress(n % PROGRESS_STEP)
    return fleet


def generate_tasks(declarations: Sequence[Mapping[str, Any]], n_tasks: int, seed: int = 0) -> list[dict[str, Any]]:
    """`n_tasks` §4 requirements documents against a fleet, the same for the same seed.

    Each task starts from a random agent's declaration (so it is schedulable by construction); a
    third are then perturbed with a requirement drawn from the whole vocabulary, which few agents
    meet together with the rest. `declarations` must be valid §3 documents (parse them first);
    ValueError for a negative count or seed.
    """
    _check(seed, n_tasks, "n_tasks")
    rng = np.random.default_rng(seed + 1_000_003)
    tasks = []
    n = len(declarations)
    for t in range(n_tasks):
        template = declarations[int(rng.integers(0, n))] if n else {"capabilities": [], "clearances": []}
        caps = template.get("capabilities", [])
        task: dict[str, Any] = {"v": "1.0"}
        k = min(len(caps), int(rng.integers(1, 4)))
        if k:
            task["capabilities"] = [{"name": caps[j]["name"], "version": caps[j]["version"]}
                                    for j in rng.choice(len(caps), k, replace=False).tolist()]
        clearances = template.get("clearances", [])
        k = min(len(clearances), int(rng.integers(0, 3)))
        if k:
            task["clearances"] = [clearances[j] for j in rng.choice(len(clearances), k, replace=False).tolist()]
        tools = template.get("tools") or []
        if tools and rng.random() < 0.5:
            task["tools"] = [tools[int(rng.integers(0, len(tools)))]]
        if template.get("residency") and rng.random() < 0.5:
            labels = template["residency"]
            task["residency"] = labels[int(rng.integers(0, len(labels)))]
        latency_class = (template.get("model") or {}).get("latency_class")
        if template.get("model") and rng.random() < 1 / 3 and latency_class is not None:
            task["model"] = {"latency_class": latency_class}
        if rng.random() < 1 / 3:
            _perturb(rng, task)
        roll = rng.random()
        if roll < 0.05 and n:
            task["exclude"] = [declarations[int(rng.integers(0, n))]["agent"]["name"]]
        elif roll < 0.08 and "agent" in template:
            task["agentRef"] = template["agent"]["name"]
        if rng.random() < 0.2:
            task["session"] = f"session-{int(rng.integers(0, 50))}"
        tasks.append(task)
    return tasks


def _perturb(rng: np.random.Generator, task: dict[str, Any]) -> None:
    """Add one requirement drawn from the whole vocabulary (uniformly: usually a rare one)."""
    what = int(rng.integers(0, 3))
    if what == 0:
        task.setdefault("capabilities", []).append(
            {"name": CAPABILITIES[int(rng.integers(0, len(CAPABILITIES)))], "version": int(rng.integers(1, 4))})
    elif what == 1:
        task.setdefault("clearances", []).append(CLEARANCES[int(rng.integers(0, len(CLEARANCES)))])
    else:
        task.setdefault("tools", []).append(TOOLS[int(rng.integers(0, len(TOOLS)))])
