/*
 * A literal A3 matcher in C, as another team would write it from the spec alone (no a3fast inside).
 *
 * Speaks the stdio protocol of `a3fast serve --stdio` (docs/protocol.md): one JSON request per line
 * on standard input, one JSON answer per line on standard output, in order. Operations: put_agent,
 * put_agents, delete_agent, place, outcome. JSON is read and written with jansson.
 *
 * Matching is the per-candidate loop of §5: the predicates are derived in the order capabilities,
 * clearances, tools, residency, model.latency_class, agentRef, anti-affinity (docs/design.md, reading 1),
 * a predicate repeated keeps its first place; each candidate is checked predicate by predicate and
 * the first one it fails is its entry in filters_failed (§6), which lists them grouped by predicate
 * (in derivation order), then in candidate order. Candidates are the live agents in join order (an
 * agent replaced keeps its place). Scoring is this program's own: a smoothed success rate for the
 * task's kind, the share of the wanted capabilities that name an `evaluation`, and how cheap the
 * agent's cost ceiling is; the highest total wins, ties to the smaller name.
 *
 *     matcher [--wrong residency|order]
 *
 * `--wrong residency` ignores residency and `--wrong order` derives clearances before capabilities,
 * so that `a3fast conformance --suite matching` has something to catch.
 *
 * Exit codes: 0 at the end of input, 2 a bad command line, 70 out of memory or a failed write.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum wrong { RIGHT, WRONG_RESIDENCY, WRONG_ORDER };

enum kind { CAPABILITY, CLEARANCE, TOOL, RESIDENCY, LATENCY_CLASS, AGENT_REF, ANTI_AFFINITY };

struct predicate {
    enum kind kind;
    const char *arg;            /* borrowed from the requirements document */
    json_int_t version;         /* capability only */
    char *text;                 /* the canonical string form */
};

struct agent {
    char *name;
    json_t *decl;               /* owned reference */
};

struct history {
    char *agent, *kind;
    long successes, attempts;
};

static enum wrong wrong = RIGHT;
static struct agent *agents;     /* the live fleet, in join order */
static size_t n_agents, cap_agents;
static struct history *histories;
static size_t n_histories, cap_histories;
static json_int_t seq;

/* --- an answer that refuses a request ---------------------------------------------------------- */

struct refusal {
    int status;
    char path[64], expected[160], found[256];
};

static int refuse(struct refusal *r, int status, const char *path, const char *expected, const char *found)
{
    r->status = status;
    snprintf(r->path, sizeof r->path, "%s", path);
    snprintf(r->expected, sizeof r->expected, "%s", expected);
    snprintf(r->found, sizeof r->found, "%s", found);
    return -1;
}

static void *checked(void *p)
{
    if (!p) {
        fputs("matcher: out of memory\n", stderr);
        exit(70);
    }
    return p;
}

static char *copy(const char *s) { return checked(strdup(s)); }

/* "<prefix><arg>", allocated. */
static char *join(const char *prefix, const char *arg)
{
    size_t a = strlen(prefix), b = strlen(arg);
    char *out = checked(malloc(a + b + 1));
    memcpy(out, prefix, a);
    memcpy(out + a, arg, b + 1);
    return out;
}

/* "<prefix><name>/<version>", allocated. */
static char *versioned(const char *prefix, const char *name, json_int_t version)
{
    int len = snprintf(NULL, 0, "%s%s/%lld", prefix, name, (long long)version);
    char *out = checked(malloc((size_t)len + 1));
    snprintf(out, (size_t)len + 1, "%s%s/%lld", prefix, name, (long long)version);
    return out;
}

