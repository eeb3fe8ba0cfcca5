#!/usr/bin/env python3
"""A literal A3 matcher, as another team would write it from the spec alone (no a3fast inside).

Speaks the stdio protocol of `a3fast serve --stdio` (docs/protocol.md): one JSON request per line
on standard input, one JSON answer per line on standard output. Operations: put_agent, put_agents,
delete_agent, place, outcome. Matching is the per-candidate loop of §5: predicates derived in the
order capabilities, clearances, tools, residency, model.latency_class, agentRef, anti-affinity
(docs/design.md, reading 1); each candidate is checked predicate by predicate and the first one it fails
is recorded (§6). Scoring is this program's own: success rate for the task's kind, whether the
matched capabilities are substantiated (`evaluation`), and a lower cost ceiling; ties go to the
smaller name. Records are the §6 forms: task.submitted, task.admitted + task.bound, or
task.rejected.

    python examples/matchers/literal.py [--wrong KIND]

`--wrong` makes it deliberately wrong, to show that each check of `a3fast conformance --suite
matching` can fail: order (clearances before capabilities), residency (residency ignored),
passed (the last predicate left out of filters_passed), choice (the worst-scored agent chosen),
scores (the worst-scored agent chosen, and only its score recorded),
stale (removed agents stay candidates), reason (a rejection's reason names a predicate no candidate
failed), twice (every candidate listed twice), hang (never answers a placement), garbage (answers a
placement with a line that is not JSON), crash (exits at the first placement).
"""
import json
import sys
import time

WRONG = ("order", "residency", "passed", "choice", "scores", "stale", "reason", "twice", "hang", "garbage",
         "crash")


def derive(req, wrong):
    """The predicate strings of a requirements document, in derivation order, first place kept."""
    caps = ["capability:%s/%d" % (c["name"], c["version"]) for c in req.get("capabilities") or []]
    clears = ["clearance:" + c for c in req.get("clearances") or []]
    out = clears + caps if wrong == "order" else caps + clears
    out += ["tool:" + t for t in req.get("tools") or []]
    if req.get("residency") is not None:
        out.append("residency:" + req["residency"])
    model = req.get("model") or {}
    if model.get("latency_class") is not None:
        out.append("model.latency_class:" + model["latency_class"])
    if req.get("agentRef") is not None:
        out.append("agentRef:" + req["agentRef"])
    out += ["anti-affinity:" + name for name in req.get("exclude") or []]
    return list(dict.fromkeys(out))


def satisfies(decl, predicate, wrong):
    kind, _, arg = predicate.partition(":")
    name = decl["agent"]["name"]
    if kind == "capability":
        cap, _, version = arg.rpartition("/")
        return any(c["name"] == cap and c["version"] == int(version) for c in decl.get("capabilities") or [])
    if kind == "clearance":
        return arg in (decl.get("clearances") or [])
    if kind == "tool":
        return arg in (decl.get("tools") or [])
    if kind == "residency":
        return wrong == "residency" or arg in (decl.get("residency") or [])
    if kind == "model.latency_class":
        return (decl.get("model") or {}).get("latency_class") == arg
    if kind == "agentRef":
        return name == arg
    return name != arg   # anti-affinity


