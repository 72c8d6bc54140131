"""The shape of the code: the runtime's modules import each other in one
direction (no cycle, counting imports inside functions), the kernels never
import the runtime, the scheduler knows no kernel module, no source file
grows into a wall, no test module imports another (what tests share is
in tests/helpers.py and the other non-test modules of tests/), and each op's
reference is defined once (the tests look it up by name in the registry).

Imports under ``if TYPE_CHECKING:`` are left out: they never run."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "jitnn"
KERNELS = ROOT / "kernels"
TESTS = ROOT / "tests"

#: the most lines a source file may have, and the Context facade
MAX_LINES = 900
MAX_CONTEXT_LINES = 300


def _module_name(path: pathlib.Path, package_root: pathlib.Path, package: str) -> str:
    parts = list(path.relative_to(package_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package] + parts)


def _runtime_modules() -> dict[str, pathlib.Path]:
    return {_module_name(p, RUNTIME, "jitnn"): p for p in RUNTIME.rglob("*.py")
            if "kernels" not in p.relative_to(RUNTIME).parts}


def _executed_imports(tree: ast.AST):
    """Import nodes that run (skipping ``if TYPE_CHECKING:`` blocks)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _imported(name: str, path: pathlib.Path, node: ast.AST, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that import ``node`` in module ``name`` runs."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in modules}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    if node.level:
        base = package.split(".")[:len(package.split(".")) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    submodules = {f"{target}.{a.name}" for a in node.names} & modules
    if submodules and len(submodules) == len(node.names):
        return submodules                  # from package import module, ...
    return ({target} & modules) | submodules


def import_graph() -> dict[str, set[str]]:
    modules = _runtime_modules()
    names = set(modules) | {"jitnn.kernels"}
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        edges: set[str] = set()
        for node in _executed_imports(tree):
            edges |= _imported(name, path, node, names)
        edges.discard(name)
        graph[name] = {e for e in edges if e != "jitnn.kernels"}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as a list of modules, or None."""
    state: dict[str, int] = {}           # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[module] = 2
        return None
    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_the_runtime_has_no_import_cycle():
    cycle = _cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_kernels_never_import_the_runtime():
    for path in KERNELS.rglob("*.py"):
        for node in _executed_imports(ast.parse(path.read_text())):
            depth = len(path.relative_to(KERNELS).parts) - 1      # packages below kernels/
            if isinstance(node, ast.ImportFrom):
                assert node.level <= depth + 1 and not (node.module or "").startswith("jitnn"), \
                    f"{path.relative_to(ROOT)}:{node.lineno} imports the runtime"
            else:
                assert not any(a.name.startswith("jitnn") for a in node.names), \
                    f"{path.relative_to(ROOT)}:{node.lineno} imports the runtime"


def test_the_scheduler_knows_no_kernel_module():
    for name in ("jitnn.scheduler", "jitnn.passes", "jitnn.plan", "jitnn.plan_cache"):
        path = _runtime_modules().get(name)
        if path is None:
            continue
        for node in _executed_imports(ast.parse(path.read_text())):
            module = getattr(node, "module", None) or ""
            names = [a.name for a in node.names]
            assert "kernels" not in module and "kernels" not in names, \
                f"{name} imports a kernel module (line {node.lineno})"


def test_no_source_file_is_a_wall():
    for path in list(RUNTIME.rglob("*.py")) + list(KERNELS.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines"
    context = len((RUNTIME / "context.py").read_text().splitlines())
    assert context <= MAX_CONTEXT_LINES, f"jitnn/context.py has {context} lines"


def _test_modules_imported(tree: ast.AST) -> set[str]:
    """The ``tests/test_*`` modules a module of tests/ imports, anywhere in it."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level > 1 or (node.level == 0 and (node.module or "").split(".")[0] != "tests"):
                continue
            base = node.module if node.level == 0 else ".".join(
                part for part in ("tests", node.module) if part)
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if len(parts) == 2 and parts[0] == "tests" and parts[1].startswith("test_"):
                found.add(name)
    return found


def test_no_test_module_imports_another():
    for path in sorted(TESTS.glob("test_*.py")):
        imported = _test_modules_imported(ast.parse(path.read_text()))
        assert not imported, f"{path.relative_to(ROOT)} imports {sorted(imported)}"


def test_the_test_import_check_sees_every_form():
    for source in ("from tests.test_a import b", "import tests.test_a",
                   "from .test_a import b", "from . import test_a", "from tests import test_a",
                   "def f():\n    from tests.test_a import b"):
        assert _test_modules_imported(ast.parse(source)) == {"tests.test_a"}, source
    for source in ("from tests.helpers import random", "from .helpers import random",
                   "from tests import helpers", "import test_a.b"):
        assert not _test_modules_imported(ast.parse(source)), source


def _reference_names() -> set[str]:
    """The function names of the registered ops' references."""
    from jitnn import registry
    names = set()
    for op in registry.ops():
        function = getattr(op.reference, "func", op.reference)     # a functools.partial
        names.add(function.__name__)
    return names


def test_each_op_reference_is_defined_once():
    names = _reference_names()
    assert {"conv2d_reference", "binary_reference", "concat_reference"} <= names
    where: dict[str, list[str]] = {}
    for root in (RUNTIME, KERNELS, TESTS):
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                    where.setdefault(node.name, []).append(
                        f"{path.relative_to(ROOT)}:{node.lineno}")
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, f"op references defined more than once: {twice}"