static int same(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* --- the fleet ---------------------------------------------------------------------------------- */

static const char *string_at(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static const char *agent_name(json_t *decl)
{
    return string_at(json_object_get(decl, "agent"), "name");
}

static long find_agent(const char *name)
{
    for (size_t i = 0; i < n_agents; i++)
        if (strcmp(agents[i].name, name) == 0)
            return (long)i;
    return -1;
}

/* Adds or replaces; 1 when the agent is new. */
static int put(json_t *decl)
{
    const char *name = agent_name(decl);
    long at = find_agent(name);
    json_incref(decl);
    if (at >= 0) {
        json_decref(agents[at].decl);
        agents[at].decl = decl;
        return 0;
    }
    if (n_agents == cap_agents) {
        cap_agents = cap_agents ? 2 * cap_agents : 64;
        agents = checked(realloc(agents, cap_agents * sizeof *agents));
    }
    agents[n_agents].name = copy(name);
    agents[n_agents].decl = decl;
    n_agents++;
    return 1;
}

static int valid_declaration(json_t *decl, const char *path, struct refusal *r)
{
    if (!json_is_object(decl) || !agent_name(decl)) {
        char where[64];
        snprintf(where, sizeof where, "%s.agent.name", path);
        return refuse(r, 400, where, "a declaration (§3) whose agent has a name", "none");
    }
    return 0;
}

/* --- predicates --------------------------------------------------------------------------------- */

static int has_string(json_t *list, const char *s)
{
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
        if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
            return 1;
    return 0;
}

static void add_predicate(struct predicate **ps, size_t *n, enum kind kind, const char *arg, json_int_t version,
                          char *text)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*ps)[i].text, text) == 0) {    /* a repeat keeps its first place */
            free(text);
            return;
        }
    *ps = checked(realloc(*ps, (*n + 1) * sizeof **ps));
    (*ps)[*n] = (struct predicate){kind, arg, version, text};
    (*n)++;
}

static void derive_list(struct predicate **ps, size_t *n, json_t *req, enum kind kind)
{
    size_t i;
    json_t *v;
    if (kind == CAPABILITY) {
        json_array_foreach(json_object_get(req, "capabilities"), i, v) {
            const char *name = string_at(v, "name");
            json_int_t version = json_integer_value(json_object_get(v, "version"));
            add_predicate(ps, n, CAPABILITY, name, version, versioned("capability:", name, version));
        }
    } else {
        json_array_foreach(json_object_get(req, kind == CLEARANCE ? "clearances" : "tools"), i, v)
            add_predicate(ps, n, kind, json_string_value(v),
                          0, join(kind == CLEARANCE ? "clearance:" : "tool:", json_string_value(v)));
    }
}

static int valid_requirements(json_t *req, struct refusal *r)
{
    size_t i;
    json_t *v;
    if (!json_is_object(req))
        return refuse(r, 400, "$.requirements", "a requirements document (§4)", "not an object");
    json_array_foreach(json_object_get(req, "capabilities"), i, v)
        if (!string_at(v, "name") || !json_is_integer(json_object_get(v, "version")))
            return refuse(r, 400, "$.requirements.capabilities", "{name, version} objects", "another value");
    const char *lists[] = {"clearances", "tools", "exclude"};
    for (int k = 0; k < 3; k++)
        json_array_foreach(json_object_get(req, lists[k]), i, v)
            if (!json_is_string(v))
                return refuse(r, 400, "$.requirements", "lists of strings", lists[k]);
    return 0;
}

/* The predicates of a requirements document, in derivation order. */
static struct predicate *derive(json_t *req, size_t *n)
{
    struct predicate *ps = NULL;
    *n = 0;
    derive_list(&ps, n, req, wrong == WRONG_ORDER ? CLEARANCE : CAPABILITY);
    derive_list(&ps, n, req, wrong == WRONG_ORDER ? CAPABILITY : CLEARANCE);
    derive_list(&ps, n, req, TOOL);
    const char *residency = string_at(req, "residency");
    if (residency)
        add_predicate(&ps, n, RESIDENCY, residency, 0, join("residency:", residency));
    const char *latency = string_at(json_object_get(req, "model"), "latency_class");
    if (latency)
        add_predicate(&ps, n, LATENCY_CLASS, latency, 0, join("model.latency_class:", latency));
    const char *ref = string_at(req, "agentRef");
    if (ref)
        add_predicate(&ps, n, AGENT_REF, ref, 0, join("agentRef:", ref));
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(req, "exclude"), i, v)
        add_predicate(&ps, n, ANTI_AFFINITY, json_string_value(v), 0,
                      join("anti-affinity:", json_string_value(v)));
    return ps;
}

static int satisfies(json_t *decl, const char *name, const struct predicate *p)
{
    size_t i;
    json_t *v;
    switch (p->kind) {
    case CAPABILITY:
        json_array_foreach(json_object_get(decl, "capabilities"), i, v) {
            const char *cap = string_at(v, "name");
            json_t *version = json_object_get(v, "version");
            if (same(cap, p->arg) && json_is_integer(version)
                && json_integer_value(version) == p->version)
                return 1;
        }
        return 0;
    case CLEARANCE: return has_string(json_object_get(decl, "clearances"), p->arg);
    case TOOL: return has_string(json_object_get(decl, "tools"), p->arg);
    case RESIDENCY: return wrong == WRONG_RESIDENCY || has_string(json_object_get(decl, "residency"), p->arg);
    case LATENCY_CLASS: {
        const char *mine = string_at(json_object_get(decl, "model"), "latency_class");
        return same(mine, p->arg);
    }
    case AGENT_REF: return strcmp(name, p->arg) == 0;
    case ANTI_AFFINITY: return strcmp(name, p->arg) != 0;
    }
    return 0;
}

