"""The package's shape, read from its files: layers import only downwards, the decision core
imports no I/O, there is no import cycle, every module says its concern, and no function
grows past what a reader holds at once."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import gateway

# The package the tests import: the checkout's, or the installed one CI tests (its sources
# are in the wheel beside the compiled modules).
PACKAGE = Path(gateway.__file__).resolve().parent

# Each layer and the layers it may import (besides itself). `gateway` is the top level.
_IO = {"core", "config", "errors", "store", "blobs", "upstream", "telemetry"}
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "errors": set(),
    "config": {"core", "errors"},
    "store": {"core", "config", "errors", "lifeline"},
    "blobs": {"core", "config", "errors"},
    "upstream": {"core", "config", "errors"},
    "telemetry": {"core", "config", "errors", "store"},
    "http": _IO | {"closing"},
    "ops": _IO | {"http", "lifeline", "build", "closing"},
    "cli": _IO | {"http", "ops", "build", "closing"},
    "lifeline": set(),
    "closing": set(),  # closing what a start opened, in the layers that start things
    "build": set(),  # which build runs: imported first, by the package itself
    "lua": set(),  # the Redis scripts' package (lua/ in the checkout, gateway/lua installed)
    "demo_upstream": set(),
    "__main__": {"cli"},
    "__init__": {"build"},
}
# Inside a layer, its groups from the lowest up: a group imports only itself and the groups
# before it. A group is a sub-folder or a module of the layer's folder; "." is each module of
# the folder that the list does not name. A package's __init__ only says what it groups.
INNER_LAYERS: dict[str, tuple[str, ...]] = {
    # what a client is sent; the connection and its serving, which call the handler they are
    # given (`server.site.ENTRY`) and never the flow; a request's way; the assembly.
    "http": ("answers", "server", "flow", "app"),
    # the one-process admin and console; the `--workers N` supervisor built on them.
    "ops": (".", "supervisor"),
}
# Third-party and standard modules the decision core must never import: it works on plain
# values, with no event loop, network, Redis, HTTP or config parsing behind it.
CORE_FORBIDDEN = {
    *("aiohttp", "redis", "asyncio", "hiredis", "httptools", "pydantic", "yaml"),
    *("multidict", "yarl", "aiobotocore", "socket", "uvloop", "ssl", "subprocess"),
}
MAX_TOP_LEVEL_MODULES = 12
# A module's size follows its concern; this only flags one that may hold two (none is near).
MAX_MODULE_LINES = 600
# A function is read as one step of a flow: one that needs more lines is several steps.
MAX_FUNCTION_LINES = 90
# Functions that only declare, one line per thing declared: longer, not harder to read.
DECLARATIONS = {"gateway.telemetry.metrics:Metrics.__init__"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts)] = path
    return found


def _imports(path: Path, module: str) -> set[str]:
    """Every module `path` imports, relative imports resolved, at any depth of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {imp for imp in _imports(path, name) if imp in modules and imp != name}
        for name, path in modules.items()
    }


def _layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") >= 1 else module


def test_the_decision_core_imports_no_io_and_no_other_layer() -> None:
    bad = []
    for name, path in _modules().items():
        if _layer(name) != "core":
            continue
        for imported in _imports(path, name):
            root = imported.split(".")[0]
            if root in CORE_FORBIDDEN:
                bad.append(f"{name} imports {imported}")
            if root == "gateway" and imported.count(".") >= 1 and _layer(imported) != "core":
                bad.append(f"{name} imports {imported}")
    assert bad == []


def test_layers_import_only_the_layers_below_them() -> None:
    bad = []
    for name, imported in _graph().items():
        layer = _layer(name)
        allowed = LAYERS[layer] | {layer}
        for other in imported:
            if other.count(".") and _layer(other) not in allowed:
                bad.append(f"{name} ({layer}) imports {other}")
    assert bad == []


def _group(module: str) -> tuple[str, str] | None:
    """The layer and the group of `module` inside it (None: a layer with no groups, or a
    package's __init__)."""
    parts = module.split(".")
    layer = parts[1] if len(parts) > 2 else None
    if layer not in INNER_LAYERS or parts[-1] == "__init__":
        return None
    order = INNER_LAYERS[layer]
    return layer, parts[2] if parts[2] in order else "."


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Each import of a group above the importer's, inside one layer: (importer, imported)."""
    bad = []
    for name, imported in sorted(graph.items()):
        mine = _group(name)
        if mine is None:
            continue
        order = INNER_LAYERS[mine[0]]
        for other in sorted(imported):
            theirs = _group(other)
            if theirs is None or theirs[0] != mine[0]:
                continue  # another layer's: test_layers_import_only_the_layers_below_them
            if order.index(theirs[1]) > order.index(mine[1]):
                bad.append((name, other))
    return bad


