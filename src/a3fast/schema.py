"""Identifiers (§2), declarations (§3) and requirements (§4): parse and validate.

Parsing collects every problem of a document before raising one SchemaError, so a user fixes a file
in one pass. Fields the schema does not define are kept in `doc` (and so in records) but otherwise
left alone. The parsed objects are immutable; a Requirements carries its derived predicates, so a
caller that places the same task often can parse it once ("prepared requirements").
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping, NamedTuple, TypeGuard

import orjson

from . import document, predicates
from .engines import ENGINE, ingest_module
from .errors import Problem, SchemaError, describe, json_path
from .predicates import derive

__all__ = [
    "IDENTIFIER", "LATENCY_CLASSES", "MAX_VERSION", "MAX_TEXT",
    "AgentName", "Capability", "Model", "Declaration", "Requirements",
    "parse_declaration", "parse_declarations", "parse_requirements", "requirements_reader", "loads", "is_identifier", "task_kind",
]

#: §2 grammar for capability and clearance identifiers.
IDENTIFIER = re.compile(r"[a-z0-9]+(?:\.[a-z0-9-]+)+")
LATENCY_CLASSES = ("interactive", "batch")
SCHEMA_VERSION = re.compile(r"1\.[0-9]+(?:\.[0-9]+)?")
DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")
#: Major versions are bounded so that every implementation can hold one in a signed 64-bit integer.
MAX_VERSION = 2**63 - 1
#: Names, labels and tool names are bounded; a hostile multi-megabyte name is an error, not a key.
MAX_TEXT = 1024
#: The control characters no name, label or tool holds: C0 and DEL (docs/design.md, reading 10).
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_identifier(text: Any) -> bool:
    """True when `text` is a §2 capability or clearance identifier."""
    return isinstance(text, str) and IDENTIFIER.fullmatch(text) is not None


class AgentName(NamedTuple):
    """`{name, namespace}` (§3): the pair identifies the agent across records."""

    name: str
    namespace: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "namespace": self.namespace}


class Capability(NamedTuple):
    """A declared or required capability at one major version; `evaluation` substantiates a claim."""

    name: str
    version: int
    evaluation: Any = None

    @property
    def substantiated(self) -> bool:
        return self.evaluation is not None


class Model(NamedTuple):
    latency_class: str | None = None
    cost_ceiling_usd: str | None = None


# Declarations and requirements are named tuples rather than frozen dataclasses: they are built on
# the placement hot path, and a tuple is built several times faster than a frozen dataclass.

class Declaration(NamedTuple):
    """What an agent declares about itself (§3). `doc` is the document as given, recorded as matched."""

    v: str
    agent: AgentName
    capabilities: tuple[Capability, ...]
    clearances: tuple[str, ...]
    residency: tuple[str, ...] | None = None
    tools: tuple[str, ...] | None = None
    model: Model | None = None
    doc: Mapping[str, Any] = {}

    @classmethod
    def parse(cls, obj: Any) -> "Declaration":
        return parse_declaration(obj)

    @property
    def name(self) -> str:
        return self.agent.name

    def to_dict(self) -> dict[str, Any]:
        return dict(self.doc)


class Requirements(NamedTuple):
    """What a task requires (§4), with `agentRef` and `exclude` (docs/design.md, reading 2).

    `predicates` is the derived predicate set in derivation order (§5, docs/design.md, reading 1); parse once
    and place many times ("prepared requirements").
    """

    v: str | None = None
    capabilities: tuple[Capability, ...] = ()
    clearances: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    residency: str | None = None
    latency_class: str | None = None
    session: str | None = None
    agent_ref: str | None = None
    exclude: tuple[str, ...] = ()
    kind: str | None = None
    doc: Mapping[str, Any] = {}
    predicates: tuple[str, ...] = ()

    @classmethod
    def parse(cls, obj: Any) -> "Requirements":
        return parse_requirements(obj)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.doc)


def _requirements(v, capabilities, clearances, tools, residency, latency, session, agent_ref, exclude,
                  kind, doc) -> Requirements:
    predicates = derive(capabilities, clearances, tools, residency, latency, agent_ref, exclude)
    return Requirements(v, capabilities, clearances, tools, residency, latency, session, agent_ref,
                        exclude, kind, doc, predicates)


def task_kind(requirements: Requirements) -> str:
    """The kind a task's success history is kept under: its `kind` field if it states one, else its
    required capabilities (sorted predicate strings joined by '+'; '*' for a task that needs none)."""
    if requirements.kind is not None:
        return requirements.kind
    caps = sorted({f"{c.name}/{c.version}" for c in requirements.capabilities})
    return "+".join(caps) if caps else "*"


class ProblemReader:
    """Collects problems while walking one document: every reader of a document (§3, §4, and the
    authority documents) names each problem by its JSON path, what it expected and what it found."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def fail(self, path: str, expected: str, value: Any, found: str | None = None) -> None:
        self.problems.append(Problem(path, expected, found if found is not None else describe(value)))

    def obj(self, value: Any, path: str) -> Mapping[str, Any] | None:
        if isinstance(value, Mapping):
            return value
        self.fail(path, "an object", value)
        return None

    def text(self, value: Any, path: str, what: str = "a non-empty string") -> str | None:
        if not isinstance(value, str) or not value:
            self.fail(path, what, value)
            return None
        if len(value) > MAX_TEXT:
            self.fail(path, f"at most {MAX_TEXT} characters", value, f"{len(value)} characters")
            return None
        if CONTROL.search(value):
            self.fail(path, "no control characters", value)
            return None
        return value

    def identifier(self, value: Any, path: str, what: str) -> str | None:
        if is_identifier(value):
            return value
        self.fail(path, f"a {what} identifier matching [a-z0-9]+(\\.[a-z0-9-]+)+", value)
        return None

    def version(self, value: Any, path: str) -> int | None:
        # bool is a subclass of int in Python; a JSON true is not a version.
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_VERSION:
            return value
        self.fail(path, "a major version (an integer from 0 to 2^63-1)", value)
        return None

    def schema_version(self, value: Any, path: str) -> str | None:
        if isinstance(value, str) and SCHEMA_VERSION.fullmatch(value):
            return value
        if isinstance(value, str) and re.fullmatch(r"[0-9]+(\.[0-9]+){0,2}", value):
            self.fail(path, "schema version 1.x (a3fast reads A3 Capability Schema 1)", value,
                      f"unsupported version {value!r}")
        else:
            self.fail(path, "a schema version string such as \"1.0\"", value)
        return None

    def array(self, value: Any, path: str) -> list[Any]:
        if isinstance(value, list):
            return value
        self.fail(path, "an array", value)
        return []

    def texts(self, value: Any, path: str, what: str = "a non-empty string") -> tuple[str, ...]:
        out = []
        for i, item in enumerate(self.array(value, path)):
            parsed = self.text(item, json_path(path, i), what)
            if parsed is not None:
                out.append(parsed)
        return tuple(out)

    def identifiers(self, value: Any, path: str, what: str) -> tuple[str, ...]:
        out = []
        for i, item in enumerate(self.array(value, path)):
            parsed = self.identifier(item, json_path(path, i), what)
            if parsed is not None:
                out.append(parsed)
        return tuple(out)

    def capabilities(self, value: Any, path: str, declared: bool) -> tuple[Capability, ...]:
        out = []
        for i, item in enumerate(self.array(value, path)):
            item_path = json_path(path, i)
            entry = self.obj(item, item_path)
            if entry is None:
                continue
            missing = [k for k in ("name", "version") if k not in entry]
            for key in missing:
                self.fail(json_path(item_path, key), f"the capability's {key}", None, "nothing")
            if missing:
                continue
            name = self.identifier(entry["name"], json_path(item_path, "name"), "capability")
            version = self.version(entry["version"], json_path(item_path, "version"))
            evaluation = entry.get("evaluation") if declared else None
            if name is not None and version is not None:
                out.append(Capability(name, version, evaluation))
        return tuple(out)

    def model(self, value: Any, path: str, declared: bool) -> Model | None:
        entry = self.obj(value, path)
        if entry is None:
            return None
        latency = entry.get("latency_class")
        if latency is not None and latency not in LATENCY_CLASSES:
            self.fail(json_path(path, "latency_class"), "\"interactive\" or \"batch\"", latency)
            latency = None
        cost = entry.get("cost_ceiling_usd") if declared else None
        if cost is not None and not (isinstance(cost, str) and DECIMAL.fullmatch(cost)):
            self.fail(json_path(path, "cost_ceiling_usd"), "a decimal string such as \"0.75\"", cost)
            cost = None
        return Model(latency, cost)

    def raise_if_any(self) -> None:
        if self.problems:
            raise SchemaError(self.problems)

    def document(self, value: Any, path: str) -> Mapping[str, Any]:
        """The object at `path`, or a SchemaError now: none of its fields can be read without it."""
        doc = self.obj(value, path)
        if doc is None:
            raise SchemaError(self.problems)
        # another kind of mapping (a mappingproxy, a UserDict) is read as the dict it holds: what is
        # kept as the document is written to records and snapshots, which take JSON's types only
        return doc if type(doc) is dict else dict(doc)

    def check_document(self, value: Any, path: str) -> None:
        """The rule for every document (a3fast.document), for what the fields above do not read;
        a path already named by a problem above is not named twice."""
        named = {p.path for p in self.problems}
        self.problems += [p for p in document.check(value, path) if p.path not in named]