class Matcher:
    def __init__(self, wrong):
        self.wrong = wrong
        self.agents = {}        # name -> declaration, in join order
        self.removed = {}       # for --wrong stale
        self.history = {}       # (agent, kind) -> [successes, attempts]
        self.seq = 0

    def put_agent(self, request):
        decl = request["declaration"]
        created = decl["agent"]["name"] not in self.agents
        self.agents[decl["agent"]["name"]] = decl
        return {"name": decl["agent"]["name"], "created": created}

    def put_agents(self, request):
        for decl in request["declarations"]:
            self.agents[decl["agent"]["name"]] = decl
        return {"count": len(request["declarations"])}

    def delete_agent(self, request):
        name = request["name"]
        if name not in self.agents:
            raise Refused(404, "$.name", "an agent of the fleet", repr(name))
        decl = self.agents.pop(name)
        if self.wrong == "stale":
            self.removed[name] = decl
        return {"name": name, "deleted": True}

    def outcome(self, request):
        kind = request.get("kind") or task_kind(request["requirements"])
        counts = self.history.setdefault((request["agent"], kind), [0, 0])
        counts[0] += bool(request["success"])
        counts[1] += 1
        return {"agent": request["agent"], "kind": kind, "successes": counts[0], "attempts": counts[1]}

    def place(self, request):
        if self.wrong == "hang":
            time.sleep(3600)
        if self.wrong == "crash":
            sys.exit(70)
        req = request["requirements"]
        predicates = derive(req, self.wrong)
        fleet = dict(self.agents)
        fleet.update(self.removed)
        candidates = list(fleet) * (2 if self.wrong == "twice" else 1)
        failed, eligible = [], []
        for name in candidates:
            first = next((p for p in predicates if not satisfies(fleet[name], p, self.wrong)), None)
            if first is None:
                eligible.append(name)
            else:
                failed.append({"candidate": name, "predicate": first})
        records = [self.record("task.submitted", {"requirements": req})]
        if not eligible:
            reason = rejection_reason(candidates, failed, predicates)
            if self.wrong == "reason":
                reason = "no eligible agent: capability:nothing.at-all/9"
            records.append(self.record("task.rejected", {
                "code": "unschedulable", "reason": reason,
                "requirements": req, "candidates": candidates, "filters_failed": failed}))
            return {"records": records}
        kind = task_kind(req)
        scores = {name: self.score(fleet[name], req, kind) for name in eligible}
        order = sorted(eligible, key=lambda name: (-scores[name]["total"], name))
        chosen = order[-1] if self.wrong in ("choice", "scores") else order[0]
        if self.wrong == "scores":
            scores = {chosen: scores[chosen]}
        decl = fleet[chosen]
        passed = predicates[:-1] if self.wrong == "passed" else predicates
        records.append(self.record("task.admitted", {"agent": decl["agent"]}))
        records.append(self.record("task.bound", {"scheduling": {
            "requirements": req, "declaration": decl, "candidates": candidates,
            "filters_passed": passed, "filters_failed": failed, "scores": scores}}))
        return {"records": records}

    def score(self, decl, req, kind):
        successes, attempts = self.history.get((decl["agent"]["name"], kind), (0, 0))
        success_rate = (successes + 1) / (attempts + 2)
        wanted = {(c["name"], c["version"]) for c in req.get("capabilities") or []}
        matched = [c for c in decl.get("capabilities") or [] if (c["name"], c["version"]) in wanted]
        substantiated = (sum(1 for c in matched if c.get("evaluation")) / len(matched)) if matched else 0.0
        ceiling = (decl.get("model") or {}).get("cost_ceiling_usd")
        cost = 1.0 / (1.0 + float(ceiling)) if ceiling else 0.0
        total = round(0.5 * success_rate + 0.3 * substantiated + 0.2 * cost, 9)
        return {"total": total, "success_rate": success_rate, "substantiated": substantiated, "cost": cost}

    def record(self, kind, content):
        self.seq += 1
        return {"seq": self.seq, "kind": kind, "content": content}


def task_kind(req):
    return ",".join(sorted("%s/%d" % (c["name"], c["version"]) for c in req.get("capabilities") or [])) or "-"


def rejection_reason(candidates, failed, predicates):
    """§6: name every failed predicate with the candidates that failed it."""
    if not failed:
        wanted = ", ".join(predicates) if predicates else "nothing"
        return "no eligible agent: no candidates; the task requires %s" % wanted
    by_predicate = {}
    for f in failed:
        by_predicate.setdefault(f["predicate"], []).append(f["candidate"])
    parts = ["%s failed by %s" % (p, ", ".join(names)) for p, names in by_predicate.items()]
    return "no eligible agent among %d candidates: %s" % (len(candidates), "; ".join(parts))


class Refused(Exception):
    def __init__(self, status, path, expected, found):
        super().__init__(expected)
        self.status = status
        self.problem = {"path": path, "expected": expected, "found": found}


def answer(matcher, line):
    rid = None
    try:
        request = json.loads(line)
        rid = request.get("id")
        op = request.get("op")
        if op not in ("put_agent", "put_agents", "delete_agent", "place", "outcome"):
            raise Refused(400, "$.op", "put_agent, put_agents, delete_agent, place or outcome", repr(op))
        if op == "place" and matcher.wrong == "garbage":
            return "this is not JSON"
        return json.dumps(dict({"id": rid, "ok": True}, **getattr(matcher, op)(request)))
    except Refused as exc:
        return json.dumps({"id": rid, "ok": False, "status": exc.status, "problems": [exc.problem]})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return json.dumps({"id": rid, "ok": False, "status": 400,
                           "problems": [{"path": "$", "expected": "a request this matcher reads",
                                         "found": "%s: %s" % (type(exc).__name__, exc)}]})


def main(argv):
    wrong = None
    if argv[:1] == ["--wrong"] and len(argv) == 2 and argv[1] in WRONG:
        wrong = argv[1]
    elif argv:
        sys.stderr.write("usage: literal.py [--wrong %s]\n" % "|".join(WRONG))
        return 2
    matcher = Matcher(wrong)
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(answer(matcher, line) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