def test_inside_a_layer_groups_import_only_the_groups_below_them() -> None:
    assert [f"{a} imports {b}" for a, b in _upward(_graph())] == []


def test_every_module_of_a_grouped_layer_is_in_a_group() -> None:
    named = {(layer, group) for layer, groups in INNER_LAYERS.items() for group in groups}
    found = {group for group in map(_group, _modules()) if group is not None}
    assert sorted(found - named) == []
    assert sorted(named - found) == []


def test_the_inner_check_sees_an_import_back_up() -> None:
    """A server module importing the application's assembly, or the one-process console
    importing the supervisor, is caught; an import down is not."""
    graph = {
        "gateway.http.server.site": {"gateway.http.app", "gateway.http.answers.problems"},
        "gateway.ops.overview": {"gateway.ops.supervisor.merged_metrics"},
        "gateway.ops.supervisor.admin_hub": {"gateway.ops.overview"},
    }
    assert _upward(graph) == [
        ("gateway.http.server.site", "gateway.http.app"),
        ("gateway.ops.overview", "gateway.ops.supervisor.merged_metrics"),
    ]


def test_there_is_no_import_cycle() -> None:
    graph = _graph()
    # Only the modules themselves count: importing a package's __init__ alone is no edge.
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*trail[trail.index(nxt) :], nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == []


def test_the_core_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The checks read real files: a core module importing asyncio is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("import asyncio\nfrom gateway.store.store import Store\n")
    assert {"asyncio", "gateway.store.store"} <= _imports(probe, "gateway.core.probe")