# -- fast path ---------------------------------------------------------------------------------------
# A fleet repeats a small vocabulary thousands of times, so strings already seen to be valid are
# remembered (bounded) and a valid document is checked with set lookups instead of regexes. When the
# fast path refuses a document, the reader below walks it again to name every problem precisely
# (why not a validation library here: the README's design notes).
_MEMO_LIMIT = 1 << 16
_valid_identifiers: set[str] = set()
_valid_texts: set[str] = set()


def _identifier_ok(value: Any) -> TypeGuard[str]:
    if type(value) is not str:
        return False
    if value in _valid_identifiers:
        return True
    if IDENTIFIER.fullmatch(value):
        if len(_valid_identifiers) < _MEMO_LIMIT:
            _valid_identifiers.add(value)
        return True
    return False


def _text_ok(value: Any) -> TypeGuard[str]:
    if type(value) is not str:
        return False
    if value in _valid_texts:
        return True
    if 0 < len(value) <= MAX_TEXT and not CONTROL.search(value):
        if len(_valid_texts) < _MEMO_LIMIT:
            _valid_texts.add(value)
        return True
    return False


def _fast_capabilities(items: Any, declared: bool) -> tuple[Capability, ...] | None:
    if type(items) is not list:
        return None
    out = []
    for c in items:
        if type(c) is not dict:
            return None
        name, version = c.get("name"), c.get("version")
        if type(version) is not int or type(name) is not str:  # (bool is not int here)
            return None
        if not declared:  # a required capability is its name and version: one shared tuple
            versions = _required_capabilities.get(name)
            known = versions.get(version) if versions is not None else None
            if known is not None:
                out.append(known)
                continue
        if not (0 <= version <= MAX_VERSION and _identifier_ok(name)):
            return None
        if declared:
            out.append(Capability(name, version, c.get("evaluation")))
        else:
            known = Capability(name, version, None)
            _keep_required(name, version, known)
            out.append(known)
    return tuple(out)


