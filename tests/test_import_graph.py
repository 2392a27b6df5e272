"""The import graph keeps the layer stack of DESIGN.md: no module imports a higher layer
(lazily or not), and no two modules import each other in any way (a circle that works
only because of import order, a late import or ``TYPE_CHECKING`` breaks the day that
order changes or the annotation is needed at run time).

Read from the source with ``ast``. Every import of a codegym module is an edge: at module
level, inside a function (it runs later, but it runs), and under ``if TYPE_CHECKING:``
(mypy and ``typing.get_type_hints`` follow it). ``from pkg import name`` is an edge to
``pkg`` itself (its ``__init__``) unless ``pkg.name`` is a module, and a module's own
package counts like any other: ``codegym.tasks.loaders`` importing ``codegym.tasks``
while ``codegym/tasks/__init__.py`` imports it back is a circle. The parent packages
Python imports on the way to a module (``codegym.tasks`` for ``codegym.tasks.loaders``)
are not edges: Python has them in ``sys.modules`` before the child runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# lower number, lower layer (DESIGN.md "Layers"); a package may import only ranks <= its own
RANK = {
    "_root": 0, "_lazy": 0, "_registry": 0, "errors": 0,
    "store": 1, "telemetry": 1,
    "sandbox": 2,
    "tasks": 3,
    "policies": 4, "models": 4,
    "envs": 5, "testing": 5,
    "rollout": 6,
    "evals": 7,
    "train": 8,
    "service": 9, "serving": 9,
    "cli": 10,
}  # fmt: skip

# Circles still there, each harmless at run time (its back edge is late or typing-only)
# and each to be untied: an entry comes off when its circle goes (the last test checks).
# Empty: a new circle is untied (move the shared name down a module), not listed here.
ALLOWED_CIRCLES: dict[frozenset[str], str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for p in SRC.rglob("*.py"):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        out[name] = p
    return out


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _absolute(module: str, node: ast.ImportFrom) -> str | None:
    """The module ``from <node.module> import ...`` names, relative imports resolved."""
    if not node.level:
        return node.module
    base = module.split(".")
    if not _is_package(module):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _owner(target: str) -> str | None:
    """The codegym module that defines ``target`` (a module, or a name in one)."""
    while target not in MODULES and "." in target:
        target = target.rsplit(".", 1)[0]
    return target if target in MODULES else None


def _edges(module: str, node: ast.AST) -> list[str]:
    """The codegym modules one import statement makes ``module`` depend on."""
    targets: list[str] = []
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = _absolute(module, node)
        if base is None:
            return []
        for a in node.names:
            sub = f"{base}.{a.name}"
            # a submodule is imported as itself; any other name is read from ``base``
            targets.append(sub if sub in MODULES else base)
    found = {_owner(t) for t in targets if t == "codegym" or t.startswith("codegym.")}
    return sorted(m for m in found if m is not None and m != module)


def _imports(module: str, tree: ast.Module) -> tuple[set[str], set[str]]:
    """(imports that run: at module level or in a function, every import)."""
    run: set[str] = set()
    every: set[str] = set()

    def walk(node: ast.AST, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for part in child.body:
                    walk_one(part, True)
                for part in child.orelse:
                    walk_one(part, typing_only)
                continue
            walk_one(child, typing_only)

    def walk_one(node: ast.AST, typing_only: bool) -> None:
        found = _edges(module, node)
        every.update(found)
        if not typing_only:
            run.update(found)
        walk(node, typing_only)

    walk(tree, False)
    return run, every


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    run: dict[str, set[str]] = {}
    every: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        run[name], every[name] = _imports(name, ast.parse(path.read_text()))
    return run, every


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_module_imports_a_higher_layer() -> None:
    _, every = _graph()
    bad = sorted(
        f"{src} imports {dst}"
        for src, dsts in every.items()
        for dst in dsts
        if RANK[_package(dst)] > RANK[_package(src)]
    )
    assert not bad, bad
    assert set(RANK) >= {_package(m) for m in every}, "a new package: give it a layer in RANK"


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "_root"


def test_no_import_circles_between_modules() -> None:
    _, every = _graph()
    circles = [sorted(c) for c in _circles(every) if c not in ALLOWED_CIRCLES]
    assert not circles, circles


def test_allowed_circles_are_still_there() -> None:
    """An allowlisted circle that was untied comes off the list."""
    _, every = _graph()
    gone = [sorted(c) for c in set(ALLOWED_CIRCLES) - set(_circles(every))]
    assert not gone, gone


def test_the_graph_sees_every_kind_of_import() -> None:
    """The rules above, on made-up sources: each kind of import is an edge."""
    src = """
from __future__ import annotations
from typing import TYPE_CHECKING
import codegym.tasks.loaders
from codegym.tasks import Task, synthetic
from . import humaneval
if TYPE_CHECKING:
    from codegym.service.client import RemoteSandbox
def f():
    from codegym.tasks.taskset import TaskSet
"""
    run, every = _imports("codegym.tasks.formats", ast.parse(src))
    assert every == {
        "codegym.tasks.loaders",
        "codegym.tasks",
        "codegym.tasks.synthetic",
        "codegym.tasks.humaneval",
        "codegym.service.client",
        "codegym.tasks.taskset",
    }
    assert run == every - {"codegym.service.client"}
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [frozenset({"a", "b"})]
