"""What the compiled build (mypyc, setup.py) needs of the gateway's source, read from its files:
mypyc compiles some Python constructs differently from the interpreter, and those differences
show only in the compiled build, so each is refused here for every build."""

from __future__ import annotations

import ast
import functools
import re
import runpy
from pathlib import Path

import pytest

import gateway

ROOT = Path(__file__).resolve().parent.parent
SETUP = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_for_tests")  # no setup() call
# Where the sources of the package the tests import are: the checkout, or the site-packages
# of the installed wheel CI tests (its sources are there beside the compiled modules).
SOURCES = Path(gateway.__file__).resolve().parent.parent


def _compiled() -> list[str]:
    """The modules the build compiles (setup.py's choice), as paths under SOURCES."""
    compiled: list[str] = SETUP["compiled_sources"](SOURCES)
    return compiled


def _functions(source: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse((SOURCES / source).read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def except_names_of_two_types(source: str) -> list[str]:
    """`except A as e` and `except B as e` in one function: mypyc gives `e` the first clause's
    type, and the second clause fails with a TypeError when it catches."""
    found = []
    for function in _functions(source):
        types: dict[str, set[str]] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.ExceptHandler) and node.name and node.type is not None:
                types.setdefault(node.name, set()).add(ast.unparse(node.type))
        found += [f"{source}:{function.lineno} {name}" for name, t in types.items() if len(t) > 1]
    return found


def bare_raises_after_an_await(source: str) -> list[str]:
    """A bare `raise` in an except clause that awaited first: compiled, it re-raises the
    exception the awaited call last handled, which may already be freed (a crash)."""
    found = []
    for function in _functions(source):
        for handler in ast.walk(function):
            if not isinstance(handler, ast.ExceptHandler):
                continue
            inside = [n for statement in handler.body for n in ast.walk(statement)]
            awaits = any(isinstance(n, ast.Await | ast.AsyncWith | ast.AsyncFor) for n in inside)
            if awaits and any(isinstance(n, ast.Raise) and n.exc is None for n in inside):
                found.append(f"{source}:{handler.lineno}")
    return found


def star_arguments_to_super(source: str) -> list[str]:
    """`super().f(*args)` or `super().f(**kwargs)`: compiled, the tuple or the dict itself
    arrives as one argument (a TypeError, or a wrong value, in the method called)."""
    found = []
    for function in _functions(source):
        for call in ast.walk(function):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Call)
                and ast.unparse(call.func.value.func) == "super"
                and (
                    any(isinstance(a, ast.Starred) for a in call.args)
                    or any(k.arg is None for k in call.keywords)
                )
            ):
                found.append(f"{source}:{call.lineno}")
    return found


def _python_class(node: ast.ClassDef) -> bool:
    """Marked `@mypyc_attr(native_class=False)`: a Python class on the compiled build too."""
    return any(
        isinstance(d, ast.Call)
        and ast.unparse(d.func).endswith("mypyc_attr")
        and any(k.arg == "native_class" and ast.unparse(k.value) == "False" for k in d.keywords)
        for d in node.decorator_list
    )


def unmarked_subclasses_of_python_classes(source: str) -> list[str]:
    """A class deriving from one marked `native_class=False` without that mark itself: mypyc
    compiles it as neither (its own class attributes were lost: the base's were read)."""
    tree = ast.parse((SOURCES / source).read_text())
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    marked = _marked_classes(tree)
    return [
        f"{source}:{c.lineno} {c.name}"
        for c in classes
        if not _python_class(c) and any(ast.unparse(base) in marked for base in c.bases)
    ]


def _marked_classes(tree: ast.AST) -> set[str]:
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and _python_class(n)}


@functools.cache
def _marked_in_compiled_modules() -> frozenset[str]:
    return frozenset().union(
        *(_marked_classes(ast.parse((SOURCES / each).read_text())) for each in _compiled())
    )


def isinstance_of_python_classes(source: str) -> list[str]:
    """`isinstance(x, C)` where C is a class marked `native_class=False` in a compiled module:
    mypyc tests such a class by its exact type, so an instance of a subclass did not match
    (an upstream reset counted as a fault of the gateway's own, logged with its traceback)."""
    tree = ast.parse((SOURCES / source).read_text())
    marked = _marked_classes(tree) | _marked_in_compiled_modules()
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in {"isinstance", "issubclass"}
            and len(node.args) == 2
        ):
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            named = {ast.unparse(kind).rpartition(".")[2] for kind in kinds}
            found += [f"{source}:{node.lineno} {name}" for name in sorted(named & marked)]
    return found


# Module constants left without `Final`, each with why.
_FLOAT_TUPLE = "a tuple of floats (see final_float_tuples)"
NOT_FINAL = {
    # A Final one is compiled into its readers: patching the module's attribute would not
    # reach them.
    "gateway/upstream/httptools_client.py": {
        "KEEPALIVE_SECONDS": "tests shorten it (test_upstream_client)"
    },
    "gateway/telemetry/metrics.py": {"OVERHEAD_BUCKETS": _FLOAT_TUPLE},
}
_CONSTANT = re.compile(r"_?[A-Z][A-Z0-9_]*")