def _functions(path: Path) -> Iterator[tuple[str, int]]:
    """Each function of `path` (methods as Class.name) and its length in lines."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                yield name, (child.end_lineno or child.lineno) - child.lineno + 1
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")

    yield from walk(ast.parse(path.read_text(encoding="utf-8")), "")


def test_every_module_says_its_concern_and_holds_no_more() -> None:
    """A docstring first, saying what the module is for (a package's says what it groups);
    past MAX_MODULE_LINES, a module is looked at again for a second concern."""
    silent, large = [], []
    for name, path in sorted(_modules().items()):
        text = path.read_text(encoding="utf-8")
        if ast.get_docstring(ast.parse(text)) is None:
            silent.append(name)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            large.append(name)
    assert silent == []
    assert large == []


def test_no_function_grows_past_one_readable_step() -> None:
    long = [
        f"{module}:{function} has {lines} lines"
        for module, path in sorted(_modules().items())
        for function, lines in _functions(path)
        if lines > MAX_FUNCTION_LINES and f"{module}:{function}" not in DECLARATIONS
    ]
    assert long == []


def test_the_function_check_reads_methods_and_nested_functions(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("class A:\n    def f(self):\n        def g():\n            pass\n")
    assert list(_functions(probe)) == [("A.f", 3), ("A.f.g", 2)]


def test_few_modules_sit_directly_in_the_package() -> None:
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


TESTS = Path(__file__).resolve().parent
# An import of a test module or of conftest.py, in code or in the code a test runs as a child.
TEST_MODULE = re.compile(r"^(?:tests\.)?(?:test_\w+|conftest)$")
IMPORTED_IN_TEXT = re.compile(r"\b(?:from|import) +tests\.(test_\w+|conftest)\b")


def _test_module_imports(path: Path) -> list[str]:
    """The test modules and conftest.py that the file at `path` imports."""
    text = path.read_text(encoding="utf-8")
    found = {f"tests.{name}" for name in IMPORTED_IN_TEXT.findall(text)}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level <= 1:
            names = [node.module or ""] if node.module else [a.name for a in node.names]
            found.update(name for name in names if TEST_MODULE.match(name))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if TEST_MODULE.match(a.name))
    return sorted(found)


def test_no_module_of_the_tests_imports_a_test_module_or_conftest() -> None:
    """What tests share lives in helper modules of tests/ (or in testkit/, shared with the
    load harness); conftest.py holds fixtures, which pytest gives by name (its documentation:
    conftest.py is not meant to be imported)."""
    found = {
        path.name: imported
        for path in sorted(TESTS.glob("*.py"))
        if (imported := _test_module_imports(path))
    }
    assert found == {}


def test_the_test_import_check_sees_each_way_of_importing(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    tests = "tests"  # spelt apart, so that this file does not import them by its own check
    probe.write_text(
        "from .conftest import GatewayFactory\n"
        "from . import test_store\n"
        f"import {tests}.test_journal\n"
        f"child = 'from {tests}.test_readme import walk_through'\n"
        "from .rawhttp import exchange\n"
    )
    assert _test_module_imports(probe) == [
        "conftest",
        "test_store",
        "tests.test_journal",
        "tests.test_readme",
    ]


ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def test_docs_architecture_names_every_module_and_no_other() -> None:
    """docs/architecture.md's module map: each module of the package by its path, once a
    module is added or moved, and no path that has gone."""
    named = set(re.findall(r"`(gateway/[\w/]+\.py)`", ARCHITECTURE.read_text(encoding="utf-8")))
    modules = {path.relative_to(PACKAGE.parent).as_posix() for path in _modules().values()}
    modules.add("gateway/lua/__init__.py")  # lua/ in the checkout, the scripts' package installed
    assert sorted(modules - named) == [], "modules docs/architecture.md does not name"
    assert sorted(named - modules) == [], "paths docs/architecture.md names that do not exist"


# A row of the module map: the module's path, what it is, and the tests that import it.
MAP_ROW = re.compile(r"^\| `(gateway/[\w/]+\.py)` \| (.*) \| (.*) \|$", re.M)
TESTS_SHOWN = 3  # the map's "tests that import it": at most this many named, then (+N)
THROUGH_THE_GATEWAY = "— (through the gateway)"


def _what(path: Path) -> str:
    """The first sentence of the module's docstring, white space folded, as the map's cell."""
    text = " ".join((ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "").split())
    sentence = re.split(r"(?<=[.!?]) ", text, maxsplit=1)[0].removesuffix(".")
    return sentence.replace("|", "\\|")


@functools.cache
def _named_by_tests() -> dict[str, frozenset[str]]:
    """Each test module (tests/test_*.py) and the modules and names its imports name."""
    named: dict[str, frozenset[str]] = {}
    for path in sorted(TESTS.glob("test_*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
        named[path.stem] = frozenset(names)
    return named


def _importers(module: str) -> list[str]:
    """The test modules that import `module` by name, those named after it first (its name
    a word of theirs), then the others in order."""
    found = [test for test, names in _named_by_tests().items() if module in names]
    named = re.compile(rf"(^|_){module.rsplit('.', 1)[1]}(_|$)")
    return sorted(found, key=lambda test: named.search(test.removeprefix("test_")) is None)


def _tests_cell(module: str) -> str:
    tests = _importers(module)
    if not tests:
        return THROUGH_THE_GATEWAY
    cell = ", ".join(f"`{test}`" for test in tests[:TESTS_SHOWN])
    return cell + (f" (+{len(tests) - TESTS_SHOWN})" if len(tests) > TESTS_SHOWN else "")


def _map_differences() -> list[str]:
    """Each row of the module map whose cells are not what the code says, with the cells
    it should hold."""
    wrong = []
    module_map = ARCHITECTURE.read_text(encoding="utf-8").split("\n## Module map\n", 1)[1]
    for path, what, tests in MAP_ROW.findall(module_map):
        source = PACKAGE.parent / path
        if path.endswith("/__init__.py") or not source.exists():
            continue  # a package says what it groups above its table
        module = path.removesuffix(".py").replace("/", ".")
        expected = (_what(source), _tests_cell(module))
        if (what, tests) != expected:
            wrong.append(f"| `{path}` | {expected[0]} | {expected[1]} |")
    return wrong


def test_the_module_map_says_what_each_module_is_and_which_tests_import_it() -> None:
    """Its rows as they should read, for those that do not: each module's docstring's first
    sentence, and the test modules whose imports name it."""
    assert _map_differences() == []


LAYER_ROW = re.compile(r"^\| `gateway/([\w]+)(?:/|\.py)` \| .* \| (.*) \|$", re.M)


def test_the_layers_table_says_what_each_layer_may_import() -> None:
    """docs/architecture.md's table of layers: a row per layer of LAYERS, whose last cell
    names the layers it may import, as LAYERS holds them."""
    section = ARCHITECTURE.read_text(encoding="utf-8").split("\n## Layers\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    table = {
        layer: set(re.findall(r"`(\w+)`", cell)) & set(LAYERS)
        for layer, cell in LAYER_ROW.findall(section)
    }
    assert table == LAYERS
