"""Content keys: one recipe, used everywhere a result is cached (DESIGN.md principle 2).

A key is the sha256 of a canonical JSON document describing *everything that decides the
result*. Equal inputs give equal keys on any machine and Python version; any change to an
input gives a new key, so a stale result is never served.

The recipe, for ``content_key(kind, **parts)``::

    sha256(utf8(json.dumps({"v": 1, "kind": kind, "parts": canon(parts)},
                           sort_keys=True, separators=(",", ":"),
                           ensure_ascii=True, allow_nan=False))).hexdigest()

where ``canon`` maps values as follows:

- ``None``, ``bool``, ``str``: themselves (strings are escaped to ASCII, so lone
  surrogates and any Unicode are encoded unambiguously).
- integers (any ``numbers.Integral``, numpy ones included): ``int``.
- floats (any ``numbers.Real``): an integral value with ``abs < 2**53`` becomes that
  ``int`` (so ``temperature=1`` and ``temperature=1.0`` share a key; ``-0.0`` is ``0``);
  any other is kept and written with Python's shortest round-trip ``repr``, which is the
  same on every platform. NaN and infinities are refused: they have no JSON form and a
  key built from them is almost always a bug.
- ``bytes``/``bytearray``: ``{"$bytes": "<base64>"}``. A dict whose only key is
  ``"$bytes"`` is refused, so the encoding stays one-to-one.
- mappings: keys must be ``str``; values canonicalized; order does not matter.
- lists and tuples: a list, order kept. Sets and frozensets: a list sorted by each
  element's canonical JSON (so set order does not matter).
- ``enum.Enum``: its ``value``, canonicalized.
- dataclass instances: a mapping of their fields, *skipping fields declared with
  ``compare=False``* (those are declared not part of the value's identity, e.g.
  ``Task.metadata``). The class name is not included: the ``kind`` separates key spaces.
- pydantic models (anything with ``model_dump()``): ``model_dump(mode="python")``.

Anything else (``Path``, ``datetime``, arbitrary objects) raises ``StoreInputError``
naming where in ``parts`` it sits; convert it to one of the above explicitly, so a key
never depends on an object's incidental ``repr``.

Which parts to include is the caller's contract; for example a score key should cover the
task's ``digest()``, ``HARNESS_VERSION``, the effective limits (``limits.to_wire()``)
and the completion, and a generation key the model, prompt, sampling parameters and
sample index or seed.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import json
import math
import numbers
from collections.abc import Mapping
from typing import Any, Final

from codegym.store.errors import StoreInputError

KEY_VERSION: Final = 1
"""Bumped only if the recipe above changes (it would invalidate every stored result)."""

_MAX_EXACT_INT_FLOAT: Final = float(2**53)

JSONValue = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]


def content_key(kind: str, /, **parts: Any) -> str:
    """The 64-hex-digit sha256 content key of ``parts`` under ``kind``.

    ``kind`` names the key space (``"generation"``, ``"score"``, ``"trajectory"``...), so
    equal parts in different spaces never collide.

    Raises:
        StoreInputError: ``kind`` is empty or not a str, or a part cannot be canonicalized
            (the message names the part, e.g. ``parts['limits'].cpu_s``).
    """
    if not isinstance(kind, str) or not kind:
        raise StoreInputError(
            f"content_key kind must be a non-empty str like 'score', got {kind!r}"
        )
    doc = {"v": KEY_VERSION, "kind": kind, "parts": canonical(parts, "parts")}
    return hashlib.sha256(canonical_json(doc).encode("ascii")).hexdigest()


def canonical_json(value: object) -> str:
    """Serialize an already-canonical value the one way keys are computed."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def canonical(value: Any, where: str = "value") -> JSONValue:
    """Map ``value`` to plain JSON data by the rules in the module docstring.

    ``where`` names the value in error messages.

    Raises:
        StoreInputError: the value (or something inside it) has no canonical form.
    """
    # bool before Integral: bool is an Integral, but true and 1 must stay different.
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return canonical(value.value, f"{where}.value")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return _canonical_float(float(value), where)
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        return _canonical_mapping(value, where)
    if isinstance(value, (list, tuple)):
        return [canonical(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [canonical(v, f"{where}{{…}}") for v in value]
        return sorted(items, key=canonical_json)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.compare}
        return _canonical_mapping(fields, where, attr=True)
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return canonical(dump(mode="python"), where)
    raise StoreInputError(
        f"{where}: cannot build a content key from a {type(value).__name__} ({value!r:.80}); "
        "convert it to str, a number, bytes, a list or a dict first"
    )


def _canonical_float(value: float, where: str) -> JSONValue:
    if not math.isfinite(value):
        raise StoreInputError(
            f"{where}: {value!r} cannot be part of a content key; use a finite number or None"
        )
    if value.is_integer() and abs(value) < _MAX_EXACT_INT_FLOAT:
        return int(value)
    return value


def _canonical_mapping(
    value: Mapping[Any, Any], where: str, *, attr: bool = False
) -> dict[str, JSONValue]:
    out: dict[str, JSONValue] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise StoreInputError(
                f"{where}: mapping keys must be str for a content key, got {k!r} "
                f"({type(k).__name__}); convert the keys to str"
            )
        out[k] = canonical(v, f"{where}.{k}" if attr else f"{where}[{k!r}]")
    if list(out) == ["$bytes"]:
        raise StoreInputError(
            f"{where}: a mapping whose only key is '$bytes' is reserved for bytes in "
            "content keys; rename the key"
        )
    return out
