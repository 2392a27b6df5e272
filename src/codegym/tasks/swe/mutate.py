"""Find small, realistic bugs to inject into one Python source file.

A mutant is a file's source with a small bug injected; the task's gold patch is the reverse
diff, so every edit is a minimal textual change to one AST node's span (an operator token,
a constant, a condition, a call's first two arguments) and never reformats the file.

Contract of ``find_mutants``:

- Only code inside functions is mutated (module-level functions, methods, nested
  functions, with their default values): not module-level code, class bodies, decorators,
  annotations, f-strings, bare string statements (docstrings), ``raise`` statements,
  ``assert`` messages, nor anything under ``if __name__ == "__main__":``. Functions whose
  body is only a docstring, ``pass``, ``...`` or ``raise NotImplementedError`` are skipped.
- Every mutated text differs from the original and compiles. The check compiles the
  outermost function holding the edit, alone: the same syntax and scoping errors as the
  whole file, at a fraction of the cost.
- Mutants come in source order, one per distinct mutated text, the same for the same input.

Families and their rules (one edit each):

- ``flip_comparison``: ``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``in``/``not in``,
  ``is``/``is not``, each to its counterpart; every operator of a chained comparison.
- ``off_by_one``: an int literal ``n`` (signed ``-n`` included, bools not) that is an
  operand of a comparison or of arithmetic (binary or augmented), a subscript index, a slice
  bound, or an argument of ``range()``: ``0`` becomes ``1``, any other ``n`` becomes ``n-1``.
- ``drop_branch``: an ``if`` with ``else``/``elif``: its test becomes ``True`` (the else
  branch never runs); an ``if`` without one whose body does not end in ``return``/``raise``:
  its test becomes ``False``. One-line, non-constant tests only.
- ``drop_return``: ``return <expr>`` (expr one line, not a constant) becomes ``return None``.
- ``swap_arguments``: a call whose first two positional arguments are not starred and fit
  on one line each: they trade places.
- ``change_constant``: ``True``/``False`` swap; an int literal outside off_by_one's
  contexts becomes ``n+1``; a one-line str literal of 1 to 20 characters becomes empty.
- ``wrong_operator``: binary ``+``/``-``, ``*``/``/``, ``//``/``%`` (not ``%`` formatting
  of a literal string); ``and``/``or`` (only the first operator of the chain); ``+=``/``-=``.
- ``negate_condition``: the test of an ``if``, ``while`` or conditional expression becomes
  ``not (<test>)`` (``not <test>`` for a name, attribute, call or subscript), and ``not X``
  becomes ``X``. Constant tests are left alone.

Limits: standard library only. A file that does not parse, or that breaks lines with a
lone carriage return, yields no mutants. ``Edit.mutated`` holds the whole file, so a big
file's mutants hold a copy of it each.
"""

from __future__ import annotations

import ast
import hashlib
import random
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TypeGuard

FAMILIES: tuple[str, ...] = (
    "flip_comparison",
    "off_by_one",
    "drop_branch",
    "drop_return",
    "swap_arguments",
    "change_constant",
    "wrong_operator",
    "negate_condition",
)


@dataclass(frozen=True)
class Edit:
    """One change to one file."""

    path: str
    """The file's path, relative to the source root."""
    original: str
    """The whole original file text."""
    mutated: str
    """The whole mutated file text (for a combined mutant: every edit to this file, applied)."""
    line: int
    """The 1-based line of the change, in the original."""
    function: str
    """The qualified name of the enclosing function, e.g. ``Foo.bar`` or ``outer.inner``."""
    family: str
    """The mutation family, one of ``FAMILIES``."""
    description: str
    """What changed, e.g. ``"`<` became `<=` in take (line 123)"``."""


@dataclass(frozen=True)
class Mutant:
    """A package's source with one bug (one edit) or a few combined (2 or 3 edits)."""

    edits: tuple[Edit, ...]

    @property
    def family(self) -> str:
        """The edits' families, joined with ``+``."""
        return "+".join(e.family for e in self.edits)

    @property
    def files(self) -> dict[str, tuple[str, str]]:
        """Path to (original, mutated), one entry per file (edits may share a file)."""
        return {e.path: (e.original, e.mutated) for e in self.edits}

    @property
    def key(self) -> str:
        """A stable id: the first 12 hex digits of the sha256 of the (path, mutated) pairs."""
        h = hashlib.sha256()
        for path, (_, mutated) in sorted(self.files.items()):
            h.update(path.encode() + b"\0" + mutated.encode() + b"\0")
        return h.hexdigest()[:12]