#: Required capabilities already checked, by name, then version: tasks repeat a small vocabulary.
#: By name first, not by a (name, version) tuple: a string keeps its hash, while a tuple made for
#: each lookup is hashed and compared afresh, a third of the cost of reading a required capability
#: (docs/performance.md, "A wave set up in place, and required capabilities by name").
_required_capabilities: dict[str, dict[int, Capability]] = {}
#: The memo's bounds: at most this many versions of a name, and as many names as keeps it to
#: _MEMO_LIMIT capabilities in all.
_VERSIONS_KEPT = 16
_NAMES_KEPT = _MEMO_LIMIT // _VERSIONS_KEPT


def _keep_required(name: str, version: int, known: Capability) -> None:
    """`known` memoised, within the bounds (else not)."""
    versions = _required_capabilities.get(name)
    if versions is None:
        if len(_required_capabilities) >= _NAMES_KEPT:
            return
        versions = _required_capabilities[name] = {}
    if len(versions) < _VERSIONS_KEPT:
        versions[version] = known


def _fast_list(items: Any, ok) -> tuple[str, ...] | None:
    if type(items) is not list:
        return None
    for item in items:
        if not ok(item):
            return None
    return tuple(items)


def _fast_declaration(doc: dict) -> Declaration | None:
    v, agent = doc.get("v"), doc.get("agent")
    if type(v) is not str or not SCHEMA_VERSION.fullmatch(v) or type(agent) is not dict:
        return None
    name, namespace = agent.get("name"), agent.get("namespace")
    if not (_text_ok(name) and _text_ok(namespace)):
        return None
    capabilities = _fast_capabilities(doc.get("capabilities"), True)
    clearances = _fast_list(doc.get("clearances"), _identifier_ok)
    if capabilities is None or clearances is None:
        return None
    residency = tools = model = None
    if doc.get("residency") is not None and (residency := _fast_list(doc["residency"], _text_ok)) is None:
        return None
    if doc.get("tools") is not None and (tools := _fast_list(doc["tools"], _text_ok)) is None:
        return None
    if doc.get("model") is not None:
        m = doc["model"]
        if type(m) is not dict:
            return None
        latency, cost = m.get("latency_class"), m.get("cost_ceiling_usd")
        if latency is not None and latency not in LATENCY_CLASSES:
            return None
        if cost is not None and not (type(cost) is str and DECIMAL.fullmatch(cost)):
            return None
        model = Model(latency, cost)
    return Declaration(v, AgentName(name, namespace), capabilities, clearances, residency, tools, model, doc)