/* --- scoring: this matcher's own ---------------------------------------------------------------- */

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The task's kind: its capabilities, sorted, comma-joined ("-" for none). */
static char *task_kind(json_t *req)
{
    size_t n = json_array_size(json_object_get(req, "capabilities"));
    if (n == 0)
        return copy("-");
    char **parts = checked(calloc(n, sizeof *parts));
    size_t len = 0, i;
    json_t *v;
    json_array_foreach(json_object_get(req, "capabilities"), i, v) {
        parts[i] = versioned("", string_at(v, "name"), json_integer_value(json_object_get(v, "version")));
        len += strlen(parts[i]) + 1;
    }
    qsort(parts, n, sizeof *parts, by_text);
    char *out = checked(calloc(len + 1, 1));
    for (i = 0; i < n; i++) {
        if (i)
            strcat(out, ",");
        strcat(out, parts[i]);
        free(parts[i]);
    }
    free(parts);
    return out;
}

static struct history *history_of(const char *agent, const char *kind, int create)
{
    for (size_t i = 0; i < n_histories; i++)
        if (strcmp(histories[i].agent, agent) == 0 && strcmp(histories[i].kind, kind) == 0)
            return &histories[i];
    if (!create)
        return NULL;
    if (n_histories == cap_histories) {
        cap_histories = cap_histories ? 2 * cap_histories : 64;
        histories = checked(realloc(histories, cap_histories * sizeof *histories));
    }
    histories[n_histories] = (struct history){copy(agent), copy(kind), 0, 0};
    return &histories[n_histories++];
}

/* The score entry of one eligible agent: {total, success_rate, evidence, price}. */
static json_t *score(json_t *decl, const char *name, json_t *req, const char *kind, double *total)
{
    struct history *h = history_of(name, kind, 0);
    double success_rate = h ? (h->successes + 1.0) / (h->attempts + 2.0) : 0.5;
    size_t wanted = 0, evidenced = 0, i, j;
    json_t *w, *c;
    json_array_foreach(json_object_get(req, "capabilities"), i, w) {
        wanted++;
        json_array_foreach(json_object_get(decl, "capabilities"), j, c)
            if (same(string_at(c, "name"), string_at(w, "name"))
                && json_integer_value(json_object_get(c, "version")) == json_integer_value(json_object_get(w, "version"))) {
                evidenced += json_object_get(c, "evaluation") != NULL;
                break;
            }
    }
    double evidence = wanted ? (double)evidenced / (double)wanted : 0.0;
    const char *ceiling = string_at(json_object_get(decl, "model"), "cost_ceiling_usd");
    double usd = ceiling ? strtod(ceiling, NULL) : -1.0;
    double price = usd >= 0.0 && usd < 1e300 ? 1.0 / (1.0 + usd) : 0.0;   /* none, or unreadable: no credit */
    *total = 0.55 * success_rate + 0.25 * evidence + 0.2 * price;
    return json_pack("{s:f, s:f, s:f, s:f}", "total", *total, "success_rate", success_rate, "evidence", evidence,
                     "price", price);
}

/* --- records ------------------------------------------------------------------------------------ */

static json_t *record(const char *kind, json_t *content)
{
    return json_pack("{s:I, s:s, s:o}", "seq", ++seq, "kind", kind, "content", content);
}

/* §6: every failed predicate, with the candidates that failed it. */
static json_t *rejection_reason(size_t candidates, json_t *failed, struct predicate *ps, size_t n)
{
    size_t size = 0;
    char *text = NULL;
    FILE *out = checked(open_memstream(&text, &size));
    if (json_array_size(failed) == 0) {
        fputs("no eligible agent: no candidates; the task requires ", out);
        for (size_t k = 0; k < n; k++)
            fprintf(out, "%s%s", k ? ", " : "", ps[k].text);
        if (n == 0)
            fputs("nothing", out);
    } else {
        fprintf(out, "no eligible agent among %zu candidates: ", candidates);
        const char *current = NULL;
        size_t i;
        json_t *f;
        json_array_foreach(failed, i, f) {   /* grouped by predicate already */
            const char *p = string_at(f, "predicate");
            if (!current || strcmp(current, p) != 0)
                fprintf(out, "%s%s failed by ", current ? "; " : "", p);
            else
                fputs(", ", out);
            fputs(string_at(f, "candidate"), out);
            current = p;
        }
    }
    fclose(out);
    json_t *reason = json_string(text);
    free(text);
    return reason;
}

