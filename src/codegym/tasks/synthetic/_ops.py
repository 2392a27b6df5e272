"""The primitive operations synthetic tasks are composed from.

Each ``Op`` is one line of a generated function, ``x = <expr>``, mapping a value of one
kind (``list`` of ints, ``int``, ``str``) to another. ``bugs`` are plausible wrong
versions of the same line (wrong operator, off-by-one, swapped arguments) used by the
``bugfix`` family. ``{k}`` in an expression is the op's drawn constant, ``{k1}`` is
``k + 1`` (the off-by-one partner).

Changing anything here changes generated tasks: bump ``GENERATOR_VERSION`` in
``families.py`` so cached models and results keyed on it are rebuilt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

Kind = Literal["list", "int", "str"]


@dataclass(frozen=True)
class Op:
    """One primitive: a line ``x = <code>`` from ``tin`` to ``tout``."""

    name: str
    tin: Kind
    tout: Kind
    code: str
    """The expression over ``x``; ``{k}`` is the constant, ``{k1}`` is ``k + 1``."""
    ks: tuple[int, ...] = ()
    """Constants to draw ``k`` from; empty when the op has none."""
    bugs: tuple[str, ...] = ()
    """Planted-bug versions of ``code`` (same placeholders)."""


@dataclass(frozen=True)
class Step:
    """An op with its constant drawn."""

    op: Op
    k: int = 0

    def render(self, code: str | None = None) -> str:
        expr = self.op.code if code is None else code
        return expr.replace("{k1}", str(self.k + 1)).replace("{k}", str(self.k))

    @property
    def label(self) -> str:
        return f"{self.op.tin}.{self.op.name}"


_R19 = tuple(range(1, 10))
_R25 = tuple(range(2, 6))

OPS: tuple[Op, ...] = (
    # list -> list
    Op("sort", "list", "list", "sorted(x)", bugs=("sorted(x, reverse=True)",)),
    Op("sort_desc", "list", "list", "sorted(x, reverse=True)", bugs=("sorted(x)",)),
    Op("reverse", "list", "list", "x[::-1]", bugs=("x[1:]",)),
    Op("add", "list", "list", "[v + {k} for v in x]", _R19, ("[v - {k} for v in x]",)),
    Op("sub", "list", "list", "[v - {k} for v in x]", _R19, ("[{k} - v for v in x]",)),
    Op("mul", "list", "list", "[v * {k} for v in x]", _R25, ("[v + {k} for v in x]",)),
    Op("square", "list", "list", "[v * v for v in x]", bugs=("[v + v for v in x]",)),
    Op(
        "even",
        "list",
        "list",
        "[v for v in x if v % 2 == 0]",
        bugs=("[v for v in x if v % 2 == 1]",),
    ),
    Op(
        "odd",
        "list",
        "list",
        "[v for v in x if v % 2 == 1]",
        bugs=("[v for v in x if v % 2 == 0]",),
    ),
    Op(
        "gt",
        "list",
        "list",
        "[v for v in x if v > {k}]",
        tuple(range(0, 7)),
        ("[v for v in x if v >= {k}]", "[v for v in x if v < {k}]"),
    ),
    Op("drop_first", "list", "list", "x[1:]", bugs=("x[2:]",)),
    Op("take", "list", "list", "x[:{k}]", (1, 2, 3), ("x[:{k1}]", "x[{k}:]")),
    Op("dedup", "list", "list", "sorted(set(x))", bugs=("sorted(x)",)),
    Op("abs", "list", "list", "[abs(v) for v in x]", bugs=("[-v for v in x]",)),
    # list -> int
    Op("sum", "list", "int", "sum(x)", bugs=("sum(x[1:])",)),
    Op("len", "list", "int", "len(x)", bugs=("len(x) - 1",)),
    Op("max", "list", "int", "max(x, default=0)", bugs=("min(x, default=0)",)),
    # int -> int
    Op("add", "int", "int", "x + {k}", _R19, ("x - {k}", "x + {k1}")),
    Op("sub", "int", "int", "x - {k}", _R19, ("{k} - x",)),
    Op("mul", "int", "int", "x * {k}", _R25, ("x + {k}", "x * {k1}")),
    Op("mod", "int", "int", "x % {k}", tuple(range(2, 8)), ("x // {k}", "x % {k1}")),
    Op("div", "int", "int", "x // {k}", _R25, ("x % {k}", "x // {k1}")),
    Op("neg", "int", "int", "-x", bugs=("x - 1",)),
    Op("square", "int", "int", "x * x", bugs=("x * 2",)),
    Op("abs", "int", "int", "abs(x)", bugs=("-x",)),
    # str -> str
    Op("upper", "str", "str", "x.upper()", bugs=("x.lower()",)),
    Op("reverse", "str", "str", "x[::-1]", bugs=("x[1:]",)),
    Op("double", "str", "str", "x + x", bugs=("x + x[1:]",)),
    Op("take", "str", "str", "x[:{k}]", (1, 2, 3), ("x[:{k1}]", "x[{k}:]")),
    Op("sort", "str", "str", '"".join(sorted(x))', bugs=('"".join(sorted(x, reverse=True))',)),
    Op("replace", "str", "str", 'x.replace("a", "e")', bugs=('x.replace("e", "a")',)),
    Op("drop_first", "str", "str", "x[1:]", bugs=("x[2:]",)),
    # str -> int
    Op("len", "str", "int", "len(x)", bugs=("len(x) + 1",)),
    Op("count", "str", "int", 'x.count("a")', bugs=('x.count("e")',)),
)

# Lists are the richest kind, so they start most chains.
_START_WEIGHTS: dict[Kind, float] = {"list": 0.5, "int": 0.25, "str": 0.25}


def start_kind(rng: random.Random) -> Kind:
    kinds = list(_START_WEIGHTS)
    return rng.choices(kinds, weights=[_START_WEIGHTS[k] for k in kinds])[0]


def draw_step(rng: random.Random, kind: Kind) -> Step:
    op = rng.choice([o for o in OPS if o.tin == kind])
    return Step(op, rng.choice(op.ks) if op.ks else 0)


def draw_input(rng: random.Random, kind: Kind) -> object:
    """A small input value; negatives are rarer so most examples read naturally."""
    if kind == "int":
        return rng.randint(-9, 20)
    if kind == "str":
        return "".join(rng.choice("abcde") for _ in range(rng.randint(1, 6)))
    lo = -5 if rng.random() < 0.3 else 0
    return [rng.randint(lo, 9) for _ in range(rng.randint(1, 5))]
