"""Plain data across the boundary between a program and its judge (standard library only).

An assert-style test runs in a *judge* process that the program cannot reach; the test
calls the program's functions across a socket, and arguments and results cross as plain
data only: ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``,
``bytearray``, ``range``, and ``list``, ``tuple``, ``dict``, ``set`` and ``frozenset`` of
them. Types are matched exactly: a subclass (an ``int`` whose ``__eq__`` always answers
True, say) is not plain, so the program's objects never reach the test's comparisons. A
numpy scalar (``int64``, ``float32``, ``bool_``) is sent as its Python value (``item()``),
which compares as it does; an array is not plain data. The
decoder builds fresh built-in objects from bytes, so whatever the sending side did to its
own interpreter, the receiving side gets genuine values.

Wire form: UTF-8 JSON. ``None``, booleans, ``int`` (up to 4,000 digits), ``float``
(``NaN``/``Infinity`` included), ``str`` and ``list`` are themselves; every other type is
a one-key object: ``{"t": [...]}`` tuple, ``{"d": [[k, v], ...]}`` dict, ``{"s": [...]}``
set, ``{"f": [...]}`` frozenset, ``{"b": base64}`` bytes, ``{"y": base64}`` bytearray,
``{"c": [re, im]}`` complex, ``{"r": [start, stop, step]}`` range, ``{"I": hex}`` a larger
int, and ``{"i": [...]}`` the items an iterator yielded (decoded as an iterator). Anything
else a decoder meets raises ``NotPlain``.

Frames on the socket: a 4-byte big-endian length, then the JSON text.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import select
import struct
import time

MAX_DEPTH = 100
"""Nesting deeper than this is refused (cycles included) on both sides."""
MAX_ITEMS = 1_000_000
"""An iterator that yields more than this many items is not plain data."""
_BIG = 13_000  # bits: ints past ~3,900 digits travel as hex (json's int->str cap is 4,300)
_HDR = struct.Struct(">I")
_SCALARS = frozenset((type(None), bool, int, float, str))


class NotPlain(TypeError):
    """A value, or a message, is not plain data as defined above."""


class Late(Exception):
    """A ``Reader`` with a deadline got no whole frame before it."""


# ---------------------------------------------------------------- encoding


def tree(value: object, depth: int = 0) -> object:
    """``value`` as a JSON-able tree in the wire form.

    Raises:
        NotPlain: a value of another type, or nesting past ``MAX_DEPTH``.
    """
    t = type(value)
    if t in _SCALARS:
        if t is int and value.bit_length() > _BIG:  # type: ignore[attr-defined]
            return {"I": format(value, "x")}
        return value
    if depth >= MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels (or a cycle)")
    if t is list:
        for v in value:  # type: ignore[attr-defined]
            tv = type(v)
            if tv not in _SCALARS or (tv is int and v.bit_length() > _BIG):
                return [tree(v, depth + 1) for v in value]  # type: ignore[attr-defined]
        return value  # the common case, a list of scalars: nothing to convert
    encode = _ENCODERS.get(t)
    if encode is None:
        if getattr(t, "__module__", "") == "numpy" and getattr(value, "ndim", None) == 0:
            # a numpy scalar (an int64 is no int): its Python value, which == compares
            # alike; an array stays no plain data (its == answers an array, not a bool)
            return tree(value.item(), depth + 1)  # type: ignore[attr-defined]
        raise NotPlain(f"a {_type_name(value)} is not plain data")
    return encode(value, depth + 1)


_BASES = (bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)


def loosen(value: object, depth: int = 0) -> object:
    """``value`` with instances of subclasses of plain types (a ``Counter``, a named
    tuple, an ``OrderedDict``) made their plain base, all the way down.

    Raises:
        NotPlain: something in it is no plain type nor a subclass of one.
    """
    t = type(value)
    if t in _SCALARS:
        return value
    if depth >= MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels (or a cycle)")
    base = next((b for b in _BASES if isinstance(value, b)), None)
    if base is None:
        raise NotPlain(f"a {_type_name(value)} is not plain data")
    if base is dict:
        return {loosen(k, depth + 1): loosen(v, depth + 1) for k, v in value.items()}  # type: ignore[attr-defined]
    if base in (list, tuple, set, frozenset):
        return base(loosen(v, depth + 1) for v in value)  # type: ignore[attr-defined]
    return base(value)  # type: ignore[call-arg]


def _items(values, depth: int) -> list:  # type: ignore[no-untyped-def]
    return [tree(v, depth) for v in values]


_ENCODERS = {
    tuple: lambda v, d: {"t": _items(v, d)},
    dict: lambda v, d: {"d": [[tree(k, d), tree(x, d)] for k, x in v.items()]},
    set: lambda v, d: {"s": _items(v, d)},
    frozenset: lambda v, d: {"f": _items(v, d)},
    bytes: lambda v, d: {"b": base64.b64encode(v).decode()},
    bytearray: lambda v, d: {"y": base64.b64encode(v).decode()},
    complex: lambda v, d: {"c": [v.real, v.imag]},
    range: lambda v, d: {"r": [v.start, v.stop, v.step]},
}


def _type_name(value: object) -> str:
    t = type(value)
    mod = getattr(t, "__module__", "?")
    return t.__qualname__ if mod == "builtins" else f"{mod}.{t.__qualname__}"


_ENCODER = json.JSONEncoder(separators=(",", ":"))  # built once: json.dumps builds one a call


def dumps(message: object) -> bytes:
    """A message (lists and strings around ``tree`` values) as wire bytes."""
    return _ENCODER.encode(message).encode()


# ---------------------------------------------------------------- decoding


def _hook(obj: dict) -> object:
    if len(obj) != 1:
        raise NotPlain(f"an object with keys {sorted(obj)[:4]} is not a wire value")
    ((tag, v),) = obj.items()
    try:
        if tag == "t" and type(v) is list:
            return tuple(v)
        if tag == "d" and type(v) is list:
            return {_pair(p)[0]: _pair(p)[1] for p in _spread(v, [_pair(p)[0] for p in v])}
        if tag == "s" and type(v) is list:
            return set(_spread(v, v))
        if tag == "f" and type(v) is list:
            return frozenset(_spread(v, v))
        if tag in ("b", "y") and type(v) is str:
            data = base64.b64decode(v, validate=True)
            return data if tag == "b" else bytearray(data)
        if tag == "c" and type(v) is list and len(v) == 2 and all(type(x) is float for x in v):
            return complex(v[0], v[1])
        if tag == "r" and type(v) is list and len(v) == 3 and all(type(x) is int for x in v):
            return range(*v)
        if tag == "I" and type(v) is str:
            return int(v, 16)
        if tag == "i" and type(v) is list:
            return iter(v)
    except (TypeError, ValueError, binascii.Error) as e:  # unhashable set item, bad base64, ...
        raise NotPlain(f"bad {tag!r} value: {e}") from None
    raise NotPlain(f"bad wire value {tag!r}")


def _spread(items: list, keys: list) -> list:
    """``items``, refused when many of ``keys`` share a hash: a set or dict of them takes
    quadratic time to build (every multiple of 2**61 - 1 hashes to 0), which a program's
    reply must not make the other side spend."""
    if len(keys) > 1024 and 2 * len({hash(k) for k in keys}) < len(keys):
        raise NotPlain(f"{len(keys)} set items or dict keys whose hashes collide")
    return items


def _int(digits: str) -> int:
    """A decimal int on the wire. ``tree`` sends ints past ~3,900 digits as hex; a longer
    decimal one comes only from a hand-written reply, and turning decimal digits into an
    int takes quadratic time (minutes for millions of digits, spent by the judge, whose
    interpreter lifts Python's own digit cap to show big ints)."""
    if len(digits) > _MAX_DECIMAL:
        raise NotPlain(f"a decimal int of {len(digits)} digits (ints this big travel as hex)")
    return int(digits)


_MAX_DECIMAL = 4300
_DECODER = json.JSONDecoder(object_hook=_hook, parse_int=_int)


def _pair(p: object) -> list:
    if type(p) is not list or len(p) != 2:
        raise NotPlain("a dict item is not a [key, value] pair")
    return p


def loads(raw: bytes, refs: dict | None = None) -> object:
    """Wire bytes back to a message of genuine built-in values.

    ``refs`` (the program's side only) resolves ``{"h": id}``: an object of the program's
    that the judge holds a handle to and passes back as an argument.

    Raises:
        NotPlain: not UTF-8 JSON, a malformed wire value, or nesting too deep.
    """
    return (_LOADS if refs is None else decoder(refs))(raw)


def decoder(refs: dict | None = None):  # type: ignore[no-untyped-def]
    """``loads`` with its JSON decoder built once (for a loop of many messages)."""
    parser = _DECODER
    if refs is not None:

        def hook(obj: dict) -> object:
            if len(obj) == 1 and "h" in obj:
                try:
                    return refs[obj["h"]]
                except (KeyError, TypeError):
                    raise NotPlain(f"no object with handle {obj['h']!r}") from None
            return _hook(obj)

        parser = json.JSONDecoder(object_hook=hook, parse_int=_int)

    def decode(raw: bytes) -> object:
        try:
            return parser.decode(raw.decode("utf-8"))
        except NotPlain:
            raise
        except (ValueError, RecursionError, TypeError, MemoryError) as e:
            raise NotPlain(f"not a wire message: {type(e).__name__}: {str(e)[:200]}") from None

    return decode


_LOADS = decoder()

# ---------------------------------------------------------------- framing


def send(fd: int, payload: bytes) -> None:
    """Write one frame; OSError when the other side is gone."""
    view = memoryview(_HDR.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


class Reader:
    """Frames from one fd, read in large chunks (a header and its body usually arrive in
    one read: half the system calls of reading them apart)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.deadline: float | None = None
        """``time.monotonic()`` past which a read waiting for bytes raises ``Late``."""

    def recv(self, cap: int) -> bytes | None:
        """One frame; None on a clean end of stream before a frame starts.

        Raises:
            NotPlain: a frame longer than ``cap`` or cut short (the sender broke protocol).
            OSError: the read failed.
        """
        if not self._fill(4):
            if self.buf:
                raise NotPlain("the stream ended inside a frame header")
            return None
        (n,) = _HDR.unpack_from(self.buf)
        if n > cap:
            raise NotPlain(f"a message of {n} bytes (the limit is {cap})")
        if not self._fill(4 + n):
            raise NotPlain("the stream ended inside a frame")
        body = bytes(self.buf[4 : 4 + n])
        del self.buf[: 4 + n]
        return body

    def _fill(self, want: int) -> bool:
        while len(self.buf) < want:
            if self.deadline is not None:
                left = self.deadline - time.monotonic()
                poller = select.poll()
                poller.register(self.fd, select.POLLIN)
                if left <= 0 or not poller.poll(left * 1000):
                    raise Late("no answer before the deadline")
            chunk = os.read(self.fd, max(16384, want - len(self.buf)))
            if not chunk:
                return False
            self.buf += chunk
        return True


def recv(fd: int, cap: int) -> bytes | None:
    """One frame from ``fd`` read unbuffered (see ``Reader``)."""
    head = _read_exactly(fd, 4)
    if not head:
        return None
    if len(head) < 4:
        raise NotPlain("the stream ended inside a frame header")
    (n,) = _HDR.unpack(head)
    if n > cap:
        raise NotPlain(f"a message of {n} bytes (the limit is {cap})")
    body = _read_exactly(fd, n)
    if len(body) < n:
        raise NotPlain("the stream ended inside a frame")
    return body


def _read_exactly(fd: int, n: int) -> bytes:
    parts = []
    left = n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