static int place(json_t *request, json_t *answer, struct refusal *r)
{
    json_t *req = json_object_get(request, "requirements");
    if (valid_requirements(req, r))
        return -1;
    size_t n = 0;
    struct predicate *ps = derive(req, &n);
    size_t *first = checked(calloc(n_agents + 1, sizeof *first));   /* index of the failed predicate, or n */
    json_t *candidates = json_array();
    for (size_t a = 0; a < n_agents; a++) {
        json_array_append_new(candidates, json_string(agents[a].name));
        size_t k = 0;
        while (k < n && satisfies(agents[a].decl, agents[a].name, &ps[k]))
            k++;
        first[a] = k;
    }
    json_t *failed = json_array();
    for (size_t k = 0; k < n; k++)
        for (size_t a = 0; a < n_agents; a++)
            if (first[a] == k)
                json_array_append_new(failed, json_pack("{s:s, s:s}", "candidate", agents[a].name,
                                                        "predicate", ps[k].text));
    json_t *records = json_array();
    json_array_append_new(records, record("task.submitted", json_pack("{s:O}", "requirements", req)));
    long chosen = -1;
    double best = 0.0;
    json_t *scores = json_object();
    char *kind = task_kind(req);
    for (size_t a = 0; a < n_agents; a++) {
        if (first[a] != n)
            continue;
        double total;
        json_object_set_new(scores, agents[a].name, score(agents[a].decl, agents[a].name, req, kind, &total));
        if (chosen < 0 || total > best || (total == best && strcmp(agents[a].name, agents[chosen].name) < 0)) {
            chosen = (long)a;
            best = total;
        }
    }
    free(kind);
    if (chosen < 0) {
        json_array_append_new(records, record("task.rejected", json_pack(
            "{s:s, s:o, s:O, s:O, s:O}", "code", "unschedulable",
            "reason", rejection_reason(n_agents, failed, ps, n), "requirements", req,
            "candidates", candidates, "filters_failed", failed)));
        json_decref(scores);
    } else {
        json_t *decl = agents[chosen].decl;
        json_t *passed = json_array();
        for (size_t k = 0; k < n; k++)
            json_array_append_new(passed, json_string(ps[k].text));
        json_array_append_new(records, record("task.admitted", json_pack("{s:O}", "agent",
                                                                         json_object_get(decl, "agent"))));
        json_array_append_new(records, record("task.bound", json_pack(
            "{s:{s:O, s:O, s:O, s:o, s:O, s:o}}", "scheduling", "requirements", req, "declaration", decl,
            "candidates", candidates, "filters_passed", passed, "filters_failed", failed, "scores", scores)));
    }
    json_decref(candidates);
    json_decref(failed);
    for (size_t k = 0; k < n; k++)
        free(ps[k].text);
    free(ps);
    free(first);
    json_object_set_new(answer, "records", records);
    return 0;
}

/* --- the other operations ----------------------------------------------------------------------- */

static int put_agent(json_t *request, json_t *answer, struct refusal *r)
{
    json_t *decl = json_object_get(request, "declaration");
    const char *name = string_at(request, "name");
    if (valid_declaration(decl, "$.declaration", r))
        return -1;
    if (name && strcmp(name, agent_name(decl)) != 0)
        return refuse(r, 422, "$.declaration.agent.name", "the request's name", agent_name(decl));
    json_object_set_new(answer, "name", json_string(agent_name(decl)));
    json_object_set_new(answer, "created", json_boolean(put(decl)));
    return 0;
}

static int put_agents(json_t *request, json_t *answer, struct refusal *r)
{
    json_t *decls = json_object_get(request, "declarations");
    size_t i;
    json_t *decl;
    if (!json_is_array(decls))
        return refuse(r, 400, "$.declarations", "a list of declarations", "none");
    json_array_foreach(decls, i, decl) {             /* all checked first: a refusal changes nothing */
        char path[48];
        snprintf(path, sizeof path, "$.declarations[%zu]", i);
        if (valid_declaration(decl, path, r))
            return -1;
    }
    json_array_foreach(decls, i, decl)
        put(decl);
    json_object_set_new(answer, "count", json_integer((json_int_t)json_array_size(decls)));
    return 0;
}

