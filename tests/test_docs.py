"""The docs stay true and short: README.md, docs/*.md and benchmarks/RESULTS.md.

* The README starts with the two set-up commands that .ci/run runs, and stays
  a product README (under 220 lines); RESULTS.md holds current figures only
  (under 650 lines).
* No doc tells work history: no "session " (as a word), no scratch path
  ("/tmp/"), no "at commit" narrative. History is in git.
* Every function the docs name in backticks exists. Two forms are checked:
  an import path, ``jitnn.kernels.conv2d._conv_tiles`` or
  ``jitnn.context.Context.record``, and a file and a name,
  ``kernels/conv2d.py: _conv_tiles``. Names are resolved from the source,
  without importing jitnn (this module runs in well under a second): an
  import path walks modules and packages (``jitnn.kernels`` is the top-level
  ``kernels/`` folder), a package's name is searched in all its modules, a
  name a module imports is followed to its definition, and a dotted rest
  (``Context.record``, ``_make_conv_driver.conv_driver``) is looked up inside
  the definition before it. A kernel's name is also found anywhere in the
  ``kernels/`` tree, and a file-form name anywhere under the file's top
  folder, so splitting a kernel module into a package (``kernels/conv2d.py``
  into ``kernels/conv2d/``) does not break the docs, but renaming or removing
  a function does.
"""

from __future__ import annotations

import ast
import functools
import re
import shlex
from pathlib import Path

import pytest

from jitnn import registry

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
ALL_DOCS = [README, RESULTS, *DOCS]

README_MAX_LINES = 220
RESULTS_MAX_LINES = 650

#: work history that belongs in git, not in the docs
FORBIDDEN = {
    '"session " as a word': re.compile(r"\bsession\s", re.IGNORECASE),
    "a scratch path /tmp/": re.compile(r"/tmp/"),
    '"at commit"': re.compile(r"\bat\s+commit\b", re.IGNORECASE),
}

