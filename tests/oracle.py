"""A literal reading of §5 and of the default score (docs/design.md, reading 15), straight from the
JSON documents.

No index, no parser, no engine: predicates are derived from the requirements dict as docs/design.md,
reading 1 orders them, each candidate is checked against each predicate by reading its declaration
dict (readings 4 and 5), and the default scores are computed per candidate from a plain record of
outcomes and held sessions:

    affinity       1 when the agent holds the task's session, else 0
    success_rate   (successes + 1) / (attempts + 2) for the task's kind
    cost           1 / (1 + cost_ceiling_usd), 0 when no ceiling is declared
    substantiated  required capabilities the agent backs with an `evaluation` / required ones (1 if none)
    total          ((w_a·affinity + w_s·success_rate) + w_c·cost) + w_e·substantiated

and the winner is the highest total, ties to the smaller name. The fleet's placements are compared
with this, score by score and bit by bit (the sum's order is documented in `a3fast.fleet.scoring`).
"""
from __future__ import annotations

from typing import Any

DEFAULT_WEIGHTS = (0.4, 0.3, 0.2, 0.1)


def predicates_of(req: dict[str, Any]) -> list[str]:
    """§5's predicate set in derivation order (docs/design.md, reading 1); a repeat keeps its first place."""
    out = [f"capability:{c['name']}/{c['version']}" for c in req.get("capabilities") or []]
    out += [f"clearance:{c}" for c in req.get("clearances") or []]
    out += [f"tool:{t}" for t in req.get("tools") or []]
    if req.get("residency") is not None:
        out.append(f"residency:{req['residency']}")
    latency = (req.get("model") or {}).get("latency_class")
    if latency is not None:
        out.append(f"model.latency_class:{latency}")
    if req.get("agentRef") is not None:
        out.append(f"agentRef:{req['agentRef']}")
    out += [f"anti-affinity:{name}" for name in req.get("exclude") or []]
    return list(dict.fromkeys(out))


def satisfies(decl: dict[str, Any], predicate: str) -> bool:
    """One predicate against one declaration dict, read literally (absent means absent)."""
    kind, _, arg = predicate.partition(":")
    name = decl["agent"]["name"]
    if kind == "capability":
        cap, _, version = arg.rpartition("/")
        return any(c["name"] == cap and c["version"] == int(version) for c in decl["capabilities"])
    if kind == "clearance":
        return arg in decl["clearances"]
    if kind == "tool":
        return arg in (decl.get("tools") or [])
    if kind == "residency":
        return arg in (decl.get("residency") or [])
    if kind == "model.latency_class":
        return (decl.get("model") or {}).get("latency_class") == arg
    if kind == "agentRef":
        return name == arg
    if kind == "anti-affinity":
        return name != arg
    raise AssertionError(f"not a predicate: {predicate!r}")


def every_failed(decl: dict[str, Any], predicates: list[str]) -> list[str]:
    """Every predicate the declaration fails, in derivation order."""
    return [p for p in predicates if not satisfies(decl, p)]


def task_kind(req: dict[str, Any]) -> str:
    """The task kind (docs/design.md, reading 14): `kind` if stated, else the sorted required
    capabilities joined by '+'."""
    if req.get("kind") is not None:
        return req["kind"]
    caps = sorted({f"{c['name']}/{c['version']}" for c in req.get("capabilities") or []})
    return "+".join(caps) if caps else "*"


def cost_of(decl: dict[str, Any]) -> float:
    ceiling = (decl.get("model") or {}).get("cost_ceiling_usd")
    return 0.0 if ceiling is None else 1.0 / (1.0 + float(ceiling))


def substantiated_of(decl: dict[str, Any], predicates: list[str]) -> float:
    required = [p for p in predicates if p.startswith("capability:")]
    if not required:
        return 1.0
    backed = {f"capability:{c['name']}/{c['version']}" for c in decl["capabilities"]
              if c.get("evaluation") is not None}
    return sum(1 for p in required if p in backed) / len(required)


class FleetModel:
    """What a fleet holds, kept as plain data: declarations by name, held sessions, outcomes.

    Agents keep their name's history for the fleet's life (outcomes are the named agent's); held
    sessions go with a removed agent and stay with a replaced one (Fleet.remove, Fleet.add).
    """

    def __init__(self, weights: tuple[float, float, float, float] = DEFAULT_WEIGHTS):
        self.weights = weights
        self.docs: dict[str, dict[str, Any]] = {}
        self.sessions: dict[str, set[str]] = {}
        self.outcomes: dict[tuple[str, str], list[int]] = {}

    def add(self, doc: dict[str, Any]) -> None:
        name = doc["agent"]["name"]
        self.docs[name] = doc
        self.sessions.setdefault(name, set())

    def remove(self, name: str) -> None:
        del self.docs[name]
        self.sessions.pop(name, None)

    def hold(self, name: str, session: str) -> None:
        self.sessions[name].add(session)

    def release(self, name: str, session: str) -> None:
        self.sessions[name].discard(session)

    def holds(self, name: str, session: str) -> bool:
        return session in self.sessions.get(name, ())

    def record_outcome(self, name: str, req: dict[str, Any], success: bool) -> None:
        counts = self.outcomes.setdefault((name, task_kind(req)), [0, 0])
        counts[0] += 1 if success else 0
        counts[1] += 1

    def scores(self, req: dict[str, Any], session: str | None = None) -> dict[str, dict[str, float]]:
        """{eligible name: {total, affinity, success_rate, cost, substantiated}}."""
        predicates = predicates_of(req)
        session = session if session is not None else req.get("session")
        kind = task_kind(req)
        w_a, w_s, w_c, w_e = self.weights
        out = {}
        for name, decl in self.docs.items():
            if every_failed(decl, predicates):
                continue
            a = 1.0 if session is not None and self.holds(name, session) else 0.0
            successes, attempts = self.outcomes.get((name, kind), (0, 0))
            s = (successes + 1) / (attempts + 2)
            c = cost_of(decl)
            e = substantiated_of(decl, predicates)
            out[name] = {"total": ((w_a * a + w_s * s) + w_c * c) + w_e * e, "affinity": a,
                         "success_rate": s, "cost": c, "substantiated": e}
        return out

    def place(self, req: dict[str, Any], session: str | None = None,
              remember_session: bool = True) -> tuple[str | None, dict[str, dict[str, float]]]:
        """(winner or None, scores); a bound placement with a session makes the winner hold it."""
        scores = self.scores(req, session)
        winner = choose(scores)
        session = session if session is not None else req.get("session")
        if winner is not None and session is not None and remember_session:
            self.hold(winner, session)
        return winner, scores


def choose(scores: dict[str, dict[str, float]]) -> str | None:
    """The highest total; ties go to the smaller name."""
    if not scores:
        return None
    return min(scores, key=lambda name: (-scores[name]["total"], name))


def bits(scores: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Scores with every float as its exact bits, for comparisons that must not round."""
    return {name: {k: float(v).hex() for k, v in entry.items()} for name, entry in scores.items()}