static int delete_agent(json_t *request, json_t *answer, struct refusal *r)
{
    const char *name = string_at(request, "name");
    long at = name ? find_agent(name) : -1;
    if (at < 0)
        return refuse(r, 404, "$.name", "an agent of the fleet", name ? name : "none");
    json_object_set_new(answer, "name", json_string(name));
    free(agents[at].name);
    json_decref(agents[at].decl);
    memmove(&agents[at], &agents[at + 1], (n_agents - (size_t)at - 1) * sizeof *agents);
    n_agents--;
    json_object_set_new(answer, "deleted", json_true());
    return 0;
}

static int outcome(json_t *request, json_t *answer, struct refusal *r)
{
    const char *agent = string_at(request, "agent");
    json_t *success = json_object_get(request, "success");
    if (!agent)
        return refuse(r, 400, "$.agent", "an agent's name", "none");
    if (!json_is_boolean(success))
        return refuse(r, 400, "$.success", "true or false", "another value");
    char *kind = string_at(request, "kind") ? copy(string_at(request, "kind"))
                                            : task_kind(json_object_get(request, "requirements"));
    struct history *h = history_of(agent, kind, 1);
    h->successes += json_is_true(success);
    h->attempts++;
    json_object_set_new(answer, "agent", json_string(agent));
    json_object_set_new(answer, "kind", json_string(kind));
    json_object_set_new(answer, "successes", json_integer(h->successes));
    json_object_set_new(answer, "attempts", json_integer(h->attempts));
    free(kind);
    return 0;
}

/* --- the loop ----------------------------------------------------------------------------------- */

static json_t *answer_line(const char *line)
{
    struct refusal r = {0};
    json_error_t error;
    json_t *request = json_loads(line, 0, &error);
    json_t *id = json_object_get(request, "id");
    json_t *answer = json_pack("{s:O?, s:b}", "id", id, "ok", 1);
    int failed;
    const char *op = string_at(request, "op");
    if (!json_is_object(request))
        failed = refuse(&r, 400, "$", "a JSON object", request ? "another value" : error.text);
    else if (!op)
        failed = refuse(&r, 400, "$.op", "put_agent, put_agents, delete_agent, place or outcome", "none");
    else if (strcmp(op, "place") == 0)
        failed = place(request, answer, &r);
    else if (strcmp(op, "put_agents") == 0)
        failed = put_agents(request, answer, &r);
    else if (strcmp(op, "put_agent") == 0)
        failed = put_agent(request, answer, &r);
    else if (strcmp(op, "delete_agent") == 0)
        failed = delete_agent(request, answer, &r);
    else if (strcmp(op, "outcome") == 0)
        failed = outcome(request, answer, &r);
    else
        failed = refuse(&r, 400, "$.op", "put_agent, put_agents, delete_agent, place or outcome", op);
    if (failed) {
        json_decref(answer);
        answer = json_pack("{s:O?, s:b, s:i, s:[{s:s, s:s, s:s}]}", "id", id, "ok", 0, "status", r.status,
                           "problems", "path", r.path, "expected", r.expected, "found", r.found);
    }
    json_decref(request);
    return checked(answer);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--wrong") == 0 && strcmp(argv[2], "residency") == 0)
        wrong = WRONG_RESIDENCY;
    else if (argc == 3 && strcmp(argv[1], "--wrong") == 0 && strcmp(argv[2], "order") == 0)
        wrong = WRONG_ORDER;
    else if (argc != 1) {
        fputs("usage: matcher [--wrong residency|order]\n", stderr);
        return 2;
    }
    char *line = NULL;
    size_t size = 0;
    ssize_t len;
    while ((len = getline(&line, &size, stdin)) != -1) {
        if (strspn(line, " \t\r\n") == (size_t)len)
            continue;
        json_t *answer = answer_line(line);
        char *text = checked(json_dumps(answer, JSON_COMPACT));
        json_decref(answer);
        if (fputs(text, stdout) == EOF || putchar('\n') == EOF || fflush(stdout) == EOF) {
            free(text);
            return 70;
        }
        free(text);
    }
    free(line);
    return 0;
}
