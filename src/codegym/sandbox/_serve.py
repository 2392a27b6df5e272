"""The program's side of an assert test: answer the judge's calls (standard library only).

Runs in the program's own process, after the program's top-level code, so the program
can change or replace all of it; nothing here is trusted. It only saves a correct
program the work of speaking the protocol: whatever it answers, the judge decodes
plain data and compares it with its own interpreter (see ``_judge``).

Requests (judge -> program), replies (program -> judge), all ``_plain`` messages:

- ``["get", name]``: a global of the program -> ``["fn"]`` (callable), ``["val", v]``
  (plain data), ``["mod", module_name]``, ``["none"]`` (no such name, or not plain);
- ``["call", target, args, kwargs]`` with target ``["g", name]`` or ``["m", handle, attr]``
  -> ``["ok", v, mutated]``, ``["obj", handle]`` (calling a class made an instance),
  ``["raise", builtin_base_names, message]`` or ``["bad", why]``. ``mutated`` lists the
  list, dict, set and bytearray arguments the call changed, as ``[position, v]``. With a
  fifth item, true (``loose``), a result that is not plain data is sent as its plain base
  (``_plain.loosen``) or, failing that, kept here and answered as ``["obj", handle]``;
- ``["attr", handle, name]`` -> ``["fn"]``, ``["val", v]`` or ``["bad", why]``.
"""

from __future__ import annotations

import builtins
import itertools
import types

import _plain

MAX_REPLY = 16 << 20
"""A reply larger than this is refused by the judge as well (``_judge.MAX_REPLY``)."""
MAX_REQUEST = 256 << 20
_MUTABLE = (list, dict, set, bytearray)


def serve(g: dict, fd: int) -> None:
    """Answer requests on ``fd`` until the judge closes it."""
    objects: dict[int, object] = {}
    reader = _plain.Reader(fd)
    decode = _plain.decoder(objects)
    while True:
        try:
            raw = reader.recv(MAX_REQUEST)
        except (OSError, _plain.NotPlain):
            return
        if raw is None:
            return
        try:
            msg = decode(raw)
            reply = _answer(g, objects, msg)
            data = _plain.dumps(reply)
        except _plain.NotPlain as e:
            data = _plain.dumps(["bad", str(e)[:500]])
        except RecursionError:
            data = _plain.dumps(["bad", "the result is nested too deeply"])
        if len(data) > MAX_REPLY:
            data = _plain.dumps(["bad", f"a reply of {len(data)} bytes (over {MAX_REPLY})"])
        try:
            _plain.send(fd, data)
        except OSError:
            return


def _answer(g: dict, objects: dict, msg: object) -> list:
    op = msg[0] if type(msg) is list and msg else None
    if op == "get":
        return _describe(g.get(msg[1], _MISSING) if type(msg[1]) is str else _MISSING)
    if op == "attr":
        obj = objects.get(msg[1], _MISSING)
        if obj is _MISSING:
            return ["bad", "no such object"]
        try:
            value = getattr(obj, str(msg[2]))
        except BaseException as e:
            return _raised(e)
        if callable(value):
            return ["fn"]
        return ["val", _plain.tree(value)]
    if op == "call":
        return _call(g, objects, msg[1], msg[2], msg[3], len(msg) > 4 and msg[4] is True)
    return ["bad", "unknown request"]


_MISSING = object()


def _describe(value: object) -> list:
    if value is _MISSING:
        return ["none"]
    if isinstance(value, types.ModuleType):
        return ["mod", value.__name__]
    if callable(value):
        return ["fn"]
    try:
        return ["val", _plain.tree(value)]
    except _plain.NotPlain:
        return ["none"]


def _call(
    g: dict, objects: dict, target: list, args: list, kwargs: dict | None, loose: bool = False
) -> list:
    if target[0] == "g":
        fn = g.get(target[1], _MISSING)
    else:
        obj = objects.get(target[1], _MISSING)
        fn = _MISSING if obj is _MISSING else getattr(obj, target[2], _MISSING)
    if fn is _MISSING:
        return ["bad", f"{target[-1]!r} is not defined"]
    if not callable(fn):
        return ["raise", ["TypeError", "Exception"], f"{target[-1]!r} is not callable"]
    kwargs = kwargs or {}
    # bytes, not trees: a list of scalars is its own tree, so a tree would change with it
    before = {k: _plain.dumps(_plain.tree(v)) for k, v in _mutable(args, kwargs)}
    try:
        result = fn(*args, **kwargs)
        if isinstance(fn, type):
            handle = len(objects) + 1
            objects[handle] = result
            return ["obj", handle]
        if _is_iterator(result):
            items = list(itertools.islice(result, _plain.MAX_ITEMS + 1))
            if len(items) > _plain.MAX_ITEMS:
                return ["bad", f"an iterator that yields more than {_plain.MAX_ITEMS} items"]
            value: object = {"i": _plain.tree(items)}
        else:
            value = _plain.tree(result)
    except _plain.NotPlain as e:
        if not loose:
            return ["bad", f"{target[-1]} returned {e}"]
        try:
            value = _plain.tree(_plain.loosen(result))
        except _plain.NotPlain:
            handle = len(objects) + 1
            objects[handle] = result
            return ["obj", handle]
    except BaseException as e:
        return _raised(e)
    changed = []
    for k, v in _mutable(args, kwargs):
        after = _plain.tree(v)
        if _plain.dumps(after) != before[k]:
            changed.append([k, after])
    return ["ok", value, changed]


def _mutable(args: list, kwargs: dict):  # type: ignore[no-untyped-def]
    for i, v in enumerate(args):
        if type(v) in _MUTABLE:
            yield i, v
    for k, v in kwargs.items():
        if type(v) in _MUTABLE:
            yield k, v


def _is_iterator(value: object) -> bool:
    t = type(value)
    return hasattr(t, "__next__") and hasattr(t, "__iter__") and t not in (str, bytes)


def _raised(e: BaseException) -> list:
    """An exception as the names of its built-in bases and its message."""
    names = [c.__name__ for c in type(e).__mro__ if getattr(builtins, c.__name__, None) is c]
    try:
        message = str(e)[:2000]
    except BaseException:
        message = ""
    return ["raise", names, message]
