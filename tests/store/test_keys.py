"""content_key: the documented recipe, canonicalization rules, and refusals."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pydantic
import pytest

from codegym.sandbox import Limits
from codegym.store import StoreInputError, content_key
from codegym.tasks.task import Task


def test_key_follows_the_documented_recipe() -> None:
    doc = {"v": 1, "kind": "score", "parts": {"completion": "x = 1\n", "n": 3, "t": 0.5}}
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    expected = hashlib.sha256(raw.encode("ascii")).hexdigest()
    assert content_key("score", t=0.5, n=3, completion="x = 1\n") == expected


def test_key_is_64_hex_and_stable_across_part_order() -> None:
    a = content_key("k", x={"b": 1, "a": [1, 2]}, y="s")
    b = content_key("k", y="s", x={"a": [1, 2], "b": 1})
    assert a == b and len(a) == 64 and int(a, 16) >= 0


def test_kind_separates_key_spaces() -> None:
    assert content_key("score", x=1) != content_key("generation", x=1)


def test_every_part_matters() -> None:
    base = content_key("k", a="x", b=[1, 2])
    assert content_key("k", a="y", b=[1, 2]) != base
    assert content_key("k", a="x", b=[2, 1]) != base  # list order matters
    assert content_key("k", a="x", b=[1, 2], c=None) != base  # an extra part matters


def test_integral_floats_equal_ints_but_bools_do_not() -> None:
    assert content_key("k", t=1) == content_key("k", t=1.0)
    assert content_key("k", t=-0.0) == content_key("k", t=0)
    assert content_key("k", t=1.5) != content_key("k", t=1)
    assert content_key("k", t=True) != content_key("k", t=1)
    assert content_key("k", t=0.1 + 0.2) != content_key("k", t=0.3)  # exact repr, no rounding


def test_numpy_scalars_key_like_python_numbers() -> None:
    np = pytest.importorskip("numpy")
    assert content_key("k", t=np.float64(0.7), n=np.int64(5)) == content_key("k", t=0.7, n=5)


def test_bytes_and_str_differ_and_any_unicode_keys() -> None:
    assert content_key("k", v=b"abc") != content_key("k", v="abc")
    assert content_key("k", v="\ud800") != content_key("k", v="\ud801")  # lone surrogates
    assert content_key("k", v="é") != content_key("k", v="e")


def test_sets_are_order_independent() -> None:
    assert content_key("k", s={3, 1, 2}) == content_key("k", s=frozenset([2, 3, 1]))
    assert content_key("k", s={1, 2}) != content_key("k", s=[1, 2, 3])


class Color(enum.Enum):
    RED = "red"


def test_enums_key_by_value() -> None:
    assert content_key("k", c=Color.RED) == content_key("k", c="red")


@dataclass(frozen=True)
class Params:
    temperature: float
    top_p: float = 1.0
    note: str = field(default="", compare=False)


def test_dataclasses_key_by_compared_fields() -> None:
    a = content_key("k", p=Params(0.7, note="first"))
    assert a == content_key("k", p=Params(0.7, note="second"))  # compare=False: not identity
    assert a == content_key("k", p={"temperature": 0.7, "top_p": 1})
    assert a != content_key("k", p=Params(0.8))
    assert content_key("k", lim=Limits(cpu_s=2)) != content_key("k", lim=Limits(cpu_s=3))


def test_task_metadata_does_not_change_the_key() -> None:
    t1 = Task("T/0", "def f():\n", "f", "def check(c): pass", metadata={"src": "a"})
    t2 = Task("T/0", "def f():\n", "f", "def check(c): pass", metadata={"src": "b"})
    t3 = Task("T/0", "def f():\n", "f", "def check(c): assert c", metadata={"src": "a"})
    assert content_key("k", task=t1) == content_key("k", task=t2) != content_key("k", task=t3)


class Sampling(pydantic.BaseModel):
    temperature: float
    stop: list[str] = []


def test_pydantic_models_key_by_their_dump() -> None:
    assert content_key("k", s=Sampling(temperature=0.2, stop=["\n"])) == content_key(
        "k", s={"temperature": 0.2, "stop": ["\n"]}
    )


@pytest.mark.parametrize(
    ("parts", "where"),
    [
        ({"p": Path("/tmp/x")}, "parts['p']"),
        ({"lim": {"cpu": float("nan")}}, "parts['lim']['cpu']"),
        ({"x": [1, float("inf")]}, "parts['x'][1]"),
        ({"m": {1: "a"}}, "parts['m']"),
        ({"o": object()}, "parts['o']"),
        ({"d": {"$bytes": "AAAA"}}, "parts['d']"),
    ],
)
def test_unkeyable_parts_are_refused_with_their_location(
    parts: dict[str, object], where: str
) -> None:
    with pytest.raises(StoreInputError) as e:
        content_key("k", **parts)
    assert where in str(e.value)
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("kind", ["", None, 3])
def test_kind_must_be_a_non_empty_str(kind: object) -> None:
    with pytest.raises(StoreInputError, match="kind"):
        content_key(kind, x=1)  # type: ignore[arg-type]
