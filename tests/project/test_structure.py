"""The shape of the package: no import cycles, lazy imports included; no module reads another's
private names; benchmarks are never imported by the library."""
from __future__ import annotations

import ast
from pathlib import Path

import a3fast

PACKAGE = Path(a3fast.__file__).parent
#: The one switch point imports the two engine modules, whose names are private to the package.
SWITCH_POINT = {"a3fast.engines": {"_core", "_pure", "_ingest", "_ingest_pure"}}
#: Public names that start with an underscore: a named tuple's methods.
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}
#: Private attributes of a library's objects a module reads on purpose, each with why. The
#: Kubernetes client's Watch keeps the streaming response only in `_resp`: stopping a quiet watch at
#: once needs that response's shutdown() (tests/service/test_k8s_watch.py holds the behaviour).
LIBRARY_PRIVATE = {"a3fast.service.k8s_watch": {"_resp"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))}


def resolve(current: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def runtime_nodes(tree: ast.AST):
    """Every node of the code that can run: all of it but `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """Every a3fast module `name` imports when it runs, at any depth of its code (lazy imports too)."""
    is_package = (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()
    out: set[str] = set()
    for node in runtime_nodes(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(name, is_package, node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)):
            targets = [node.args[0].value]
        for target in targets:
            if target in known and target != name and not name.startswith(target + "."):
                out.add(target)  # importing a parent package is part of importing any module in it
    return out


def test_no_import_cycles():
    trees = modules()
    known = set(trees)
    graph = {name: imports(name, tree, known) for name, tree in trees.items()}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def own_private_names(tree: ast.Module) -> set[str]:
    """The private names a module defines for its own objects: its functions and methods, and the
    attributes its code assigns (`self._x = ...`), which its code may read on any of them."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
    return {n for n in names if n.startswith("_")}


def test_no_module_reads_another_modules_private_names():
    found = []
    for name, tree in modules().items():
        allowed = SWITCH_POINT.get(name, set())
        own = own_private_names(tree) | NAMEDTUPLE_API | LIBRARY_PRIVATE.get(name, set())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                found += [f"{name}:{node.lineno} imports {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__") and a.name not in allowed]
            elif (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                  and not node.attr.startswith("__") and node.attr not in own):
                found.append(f"{name}:{node.lineno} reads {ast.unparse(node)}")
    assert found == []


def test_the_library_never_imports_its_benchmarks():
    trees = modules()
    known = set(trees)
    for name, tree in trees.items():
        if name.startswith("a3fast.bench") or name == "a3fast.cli.bench_cmd":
            continue
        assert not {m for m in imports(name, tree, known) if m.startswith("a3fast.bench")}, name


#: The core modules: what places and records, beneath the packages that draw, serve or import.
CORE = ("a3fast.fleet", "a3fast.fleet.placement", "a3fast.record", "a3fast.schema", "a3fast.fleet.scoring",
        "a3fast.predicates", "a3fast.engines", "a3fast.notebook")


def test_the_core_never_imports_the_report_package():
    # the report package registers the notebook views of the core types (a3fast.notebook)
    trees = modules()
    known = set(trees)
    for name, tree in trees.items():
        if name.startswith(CORE):
            assert not {m for m in imports(name, tree, known) if m.startswith("a3fast.report")}, name


def test_a_placement_is_made_in_one_place():
    # the placing pipeline's prepare stage (a Placement is each task's cycle state from then on);
    # every other module gets its Placements from a fleet
    makers = set()
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = ast.unparse(node.func)
                given = {ast.unparse(arg) for arg in node.args}
                if (called in ("Placement", "placement.Placement", "Placement.__init__")
                        or (called.endswith("__new__") or called == "_new_placement")
                        and given & {"Placement", "placement.Placement"}):
                    makers.add(name)
    assert makers == {"a3fast.fleet.pipeline"}


def test_every_command_module_ends_in_cmd_and_the_helpers_do_not():
    """Each module a subcommand lives in is named `NAME_cmd`; what they share is plainly named."""
    from a3fast.cli import COMMANDS

    cli = Path(a3fast.__file__).parent / "cli"
    commands = {target.split(":")[0] for target in COMMANDS.values()}
    assert all(name.endswith("_cmd") for name in commands), sorted(commands)
    modules = {p.stem for p in cli.glob("*.py")} - {"__init__"}
    assert modules - commands == {"common", "extras", "fleet_input", "trace_input"}
