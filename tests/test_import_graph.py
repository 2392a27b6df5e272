"""The import graph keeps the layer stack of DESIGN.md: no module imports a higher layer
(lazily or not), and no two modules import each other at import time (a circle that
works only because of import order breaks the day that order changes).

Read from the source with ``ast``; ``if TYPE_CHECKING:`` blocks are left out (annotations
only), function-level imports count for the layers but not for circles (they run later).
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


def _modules() -> dict[str, Path]:
    out = {}
    for p in SRC.rglob("*.py"):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        out[name] = p
    return out


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "_root"


def _imports(tree: ast.Module) -> tuple[list[str], list[str]]:
    """(module-level imports, all imports) of codegym modules, TYPE_CHECKING left out."""
    top: list[str] = []
    every: list[str] = []

    def names(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            return [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        return []

    def walk(node: ast.AST, at_top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            found = [n for n in names(child) if n.startswith("codegym")]
            every.extend(found)
            if at_top:
                top.extend(found)
            inner = at_top and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            walk(child, inner)

    walk(tree, True)
    return top, every


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    mods = _modules()
    top: dict[str, set[str]] = {}
    every: dict[str, set[str]] = {}
    for name, path in mods.items():
        t, e = _imports(ast.parse(path.read_text()))

        def known(targets: list[str], me: str = name) -> set[str]:
            out = set()
            for target in targets:
                while target not in mods and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in mods and target != me:
                    out.add(target)
            return out

        top[name], every[name] = known(t), known(e)
    return top, every


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


def test_no_import_circles_between_modules() -> None:
    top, _ = _graph()
    # a package's __init__ re-exporting its own modules is no circle: leave those edges out
    graph = {
        m: {d for d in deps if not m.startswith(d + ".") and not d.startswith(m + ".")}
        for m, deps in top.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not circles, circles