def find_mutants(path: str, source: str, families: Sequence[str] | None = None) -> list[Mutant]:
    """Every single-edit mutant of the functions in ``source`` (module-level functions and
    methods, not module-level code), in source order. ``families`` limits the families
    tried (default: all of ``FAMILIES``).

    Raises:
        ValueError: a name in ``families`` is not one of ``FAMILIES``.
    """
    wanted = set(FAMILIES if families is None else families)
    if unknown := wanted - set(FAMILIES):
        raise ValueError(f"unknown mutation families {sorted(unknown)}; choose from {FAMILIES}")
    if "\r" in source.replace("\r\n", ""):
        return []
    src = _Source(source)
    try:
        tree = ast.parse(source[src.bom :], path)
    except (SyntaxError, ValueError):
        return []
    found = [
        (change, site)
        for site in _sites(tree)
        for change in _changes(site.node, site.parent, src)
        if change.family in wanted
    ]
    found.sort(key=lambda f: (f[0].start, f[0].end, FAMILIES.index(f[0].family), f[0].text))
    out: list[Mutant] = []
    seen = {source}
    with warnings.catch_warnings():
        # a file's own invalid escapes would warn on every compile
        warnings.simplefilter("ignore")
        for change, site in found:
            mutated = source[: change.start] + change.text + source[change.end :]
            if mutated in seen or not src.compiles(site.scope, change):
                continue
            seen.add(mutated)
            line = src.line_of(
                change.start + _prefix_len(source[change.start : change.end], change.text)
            )
            what = f"`{_short(change.old)}` became `{_short(change.new)}`"
            desc = f"{what} in {site.function} (line {line})"
            edit = Edit(path, source, mutated, line, site.function, change.family, desc)
            out.append(Mutant((edit,)))
    return out


def combine(mutants: Sequence[Mutant], k: int, rng: random.Random) -> Mutant | None:
    """A mutant made of ``k`` (2 or 3) of ``mutants``' single edits, each in a different
    function, applied together: edits to one file share one mutated text (their spans
    applied to the original), edits to different files stay separate. None when fewer than
    ``k`` functions have edits, or a few draws give no compiling combination.

    Raises:
        ValueError: ``k`` is not 2 or 3, or two edits of one path have different originals.
    """
    if k not in (2, 3):
        raise ValueError(f"combine takes k=2 or k=3, not {k}")
    groups: dict[tuple[str, str], list[Edit]] = {}
    for m in mutants:
        if len(m.edits) == 1:
            e = m.edits[0]
            groups.setdefault((e.path, e.function), []).append(e)
    names = sorted(groups)
    if len(names) < k:
        return None
    for _ in range(8):
        picked = [rng.choice(groups[name]) for name in rng.sample(names, k)]
        edits = _apply_together(picked)
        if edits is not None:
            return Mutant(edits)
    return None


def sample(mutants: Sequence[Mutant], n: int, seed: int) -> list[Mutant]:
    """Up to ``n`` of ``mutants``, spread over functions and families: round-robin over
    (function, family) buckets in an order shuffled by ``Random(seed)``, each round taking
    the families in turn. The same for the same input and seed."""
    rng = random.Random(seed)
    by_bucket: dict[tuple[str, str, str], list[Mutant]] = {}
    for m in mutants:
        where = (",".join(e.path for e in m.edits), ",".join(e.function for e in m.edits))
        by_bucket.setdefault((*where, m.family), []).append(m)
    buckets = list(by_bucket.items())
    rng.shuffle(buckets)
    # interleave families: the i-th bucket of each family comes before any (i+1)-th one
    rank: dict[str, int] = {}
    order: list[tuple[int, list[Mutant]]] = []
    for (_, _, family), members in buckets:
        rank[family] = rank.get(family, -1) + 1
        order.append((rank[family], rng.sample(members, len(members))))
    order.sort(key=lambda r: r[0])
    out: list[Mutant] = []
    for depth in range(max((len(b) for _, b in order), default=0)):
        for _, members in order:
            if len(out) >= n:
                return out
            if depth < len(members):
                out.append(members[depth])
    return out


# -- where edits go ---------------------------------------------------------------------

_Func = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class _Change:
    """Replace ``source[start:end]`` with ``text``; ``old`` and ``new`` describe it."""

    start: int
    end: int
    text: str
    family: str
    old: str
    new: str