#: ``jitnn.a.b.c`` (an optional ``()`` after it)
DOTTED = re.compile(r"^(jitnn(?:\.[A-Za-z_]\w*)+)(?:\(\))?$")
#: ``path/to/file.py: name`` or ``...: Class.method``
FILE_NAME = re.compile(r"^([\w./-]+\.py):\s*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:\(\))?$")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^\s*(```|~~~)")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _inline_code(path: Path) -> list[str]:
    """Backticked spans outside fenced code blocks."""
    spans, fenced = [], False
    for line in _text(path).splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            spans += INLINE_CODE.findall(line)
    return spans


# --- the README and .ci/run ------------------------------------------------------------

def _ci_commands() -> list[str]:
    """The set-up commands .ci/run runs: its ``pip install`` lines."""
    commands = []
    for line in _text(ROOT / ".ci" / "run").splitlines():
        line = line.strip()
        if line.startswith("pip install"):
            commands.append(line)
    return commands


def _first_code_block(text: str) -> list[str]:
    lines, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            if inside:
                return lines
            inside = True
            continue
        if inside:
            lines.append(line)
    return lines


def _command_of(line: str) -> str:
    """A shell line without its comment, whitespace normalized."""
    words = shlex.split(line, comments=True)
    return shlex.join(words)


def test_ci_runs_two_setup_commands():
    commands = _ci_commands()
    assert [_command_of(c) for c in commands] == [
        _command_of('pip install -e . && jitnn demo'),
        _command_of('pip install -e ".[test]" && pytest')], commands


def test_readme_starts_with_the_ci_commands():
    block = [line for line in _first_code_block(_text(README)) if line.strip()]
    commands = _ci_commands()
    assert [_command_of(line) for line in block[:len(commands)]] == \
        [_command_of(c) for c in commands], \
        f"README's first code block must start with .ci/run's commands {commands}, got {block}"


def test_readme_is_short():
    lines = len(_text(README).splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES - 1})"


def test_results_hold_current_figures_only():
    lines = len(_text(RESULTS).splitlines())
    assert lines < RESULTS_MAX_LINES, \
        f"benchmarks/RESULTS.md has {lines} lines (at most {RESULTS_MAX_LINES - 1})"


@pytest.mark.parametrize("path", ALL_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_work_history(path):
    found = []
    for number, line in enumerate(_text(path).splitlines(), 1):
        for what, pattern in FORBIDDEN.items():
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()[:100]}")
    assert not found, "work history in the docs (it belongs in git):\n" + "\n".join(found)


def test_tutorial_cites_no_line_numbers():
    text = _text(ROOT / "docs" / "tutorial.md")
    cited = re.findall(r"\blines? \d+(?:\s*-\s*\d+)?\b", text)
    assert not cited, f"docs/tutorial.md cites line numbers {cited}: name the function instead"


# --- names in the docs -------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _package_dir(parts: tuple[str, ...]) -> Path:
    """``jitnn`` -> jitnn/, ``jitnn.kernels`` -> kernels/ (the package-dir mapping)."""
    if len(parts) >= 2 and parts[1] == "kernels":
        return ROOT.joinpath("kernels", *parts[2:])
    return ROOT.joinpath(*parts)


#: the top packages: a name under them is looked up in their ``__init__.py``
#: only (not in every module of the runtime or of the kernels)
_ROOTS = (ROOT / "jitnn", ROOT / "kernels")


def _files_of(target: Path) -> list[Path]:
    """The source files of a module: ``x.py``, and package ``x/``: its
    ``__init__.py``, then every module in it (a module split into a package
    keeps its names findable); a top package's ``__init__.py`` alone."""
    files = []
    if target.with_suffix(".py").is_file():
        files.append(target.with_suffix(".py"))
    if target.is_dir():
        init = target / "__init__.py"
        if init.is_file():
            files.append(init)
        if target not in _ROOTS:
            files += sorted(p for p in target.rglob("*.py") if p != init)
    return files


def _definitions(body) -> dict[str, ast.AST]:
    """Names bound at the top of ``body``: defs, classes, assignments, imports."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.setdefault(node.name, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names.setdefault(name.id, node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.setdefault((alias.asname or alias.name).split(".")[0], node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                names.update({k: v for k, v in _definitions(getattr(node, block, [])).items()
                              if k not in names})
            for handler in getattr(node, "handlers", []):
                names.update({k: v for k, v in _definitions(handler.body).items()
                              if k not in names})
    return names


def _nested(node: ast.AST, name: str) -> ast.AST | None:
    """A def, class or assignment named ``name`` anywhere inside ``node``
    (a method, a closure, a class attribute)."""
    for inner in ast.walk(node):
        if inner is node:
            continue
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and inner.name == name:
            return inner
        if isinstance(inner, (ast.Assign, ast.AnnAssign)):
            targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == name:
                    return inner
                if isinstance(target, ast.Attribute) and target.attr == name:
                    return inner          # self.name = ... in a method
    return None


def _import_target(path: Path, node: ast.ImportFrom, name: str) -> tuple[str, ...] | None:
    """The dotted module an ``from X import name`` in ``path`` reads ``name`` from."""
    if node.level:
        module_parts = _module_parts(path)
        package = module_parts if path.name == "__init__.py" else module_parts[:-1]
        base = package[:len(package) - node.level + 1]
    else:
        base = ()
    return tuple(base) + (tuple(node.module.split(".")) if node.module else ())


def _module_parts(path: Path) -> tuple[str, ...]:
    relative = path.relative_to(ROOT).with_suffix("").parts
    if relative[0] == "kernels":
        relative = ("jitnn",) + relative
    if relative[-1] == "__init__":
        relative = relative[:-1]
    return tuple(relative)


_REGISTERED_OPS = {op.name for op in registry.ops()}


def _resolve_in_files(files: list[Path], rest: list[str], depth: int = 0) -> bool:
    """``rest[0]`` defined at the top of one of ``files`` (following an import
    of it), and each later part of ``rest`` inside the definition before it."""
    if depth > 8:
        return False
    for path in files:
        node = _definitions(_tree(path).body).get(rest[0])
        if node is None:
            continue
        if isinstance(node, ast.ImportFrom):
            module = _import_target(path, node, rest[0])
            original = next((a.name for a in node.names
                             if (a.asname or a.name) == rest[0]), rest[0])
            if module and _resolve_dotted(module + (original,) + tuple(rest[1:]), depth + 1):
                return True
            continue
        if isinstance(node, ast.Import):
            return True                   # a module imported under this name
        found = node
        for part in rest[1:]:
            found = _nested(found, part)
            if found is None:
                break
        if found is not None:
            return True
    return False


def _resolve_dotted(parts: tuple[str, ...], depth: int = 0) -> bool:
    """Whether ``jitnn.<...>`` names a module, package or a definition in one."""
    if len(parts) >= 2 and parts[0] == "jitnn" and parts[1] in _REGISTERED_OPS:
        # jitnn.<op> is set from the op registry: follow it to the op's function
        function = registry.op(parts[1]).function
        parts = tuple(function.__module__.split(".")) + (function.__name__,) + parts[2:]
    for split in range(len(parts), 0, -1):
        files = _files_of(_package_dir(parts[:split]))
        if not files:
            continue
        rest = list(parts[split:])
        if not rest:
            return True                   # the module or package itself
        return _resolve_in_files(files, rest, depth)
    return False


def _resolve(name: str) -> bool:
    parts = tuple(name.split("."))
    if _resolve_dotted(parts):
        return True
    if len(parts) >= 3 and parts[1] == "kernels":
        # a kernel moved within the kernels/ tree (a module split into a
        # package): the rest of the name after any module part, anywhere
        tree = sorted((ROOT / "kernels").rglob("*.py"))
        return any(_resolve_in_files(tree, list(parts[split:]))
                   for split in range(3, len(parts)))
    return False


def _resolve_file_form(filename: str, name: str) -> bool:
    target = ROOT / filename
    rest = name.split(".")
    candidates = _files_of(target.with_suffix(""))
    if candidates and _resolve_in_files(candidates, rest):
        return True
    # the named file split or moved: search its top folder (kernels/, jitnn/, tests/)
    top = ROOT / Path(filename).parts[0]
    return top.is_dir() and _resolve_in_files(sorted(top.rglob("*.py")), rest)


def _named_functions(path: Path) -> list[tuple[str, str]]:
    """``(form, name)`` of every checked name in ``path``'s inline code."""
    names = []
    for span in _inline_code(path):
        span = span.strip()
        dotted = DOTTED.match(span)
        if dotted:
            names.append(("dotted", dotted.group(1)))
            continue
        file_form = FILE_NAME.match(span)
        if file_form:
            names.append((file_form.group(1), file_form.group(2)))
    return names


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_named_functions_exist(path):
    missing = []
    for form, name in _named_functions(path):
        ok = _resolve(name) if form == "dotted" else _resolve_file_form(form, name)
        if not ok:
            missing.append(name if form == "dotted" else f"{form}: {name}")
    assert not missing, (f"{path.relative_to(ROOT)} names what the code does not define "
                         f"(renamed or removed?): {sorted(set(missing))}")


#: a path in the repository: ``jitnn/ops/lrn.py``, ``kernels/``, ``docs/demo.png``
REPO_PATH = re.compile(r"^(?:README\.md|LICENSE|pyproject\.toml|\.ci/run|"
                       r"(?:benchmarks|docs|jitnn|kernels|tests)(?:/[\w.-]+)*/?)$")


@pytest.mark.parametrize("path", ALL_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_files_exist(path):
    """Every repository path the docs name exists (a module split into a
    package of the same name counts: ``kernels/conv2d.py`` is ``kernels/conv2d/``)."""
    missing = []
    for span in _inline_code(path):
        span = span.strip()
        if not REPO_PATH.match(span):
            continue
        target = ROOT / span
        if not (target.exists() or (target.suffix == ".py" and target.with_suffix("").is_dir())):
            missing.append(span)
    assert not missing, f"{path.relative_to(ROOT)} names files that do not exist: {missing}"


def test_tutorial_walks_the_hot_path():
    """The tutorial names each layer of a conv2d call, from the op down to the
    register tile (whichever module holds it: the names exist, checked above)."""
    names = {name for _, name in _named_functions(ROOT / "docs" / "tutorial.md")}
    for layer in ("ops.conv2d.conv2d", ".schedule", ".execute", ".run_conv2d",
                  ".conv2d_launch", "._make_conv_driver", "._conv_tiles", ".conv_tile"):
        assert any(name.endswith(layer) for name in names), \
            f"docs/tutorial.md should name the layer ...{layer}"


def test_resolver_rejects_what_does_not_exist():
    """The name check can fail (so a passing run means something)."""
    assert _resolve("jitnn.kernels.conv2d._conv_tiles")
    assert _resolve("jitnn.Context") and _resolve("jitnn.tensor.Tensor.numpy")
    assert not _resolve("jitnn.kernels.conv2d._no_such_tile")
    assert not _resolve("jitnn.no_such_module.function")
    assert not _resolve("jitnn.tensor.Tensor.no_such_method")
    assert not _resolve_file_form("kernels/conv2d.py", "_no_such_tile")


def test_the_op_table_is_the_registry():
    """docs/ops.md's table is what ``jitnn ops`` prints now (regenerate it
    with ``jitnn ops`` when an op changes)."""
    text = (ROOT / "docs" / "ops.md").read_text()
    start = text.index("<!-- op table: generated by `jitnn ops` -->\n")
    end = text.index("<!-- end of op table -->")
    table = text[start:end].split("\n", 1)[1]
    assert table == registry.markdown_table(), \
        "docs/ops.md's op table is stale: replace it with the output of `jitnn ops`"