def check_text_argument(value: Any, name: str) -> str:
    """A session or task kind given as an argument: a string that UTF-8 can write (no lone
    surrogate), which is what a record, a journal entry and a snapshot can carry. ValueError naming
    `name` otherwise, before anything changes. Not held to the text rule of a document's field
    (reading 10): a kind derived from requirements (`task_kind`) may be longer, and journals and
    traces written before may hold sessions it refuses; a service holds its requests to it."""
    if isinstance(value, str) and type(value) is not str:
        raise ValueError(f"{name}: expected a string of type str itself, found an instance of "
                         f"{type(value).__name__}, a subclass of str")
    if type(value) is not str:
        raise ValueError(f"{name}: expected a string, found {describe(value)}")
    if not _writable(value):
        raise ValueError(f"{name}: expected text UTF-8 can write, found a lone surrogate")
    return value


def is_text(value: Any) -> bool:
    """The text rule of a document's field (reading 10): a non-empty string of at most MAX_TEXT
    characters, no control character, that UTF-8 can write."""
    return _text_ok(value) and _writable(value)


def _writable(text: str) -> bool:
    """Whether UTF-8 can write the string (it holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _listed(doc: Mapping[str, Any], key: str) -> Any:
    """A requirements list member, [] when absent or null."""
    value = doc.get(key)
    return [] if value is None else value


def _fast_requirements(doc: dict) -> Requirements | None:
    v = doc.get("v")
    if v is not None and not (type(v) is str and SCHEMA_VERSION.fullmatch(v)):
        return None
    capabilities = _fast_capabilities(_listed(doc, "capabilities"), False)
    clearances = _fast_list(_listed(doc, "clearances"), _identifier_ok)
    tools = _fast_list(_listed(doc, "tools"), _text_ok)
    exclude = _fast_list(doc.get("exclude") or [], _text_ok)     # reading 11: a false value excludes nobody
    if capabilities is None or clearances is None or tools is None or exclude is None:
        return None
    single = (doc.get("residency"), doc.get("session"), doc.get("agentRef"), doc.get("kind"))
    for value in single:
        if value is not None and not (type(value) is str and value in _valid_texts) and not _text_ok(value):
            return None
    latency = None
    if doc.get("model") is not None:
        m = doc["model"]
        if type(m) is not dict:
            return None
        latency = m.get("latency_class")
        if latency is not None and latency not in LATENCY_CLASSES:
            return None
    residency, session, agent_ref, kind = single
    return _requirements(v, capabilities, clearances, tools, residency, latency, session, agent_ref,
                         exclude, kind, doc)


def _python_requirements(doc: dict, decoded: bool = False) -> Requirements | None:
    """The fast path in Python, and the document rule unless `doc` came from a JSON decoder:
    what reads a plain dict where no compiled reader is built (the pure engine)."""
    fast = _fast_requirements(doc)
    if fast is not None and (decoded or document.conforms(doc)):
        return fast
    return None


def requirements_reader(engine: str | None = None) -> Callable[[dict, bool], Requirements | None]:
    """The reader of plain requirements documents on `engine` (None: the default engine): given a
    dict and whether it came from a JSON decoder, it returns the Requirements `parse_requirements`
    returns for it, or None, and then the careful reader reads it and names its problems. Native:
    the compiled reader (`a3fast._ingest`), which checks the document rule too; pure: the fast
    path above. Both share this module's memo of required capabilities and `derive`'s memo
    (the compiled reader derives a new set itself, as `derive` does)."""
    compiled = ingest_module(engine or ENGINE).requirements_reader(
        Requirements, Capability, _required_capabilities, _NAMES_KEPT, _VERSIONS_KEPT, predicates.DERIVED,
        predicates.DERIVED_LIMIT, predicates.DERIVED_ONCE)
    return compiled.read if compiled is not None else _python_requirements


#: What `parse_requirements` reads a plain dict with: the default engine's reader.
_read_requirements = requirements_reader()


def _texts(values: Any) -> bool:
    if type(values) is not tuple:
        return False
    for value in values:
        if type(value) is not str:
            return False
    return True


def _as_parsed(decl: Declaration) -> bool:
    """Whether a Declaration's fields have the types `parse_declaration` gives them (one a caller
    built by hand may hold anything: a string of clearances would be read as its characters)."""
    v, agent, capabilities, clearances, residency, tools, model, doc = decl
    if type(v) is not str or type(agent) is not AgentName or type(agent[0]) is not str \
            or type(agent[1]) is not str or type(capabilities) is not tuple or not _texts(clearances) \
            or not (residency is None or _texts(residency)) or not (tools is None or _texts(tools)) \
            or not isinstance(doc, Mapping):
        return False
    for capability in capabilities:
        if type(capability) is not Capability or type(capability[0]) is not str or type(capability[1]) is not int:
            return False
    if model is not None and (type(model) is not Model or not (model[0] is None or type(model[0]) is str)
                              or not (model[1] is None or type(model[1]) is str)):
        return False
    return True


def parse_declarations(documents: Iterable[Any]) -> list[Declaration]:
    """Each of a batch's declarations parsed (`parse_declaration`), in order; a SchemaError names
    the one refused by its place in the batch (`$[499].clearances`)."""
    parsed = []
    for i, document in enumerate(documents):
        try:
            parsed.append(parse_declaration(document))
        except SchemaError as exc:
            raise exc.with_source(exc.source, f"$[{i}]") from None
    return parsed


def parse_declaration(obj: Any, path: str = "$") -> Declaration:
    """Parse a §3 declaration from a dict; a Declaration is returned as it is, once its fields are
    of the types this makes them (TypeError otherwise: one built by hand is not checked further)."""
    if isinstance(obj, Declaration):
        if type(obj) is Declaration and _as_parsed(obj):
            return obj
        raise TypeError(f"{path}: a Declaration whose fields are not of the types parse_declaration gives "
                        f"them (or of a class of its own); give the document (a dict), or what "
                        f"parse_declaration made of it")
    if type(obj) is dict:
        fast = _fast_declaration(obj)
        if fast is not None and document.conforms(obj):
            return fast
    r = ProblemReader()
    doc = r.document(obj, path)
    for key in ("v", "agent", "capabilities", "clearances"):
        if key not in doc:
            r.fail(json_path(path, key), f"the required field {key!r}", None, "nothing")
    v = r.schema_version(doc["v"], json_path(path, "v")) if "v" in doc else None
    agent = None
    if "agent" in doc:
        agent_doc = r.obj(doc["agent"], json_path(path, "agent"))
        if agent_doc is not None:
            apath = json_path(path, "agent")
            name = r.text(agent_doc.get("name"), json_path(apath, "name"), "the agent's name (a non-empty string)")
            namespace = r.text(agent_doc.get("namespace"), json_path(apath, "namespace"),
                               "the agent's namespace (a non-empty string)")
            if name is not None and namespace is not None:
                agent = AgentName(name, namespace)
    capabilities = r.capabilities(doc.get("capabilities", []), json_path(path, "capabilities"), True)
    clearances = r.identifiers(doc.get("clearances", []), json_path(path, "clearances"), "clearance")
    residency = tools = model = None
    if doc.get("residency") is not None:
        residency = r.texts(doc["residency"], json_path(path, "residency"), "a residency label")
    if doc.get("tools") is not None:
        tools = r.texts(doc["tools"], json_path(path, "tools"), "a tool name")
    if doc.get("model") is not None:
        model = r.model(doc["model"], json_path(path, "model"), True)
    r.check_document(doc, path)
    r.raise_if_any()
    assert v is not None and agent is not None  # the reader leaves None only beside a problem
    return Declaration(v, agent, capabilities, clearances, residency, tools, model, doc)


def parse_requirements(obj: Any, path: str = "$", *, decoded: bool = False) -> Requirements:
    """Parse a §4 requirements document (or return a Requirements as is); derives its predicates.
    `decoded`: `obj` is (part of) a value `document.loads` returned, which keeps the document rule
    already, so the rule is not checked again (a service decodes each request once)."""
    if isinstance(obj, Requirements):
        return obj
    if type(obj) is dict:
        fast = _read_requirements(obj, decoded)
        if fast is not None:
            return fast
    r = ProblemReader()
    doc = r.document(obj, path)
    # null counts as absent for `v`, as for every optional field of requirements
    v = r.schema_version(doc["v"], json_path(path, "v")) if doc.get("v") is not None else None
    # a list given as null is no list, as absent (reading 11); any other value that is no list is refused
    capabilities = r.capabilities(_listed(doc, "capabilities"), json_path(path, "capabilities"), False)
    clearances = r.identifiers(_listed(doc, "clearances"), json_path(path, "clearances"), "clearance")
    tools = r.texts(_listed(doc, "tools"), json_path(path, "tools"), "a tool name")
    residency = latency = session = agent_ref = kind = None
    if doc.get("residency") is not None:
        residency = r.text(doc["residency"], json_path(path, "residency"), "a residency label (a string)")
    if doc.get("model") is not None:
        model = r.model(doc["model"], json_path(path, "model"), False)
        latency = model.latency_class if model else None
    if doc.get("session") is not None:
        session = r.text(doc["session"], json_path(path, "session"), "a session identifier (a string)")
    if doc.get("agentRef") is not None:
        agent_ref = r.text(doc["agentRef"], json_path(path, "agentRef"), "an agent name (a string)")
    if doc.get("kind") is not None:
        kind = r.text(doc["kind"], json_path(path, "kind"), "a task kind (a string)")
    exclude = r.texts(doc.get("exclude") or [], json_path(path, "exclude"), "an agent name")
    r.check_document(doc, path)
    r.raise_if_any()
    return _requirements(v, capabilities, clearances, tools, residency, latency, session, agent_ref,
                         exclude, kind, doc)


def loads(data: bytes | str, source: str | None = None) -> Any:
    """Parse JSON text under the document rule (a3fast.document): invalid JSON, nesting deeper than
    128, an integer beyond 64 bits or a lone surrogate becomes a SchemaError naming the source and
    the place; nothing else is raised."""
    return document.loads(data, source)