@dataclass(frozen=True)
class _Site:
    """A node inside a function, with what the edits made there need to know."""

    node: ast.AST
    parent: ast.AST
    function: str
    scope: _Func
    """The outermost function holding the node: the unit whose compiling is checked."""


class _Source:
    """A file's text, with AST positions (line, UTF-8 byte column) turned into str offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.bom = 1 if text.startswith("\ufeff") else 0
        self.starts = [self.bom] + [m.end() for m in re.finditer("\n", text)]
        self.lines = text.split("\n")
        self._units: dict[int, tuple[int, int, str]] = {}

    def offset(self, line: int, col: int) -> int:
        text = self.lines[line - 1][self.bom if line == 1 else 0 :]
        if not text.isascii():
            col = len(text.encode()[:col].decode("utf-8", errors="replace"))
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int] | None:
        line, col = getattr(node, "lineno", None), getattr(node, "col_offset", None)
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if line is None or col is None or end_line is None or end_col is None:
            return None
        return self.offset(line, col), self.offset(end_line, end_col)

    def code(self, node: ast.AST) -> str:
        span = self.span(node)
        return "" if span is None else self.text[span[0] : span[1]]

    def line_of(self, offset: int) -> int:
        lo, hi = 0, len(self.starts)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.starts[mid] <= offset else (lo, mid)
        return lo + 1

    def compiles(self, scope: _Func, change: _Change) -> bool:
        start, end, head = self._unit(scope)
        text = self.text
        code = head + text[start : change.start] + change.text + text[change.end : end]
        try:
            compile(code, "<mutant>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return False
        return True

    def _unit(self, fn: _Func) -> tuple[int, int, str]:
        """(start, end, header) of the text to compile for an edit in ``fn``."""
        if id(fn) not in self._units:
            first, last = fn.lineno, fn.end_lineno or len(self.starts)
            start, at = self.starts[first - 1], self.offset(first, fn.col_offset)
            end = self.starts[last] if last < len(self.starts) else len(self.text)
            indent = self.text[start:at]
            if indent.strip():  # the def shares its line with other code: compile it all
                self._units[id(fn)] = (self.bom, len(self.text), "")
            else:  # an indented def compiles alone as the body of an `if`
                self._units[id(fn)] = (start, end, "if 1:\n" if indent else "")
        return self._units[id(fn)]


def _sites(tree: ast.Module) -> Iterator[_Site]:
    """The nodes inside functions, minus the parts the module docstring excludes."""
    stack: list[tuple[ast.AST, ast.AST, str, str | None, _Func | None]] = [
        (n, tree, "", None, None) for n in tree.body
    ]
    while stack:
        node, parent, prefix, function, scope = stack.pop()
        children: list[ast.AST] = []
        if isinstance(node, _Func):
            if _trivial(node):
                continue
            prefix, function, scope = f"{prefix}{node.name}.", prefix + node.name, scope or node
            args = node.args
            children = [*args.defaults, *(d for d in args.kw_defaults if d), *node.body]
        elif isinstance(node, ast.ClassDef):
            prefix, children = f"{prefix}{node.name}.", list(node.body)
        elif _excluded(node):
            continue
        else:
            if function is not None and scope is not None:
                yield _Site(node, parent, function, scope)
            for field, value in ast.iter_fields(node):
                if field not in ("annotation", "returns", "msg"):
                    children += [v for v in (value if isinstance(value, list) else [value])]
        for child in children:
            if isinstance(child, ast.AST):
                stack.append((child, node, prefix, function, scope))


def _trivial(fn: _Func) -> bool:
    """Whether ``fn``'s body is only a docstring, ``pass``, ``...`` or ``raise
    NotImplementedError`` (an abstract method or a stub: nothing to break)."""
    for stmt in fn.body:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        exc = stmt.exc if isinstance(stmt, ast.Raise) else None
        exc = exc.func if isinstance(exc, ast.Call) else exc
        if not (isinstance(exc, ast.Name) and exc.id == "NotImplementedError"):
            return False
    return True


def _excluded(node: ast.AST) -> bool:
    """Whether nothing in ``node`` is mutated (see the module docstring)."""
    if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
        sides = [node.test.left, *node.test.comparators]
        names = {s.id for s in sides if isinstance(s, ast.Name)}
        values = {s.value for s in sides if isinstance(s, ast.Constant)}
        if names == {"__name__"} and values == {"__main__"}:
            return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True
    # f-string parts have unreliable positions; a raise's text is rarely what tests check
    return isinstance(node, ast.JoinedStr | ast.Raise)


# -- the families' rules ----------------------------------------------------------------

_FLIP = {
    ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"), ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is"),
}  # fmt: skip
_SWAP_BINOP = {
    ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"), ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "%"), ast.Mod: ("%", "//"),
}  # fmt: skip
_SWAP_BOOLOP = {ast.And: ("and", "or"), ast.Or: ("or", "and")}
_SWAP_AUGOP = {ast.Add: ("+=", "-="), ast.Sub: ("-=", "+=")}
_WORD = re.compile(r"[A-Za-z_]+|[-<>=!+*/%@&|^~]+")
_ATOMS = ast.Name | ast.Attribute | ast.Call | ast.Subscript


def _changes(node: ast.AST, parent: ast.AST, src: _Source) -> Iterator[_Change]:
    """The edits the families make at ``node``."""
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            old, new = _FLIP[type(op)]
            yield from _operator("flip_comparison", operands[i], operands[i + 1], old, new, src)
    elif isinstance(node, ast.BinOp) and type(node.op) in _SWAP_BINOP:
        formatting = isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant)
        if not formatting:
            old, new = _SWAP_BINOP[type(node.op)]
            yield from _operator("wrong_operator", node.left, node.right, old, new, src)
    elif isinstance(node, ast.BoolOp):
        old, new = _SWAP_BOOLOP[type(node.op)]
        yield from _operator("wrong_operator", node.values[0], node.values[1], old, new, src)
    elif isinstance(node, ast.AugAssign) and type(node.op) in _SWAP_AUGOP:
        old, new = _SWAP_AUGOP[type(node.op)]
        yield from _operator("wrong_operator", node.target, node.value, old, new, src)
    elif isinstance(node, ast.Return) and node.value is not None:
        if not isinstance(node.value, ast.Constant):
            yield from _replace(
                "drop_return", node.value, "None", src, old="return ", new="return "
            )
    elif isinstance(node, ast.Call) and len(node.args) >= 2:
        yield from _swap(node.args[0], node.args[1], src)
    elif isinstance(node, ast.Constant) or _negative_int(node):
        yield from _constant(node, parent, src)
    if isinstance(node, ast.If) and not isinstance(node.test, ast.Constant):
        if node.orelse:
            yield from _replace("drop_branch", node.test, "True", src)
        elif not isinstance(node.body[-1], ast.Return | ast.Raise):
            yield from _replace("drop_branch", node.test, "False", src)
    if isinstance(node, ast.If | ast.While | ast.IfExp):
        yield from _negate(node.test, src)


def _operator(
    family: str, left: ast.AST, right: ast.AST, old: str, new: str, src: _Source
) -> Iterator[_Change]:
    """Swap the operator token(s) between ``left`` and ``right``, found by scanning the gap
    (ast keeps no operator positions); the gap holds only the operator, parentheses,
    whitespace, line continuations and comments."""
    a, b = src.span(left), src.span(right)
    if a is None or b is None:
        return
    words: list[re.Match[str]] = []
    i, text = a[1], src.text
    while i < b[0]:
        if text[i] in " \t\f\r\n\\()":
            i += 1
        elif text[i] == "#":
            newline = text.find("\n", i, b[0])
            i = b[0] if newline < 0 else newline
        elif m := _WORD.match(text, i, b[0]):
            words.append(m)
            i = m.end()
        else:
            return
    if " ".join(m.group() for m in words) == old:
        yield _Change(words[0].start(), words[-1].end(), new, family, old, new)


def _replace(
    family: str, node: ast.expr, text: str, src: _Source, old: str = "", new: str = ""
) -> Iterator[_Change]:
    """Replace a one-line ``node`` with ``text``; ``old``/``new`` prefix the description."""
    span = src.span(node)
    if span is not None and node.lineno == node.end_lineno:
        yield _Change(*span, text, family, old + src.code(node), new + text)


def _swap(first: ast.expr, second: ast.expr, src: _Source) -> Iterator[_Change]:
    a, b = src.span(first), src.span(second)
    starred = isinstance(first, ast.Starred) or isinstance(second, ast.Starred)
    if a is None or b is None or starred:
        return
    if first.lineno != first.end_lineno or second.lineno != second.end_lineno:
        return
    x, gap, y = src.text[a[0] : a[1]], src.text[a[1] : b[0]], src.text[b[0] : b[1]]
    yield _Change(a[0], b[1], y + gap + x, "swap_arguments", f"{x}{gap}{y}", f"{y}{gap}{x}")


def _negate(test: ast.expr, src: _Source) -> Iterator[_Change]:
    span = src.span(test)
    if span is None or isinstance(test, ast.Constant):
        return
    code = src.text[span[0] : span[1]]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        new = code[3:].lstrip()  # drop the `not`, keep any parentheses after it
    else:
        new = f"not {code}" if isinstance(test, _ATOMS) else f"not ({code})"
    yield _Change(*span, new, "negate_condition", code, new)


def _negative_int(node: ast.AST) -> TypeGuard[ast.UnaryOp]:
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    )


def _constant(node: ast.Constant | ast.UnaryOp, parent: ast.AST, src: _Source) -> Iterator[_Change]:
    """off_by_one and change_constant, for a literal (or a negated int literal)."""
    value = node.value if isinstance(node, ast.Constant) else -_int_of(node)
    if isinstance(value, bool):
        yield from _replace("change_constant", node, str(not value), src)
    elif isinstance(value, int):
        if isinstance(node, ast.Constant) and _negative_int(parent):
            return  # the parent `-n` is the literal
        code = src.code(node)
        if _counts(node, parent):
            yield from _replace(
                "off_by_one", node, _int_text(code, 1 if value == 0 else value - 1), src
            )
        else:
            yield from _replace("change_constant", node, _int_text(code, value + 1), src)
    elif isinstance(value, str) and 1 <= len(value) <= 20:
        quote = src.code(node).lstrip("rRuUbBfF")[:1]
        yield from _replace("change_constant", node, quote * 2, src)


def _int_of(node: ast.AST) -> int:
    operand = node.operand if isinstance(node, ast.UnaryOp) else node
    value = operand.value if isinstance(operand, ast.Constant) else 0
    return value if isinstance(value, int) else 0


def _counts(node: ast.AST, parent: ast.AST) -> bool:
    """Whether the int literal ``node`` counts or indexes: off_by_one's contexts."""
    if isinstance(parent, ast.Compare | ast.BinOp | ast.AugAssign | ast.Slice):
        return True
    if isinstance(parent, ast.Subscript):
        return node is parent.slice
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name):
        return parent.func.id == "range" and any(node is a for a in parent.args)
    return False