def constants_not_final(source: str) -> list[str]:
    """A module-level ALL_CAPS name assigned once and not annotated `Final`: mypyc reads a
    Final constant directly (or inlines its value), any other module global through the
    module's dict at every use. Type variables are no constants; names a function rebinds
    (`global`), or the module assigns twice, are left alone, as NOT_FINAL's are."""
    tree = ast.parse((SOURCES / source).read_text())
    stores: dict[str, list[ast.stmt]] = {}
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                stores.setdefault(node.id, []).append(statement)
    rebound = {
        name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names
    }
    allowed = NOT_FINAL.get(source, {})
    found = []
    for name, [statement, *others] in stores.items():
        if others or name in rebound or name in allowed or not _CONSTANT.fullmatch(name):
            continue
        value = getattr(statement, "value", None)
        if isinstance(value, ast.Call) and ast.unparse(value.func) in {"TypeVar", "ParamSpec"}:
            continue
        annotation = statement.annotation if isinstance(statement, ast.AnnAssign) else None
        if annotation is None or not ast.unparse(annotation).startswith("Final"):
            found.append(f"{source}:{statement.lineno} {name}")
    return found


def final_float_tuples(source: str) -> list[str]:
    """A `Final` tuple holding a float: compiled (by mypy 2.4.1's mypyc), reading it raises
    NameError "value for final name ... was not set": the C check that the value is set is
    inverted for a native tuple that starts with a float."""
    tree = ast.parse((SOURCES / source).read_text())
    return [
        f"{source}:{node.lineno}"
        for node in tree.body
        if isinstance(node, ast.AnnAssign)
        and ast.unparse(node.annotation).startswith("Final")
        and isinstance(node.value, ast.Tuple)
        and any(isinstance(e, ast.Constant) and isinstance(e.value, float) for e in node.value.elts)
    ]


def test_every_pure_module_named_exists() -> None:
    pure: dict[str, str] = SETUP["PURE"]
    assert [name for name in pure if not (SOURCES / name).exists()] == []
    assert "gateway/http/flow/handler.py" in _compiled()  # the request path is compiled


def test_no_except_name_is_bound_to_two_types_in_a_compiled_module() -> None:
    assert [found for s in _compiled() for found in except_names_of_two_types(s)] == []


def test_no_compiled_module_passes_star_arguments_to_super() -> None:
    assert [found for s in _compiled() for found in star_arguments_to_super(s)] == []


def test_no_bare_raise_follows_an_await_in_a_compiled_module() -> None:
    assert [found for s in _compiled() for found in bare_raises_after_an_await(s)] == []


def test_every_subclass_of_a_python_class_is_marked_one_in_a_compiled_module() -> None:
    assert [found for s in _compiled() for found in unmarked_subclasses_of_python_classes(s)] == []


def test_no_compiled_module_tests_isinstance_of_a_python_class_of_its_own() -> None:
    assert [found for s in _compiled() for found in isinstance_of_python_classes(s)] == []


def test_module_constants_of_a_compiled_module_are_final() -> None:
    assert [found for s in _compiled() for found in constants_not_final(s)] == []


def test_no_compiled_module_has_a_final_tuple_of_floats() -> None:
    assert [found for s in _compiled() for found in final_float_tuples(s)] == []


def test_every_constant_left_without_final_exists() -> None:
    assert [
        f"{source} {name}"
        for source, names in NOT_FINAL.items()
        for name in names
        if source not in _compiled() or f"\n{name} = " not in (SOURCES / source).read_text()
    ] == []


def test_the_final_check_leaves_type_variables_and_rebound_names_alone(tmp_path: Path) -> None:
    code = (
        'T = TypeVar("T")\nLIMIT: Final = 3\nSTATE = 1\n'
        "def f():\n global STATE\n STATE = 2\n"
        "try: SPEED = 1\nexcept ImportError: SPEED = 2\nlog = 1\n"
    )
    (tmp_path / "m.py").write_text(code)
    assert constants_not_final(str(tmp_path / "m.py")) == []


@pytest.mark.parametrize(
    ("check", "code"),
    [
        (
            except_names_of_two_types,
            "def f():\n try: g()\n except KeyError as e: h(e)\n except OSError as e: h(e)\n",
        ),
        (
            bare_raises_after_an_await,
            "async def f():\n try: await g()\n except OSError:\n  await h()\n  raise\n",
        ),
        (star_arguments_to_super, "class A(B):\n def f(self, **o):\n  super().f(1, **o)\n"),
        (
            unmarked_subclasses_of_python_classes,
            "@mypyc_attr(native_class=False)\nclass A(Exception):\n kind = 1\n"
            "class B(A):\n kind = 2\n",
        ),
        (
            isinstance_of_python_classes,
            "@mypyc_attr(native_class=False)\nclass A(Exception): ...\n"
            "def f(e):\n return isinstance(e, (KeyError, A))\n",
        ),
        (constants_not_final, "LIMIT = 3\n"),
        (constants_not_final, "LIMIT: int = 3\n"),
        (final_float_tuples, "BACKOFF: Final = (1, 0.5)\n"),
    ],
)
def test_the_checks_see_what_they_refuse(check: object, code: str, tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(code)
    assert callable(check) and check(str(tmp_path / "m.py")) != []  # SOURCES / an absolute path