def _int_text(code: str, value: int) -> str:
    """``value`` written in the base of the literal ``code`` (hex stays hex)."""
    base = code.lstrip("-( \t").lower()[:2]
    form = {"0x": "#x", "0o": "#o", "0b": "#b"}.get(base, "d")
    return ("-" if value < 0 else "") + format(abs(value), form)


# -- helpers ----------------------------------------------------------------------------


def _apply_together(edits: list[Edit]) -> tuple[Edit, ...] | None:
    """``edits`` applied to their files together, or None if they overlap or fail to
    compile. Each edit's span is re-derived from its original and mutated text."""
    by_path: dict[str, list[Edit]] = {}
    for e in edits:
        by_path.setdefault(e.path, []).append(e)
    out: list[Edit] = []
    for path, group in sorted(by_path.items()):
        original = group[0].original
        if any(e.original != original for e in group):
            raise ValueError(f"edits of {path} come from different versions of the file")
        spans = sorted(_diff_span(original, e.mutated) for e in group)
        if any(prev[1] >= nxt[0] for prev, nxt in pairwise(spans)):
            return None
        text = original
        for start, end, replacement in reversed(spans):
            text = text[:start] + replacement + text[end:]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(text.removeprefix("\ufeff"), path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return None
        out += [
            Edit(path, original, text, e.line, e.function, e.family, e.description) for e in group
        ]
    return tuple(sorted(out, key=lambda e: (e.path, e.line)))


def _diff_span(a: str, b: str) -> tuple[int, int, str]:
    """The smallest (start, end, replacement) that turns ``a`` into ``b``."""
    p = _prefix_len(a, b)
    s = _prefix_len(a[p:][::-1], b[p:][::-1])
    return p, len(a) - s, b[p : len(b) - s]


def _prefix_len(a: str, b: str) -> int:
    """The length of the common prefix, by bisection on slices (fast on long texts)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid - 1)
    return lo


def _short(code: str, limit: int = 60) -> str:
    flat = " ".join(code.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
