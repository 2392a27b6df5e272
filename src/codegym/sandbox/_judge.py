"""The judge: runs one assert-style test where the program cannot reach it (stdlib only).

The zygote forks a judge for each assert test; the program runs in its own run
namespace and serves the judge's calls (``_serve``). The judge shares no process, pid
namespace, file or writable memory with the program: the test's code, its expected
values and the interpreter that compares them exist only here, so the program cannot
read, patch or replace any of them (frames, builtins, audit hooks, trace functions,
``check``, the test file: none is the program's to touch).

Name resolution for the test's code, in order: the names it defines itself, then the
names its trusted *setup* defined (a task's prompt: helper functions the test calls are
the task's, not the program's) except those listed as the program's, then this
interpreter's builtins, then the program: a function or class becomes a proxy called
across the socket, a plain value is copied, a module is imported here afresh.

The test's trusted code also finds ``__judge__`` in its globals (``_Services``): a
deadline for the program's answers, the program's names looked up directly, values kept
across tests of one judge (expected outputs derived from a reference), and a way to
report the task itself as broken.

Arguments and results cross as plain data (``_plain``); a call that raises in the
program raises the nearest built-in exception here. The program breaking the protocol
(a result that is not plain data, a malformed or oversized reply) or going away
(exiting, crashing, being killed) fails the test whatever the test's code catches:
``ProgramFault`` derives from ``BaseException``, and the judge also remembers it.
"""

from __future__ import annotations

import builtins
import json
import os
import random
import socket
import sys
import time

import _plain

MAX_REPLY = 16 << 20


class ProgramFault(BaseException):
    """The program broke the protocol or went away; the test fails whatever it catches."""


class ProgramLate(BaseException):
    """The program did not answer a call before the deadline the test set for it."""


class TaskFault(BaseException):
    """The test's own trusted code found the task broken (its reference raised, say):
    reported as ``infra``, never the program's fault."""


class ProgramRaised(Exception):
    """The program raised an exception with no built-in base to stand for it."""


class _Link:
    """The judge's end of the socket to the program."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.reader = _plain.Reader(fd)
        self.fault = ""  # the first protocol fault, which fails the test
        self.gone = False  # the program's end closed: it exited or died
        self.late = ""  # why the program missed a deadline: the call socket is out of step
        self.started = 0.0  # when the deadline was set (for the message)
        self.calls = 0

    def ask(self, message: list) -> list:
        if self.late:
            raise ProgramLate(self.late)
        if self.gone or self.fault:
            raise ProgramFault(self.fault or "the program is gone")
        self.calls += 1
        try:
            _plain.send(self.fd, _plain.dumps(message))
            raw = self.reader.recv(MAX_REPLY)
        except OSError:
            raw = None
        except _plain.Late:
            budget = self.reader.deadline - self.started if self.reader.deadline else 0.0
            self.late = f"the program did not answer within {budget:.3g}s"
            raise ProgramLate(self.late) from None
        except _plain.NotPlain as e:
            self._fail(f"broke the call protocol: {e}")
        if raw is None:
            self.gone = True
            raise ProgramFault("the program is gone")
        try:
            reply = _plain.loads(raw)
        except _plain.NotPlain as e:
            self._fail(f"answered with something other than plain data: {e}")
        if type(reply) is not list or not reply or type(reply[0]) is not str:
            self._fail("answered with a malformed reply")
        if reply[0] == "bad":
            self._fail(str(reply[1])[:500] if len(reply) > 1 else "refused the call")
        return reply

    def _fail(self, why: str) -> None:
        self.fault = self.fault or f"the program {why}"
        raise ProgramFault(self.fault)

    def call(self, target: list, args: tuple, kwargs: dict, loose: bool = False) -> object:
        try:
            wire = ["call", target, [_arg(a) for a in args], _kwargs(kwargs)]
            if loose:
                wire.append(True)
        except _plain.NotPlain as e:
            raise TypeError(
                f"the test passed {e} to the program; only plain data crosses"
            ) from None
        reply = self.ask(wire)
        kind = reply[0]
        if kind == "ok" and len(reply) == 3 and type(reply[2]) is list:
            self._apply(reply[2], args, kwargs)
            return reply[1]
        if kind == "obj" and len(reply) == 2 and type(reply[1]) is int:
            return _Handle(self, reply[1])
        if kind == "raise" and len(reply) == 3:
            raise _exception(reply[1], reply[2])
        self._fail("answered a call with a malformed reply")
        return None  # unreachable

    def _apply(self, changed: list, args: tuple, kwargs: dict) -> None:
        """Carry the program's in-place changes of list/dict/set arguments back here."""
        for item in changed:
            if type(item) is not list or len(item) != 2:
                self._fail("reported a malformed argument change")
            where, value = item
            target = args[where] if type(where) is int and 0 <= where < len(args) else None
            if type(where) is str:
                target = kwargs.get(where)
            if type(target) not in (list, bytearray, dict, set) or type(value) is not type(target):
                self._fail("reported a change of an argument it was not given")
            if type(target) in (list, bytearray):
                target[:] = value
            else:  # dict or set
                target.clear()
                target.update(value)


def _arg(value: object) -> object:
    """An argument on the wire: plain data, or a handle to one of the program's objects."""
    if type(value) is _Handle:
        return {"h": value._id}
    return _plain.tree(value)


def _kwargs(kwargs: dict) -> object:
    if not kwargs:
        return None
    return {"d": [[k, _arg(v)] for k, v in kwargs.items()]}


def _exception(names: object, message: object) -> BaseException:
    """The built-in exception the program raised (or the nearest built-in base)."""
    text = message if type(message) is str else ""
    for name in names if type(names) is list else ():
        cls = getattr(builtins, name, None) if type(name) is str else None
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                return cls(text)
            except BaseException:  # e.g. UnicodeDecodeError wants five arguments
                exc = cls.__new__(cls)
                exc.args = (text,)
                return exc
    return ProgramRaised(text)


class _Proxy:
    """A function or class of the program, called across the socket."""

    __slots__ = ("__name__", "_link", "_loose", "_target")

    def __init__(self, link: _Link, target: list, name: str, loose: bool = False) -> None:
        self._link = link
        self._target = target
        self.__name__ = name
        self._loose = loose

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._link.call(self._target, args, kwargs, self._loose)

    def __repr__(self) -> str:
        return f"<the program's {self.__name__}>"


class _Handle:
    """An instance the program made when the test called one of its classes.

    Only attribute access works: methods become proxies, plain attributes are copied.
    It is not true, not a container and equal only to itself, so it can stand in for
    no value the test compares with.
    """

    __slots__ = ("_id", "_link")

    def __init__(self, link: _Link, handle: int) -> None:
        self._link = link
        self._id = handle

    def __getattr__(self, name: str) -> object:
        reply = self._link.ask(["attr", self._id, name])
        if reply[0] == "fn":
            return _Proxy(self._link, ["m", self._id, name], name)
        if reply[0] == "val" and len(reply) == 2:
            return reply[1]
        if reply[0] == "raise" and len(reply) == 3:
            raise _exception(reply[1], reply[2])
        self._link._fail("answered an attribute lookup with a malformed reply")
        return None  # unreachable

    def __bool__(self) -> bool:
        self._link._fail("returned an object where a value was tested for truth")
        return False  # unreachable

    def __len__(self) -> int:
        self._link._fail("returned an object where a container was expected")
        return 0  # unreachable

    def __iter__(self):  # type: ignore[no-untyped-def]
        self._link._fail("returned an object where a container was expected")

    def __repr__(self) -> str:
        return "<an object of the program>"


_MEMO: dict[str, object] = {}
_MEMO_MAX = 1024  # EvalPlus: two per task, 1,084 in HumanEval+ and MBPP+ together


class _Services:
    """What a test's trusted code may ask of the judge, as the global ``__judge__``.

    The program never sees it (the judge's globals are not the program's), and its
    name starts with ``__``, which no lookup in the program answers.
    """

    __slots__ = ("_link",)

    def __init__(self, link: _Link) -> None:
        self._link = link

    def deadline(self, seconds: float | None) -> None:
        """The program must answer the calls from now on within ``seconds`` in all (from
        this moment); None: no deadline. A miss fails the test as ``timeout``."""
        reader = self._link.reader
        self._link.started = time.monotonic()
        reader.deadline = None if seconds is None else self._link.started + max(0.0, seconds)

    def memo(self, key: str, make):  # type: ignore[no-untyped-def]
        """``make()``, computed once per judge for ``key`` (a digest of everything it
        depends on): expected values a task derives from its reference, say. Only the
        test's trusted code computes what is kept; the program never reaches it."""
        if key in _MEMO:
            return _MEMO[key]
        value = make()
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = value
        return value

    def program(self, name: str) -> object:
        """The program's ``name`` (a proxy for a function or class), even where the
        test's globals or the builtins have one of that name; ``KeyError`` when it has
        none. The first lookup waits for the program to be ready (its import)."""
        value = _fetch(self._link, name)
        if value is _NONE:
            raise KeyError(name)
        return value

    def loose(self, fn: object) -> object:
        """``fn`` (a proxy of the program's) as one whose results need not be plain data:
        a subclass of a plain type comes as its base (a ``Counter`` as a ``dict``), and
        anything else as an opaque object, equal only to itself (for a test that asks no
        more than ``is not None``, as some of MBPP+'s do)."""
        if type(fn) is not _Proxy:
            return fn
        return _Proxy(self._link, fn._target, fn.__name__, loose=True)

    @staticmethod
    def plain(value: object) -> object:
        """``value`` as the program's loose results come (``_plain.loosen``), or itself
        when it is not plain data in any form: so expected values made here compare
        with them like for like."""
        try:
            return _plain.loosen(value)
        except _plain.NotPlain:
            return value

    @staticmethod
    def wire_seconds(value: object) -> float:
        """About how long ``value`` takes to cross from the program as a result (encoded
        there, decoded here): time a budget should not charge to the program. Wall clock
        (a busy machine slows the program's side alike), at most 3 x the CPU time; 0 for
        a value that is not plain data."""
        cpu, wall = time.process_time(), time.monotonic()
        try:
            _plain.loads(_plain.dumps(_plain.tree(value)))
        except _plain.NotPlain:
            return 0.0
        return min(time.monotonic() - wall, 3 * (time.process_time() - cpu))

    @staticmethod
    def show(value: object, limit: int = 200) -> str:
        """``repr(value)`` cut at about ``limit`` characters, and never built past them: a
        failure message of a program's answer costs the judge no more than its length (the
        digits of a huge int take minutes, so it is named by its size)."""
        out: list[str] = []
        _show(value, out, limit)
        text = "".join(out)
        return text if len(text) <= limit else text[:limit] + "..."

    def task_fault(self, why: str) -> TaskFault:
        """The exception that reports the task itself as broken (``raise`` it)."""
        return TaskFault(str(why)[:500])


_BRACKETS = {list: "[]", tuple: "()", set: "{}", frozenset: "{}", dict: "{}"}


def _show(value: object, out: list, limit: int) -> None:
    """Append ``value``'s repr to ``out`` until it holds ``limit`` characters."""
    if sum(map(len, out)) > limit:
        return
    kind = type(value)
    if kind is int and value.bit_length() > 4096:  # type: ignore[attr-defined]
        out.append(f"<an int of {value.bit_length()} bits>")  # type: ignore[attr-defined]
    elif kind in (str, bytes, bytearray):
        out.append(repr(value[: limit + 1]))  # type: ignore[index]
    elif kind in _BRACKETS:
        items = value.items() if kind is dict else value  # type: ignore[attr-defined]
        out.append(_BRACKETS[kind][0])
        for i, item in enumerate(items):  # type: ignore[arg-type]
            if sum(map(len, out)) > limit:
                out.append("...")
                break
            if i:
                out.append(", ")
            if kind is dict:
                _show(item[0], out, limit)
                out.append(": ")
                item = item[1]
            _show(item, out, limit)
        out.append(_BRACKETS[kind][1])
    else:
        out.append(repr(value)[: limit + 1])


class _Globals(dict):
    """The test's globals: a name it does not define is looked up in the program."""

    def __init__(self, link: _Link) -> None:
        super().__init__(__name__="__main__", __builtins__=builtins)
        self._link = link

    def __missing__(self, name: str) -> object:
        if hasattr(builtins, name) or name.startswith("__"):
            raise KeyError(name)  # the lookup goes on to this interpreter's builtins
        value = _fetch(self._link, name)
        if value is _NONE:
            raise KeyError(name)
        self[name] = value
        return value


_NONE = object()


def _fetch(link: _Link, name: str) -> object:
    """The program's global ``name`` as the test sees it, or ``_NONE``."""
    reply = link.ask(["get", name])
    kind = reply[0]
    if kind == "fn":
        return _Proxy(link, ["g", name], name)
    if kind == "val" and len(reply) == 2:
        return reply[1]
    if kind == "mod" and len(reply) == 2 and reply[1] in sys.modules:
        # only a module this interpreter loaded already: the program must not choose
        # what the judge imports (``unittest.__main__`` runs a program on import)
        return sys.modules[reply[1]]
    return _NONE


def run(setup, code, program_names: list, fd: int) -> dict:  # type: ignore[no-untyped-def]
    """Run one test (compiled ``setup`` and ``code``) against the program on ``fd``.

    Returns the test's result: ``passed``, ``verdict`` (``ok`` for a test that ran, with
    ``passed`` False for a failed assertion; ``error``/``memory`` for an exception),
    ``detail``, and ``gone`` / ``fault`` when the program went away or broke protocol.
    """
    link = _Link(fd)
    g = _Globals(link)
    g["__judge__"] = _Services(link)
    # the builtins the test's code names, put in its globals: a lookup in a dict subclass
    # that misses costs a call of __missing__ and a raised KeyError before the builtins
    for code_obj in (setup, code):
        if code_obj is not None:
            g.update(_builtins_named(code_obj))
    stage = "set-up"
    try:
        if setup is not None:
            exec(setup, g)
        for name in program_names:  # the program's, called without asking first
            g[name] = _Proxy(link, ["g", name], name)
        stage = "test"
        exec(code, g)
        result = {"passed": True, "verdict": "ok", "detail": ""}
    except ProgramFault:
        result = {"passed": False, "verdict": "error", "detail": ""}
    except ProgramLate as e:
        result = {"passed": False, "verdict": "timeout", "detail": _describe(e)}
    except TaskFault as e:
        return {"passed": False, "verdict": "infra", "detail": f"the task: {e}"}
    except AssertionError as e:
        result = {"passed": False, "verdict": "ok", "detail": _describe(e)}
    except MemoryError:
        result = {"passed": False, "verdict": "memory", "detail": "MemoryError"}
    except BaseException as e:
        detail = _describe(e)
        if stage == "set-up" and not link.calls:
            # the task's own set-up failed before the program took part: not the program's
            return {"passed": False, "verdict": "infra", "detail": f"test set-up: {detail}"}
        result = {"passed": False, "verdict": "error", "detail": detail}
    if link.fault:  # whatever the test's code caught
        return {"passed": False, "verdict": "error", "detail": link.fault[:500], "fault": True}
    if link.gone:
        return {**result, "passed": False, "gone": True}
    return result


_NAMED: dict[object, dict] = {}


def _builtins_named(code_obj) -> dict:  # type: ignore[no-untyped-def]
    """The builtins ``code_obj`` (and the functions in it) names, by name; cached."""
    found = _NAMED.get(code_obj)
    if found is None:
        names: set[str] = set()
        stack = [code_obj]
        while stack:
            c = stack.pop()
            names.update(c.co_names)
            stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
        table = vars(builtins)
        found = _NAMED[code_obj] = {n: table[n] for n in names if n in table}
        if len(_NAMED) > 1024:
            _NAMED.clear()
    return found


def _describe(e: BaseException) -> str:
    """``Type: message`` of a failure, even when the message holds a program value whose
    text cannot be made (a repr that raises, a string past any limit)."""
    try:
        return f"{type(e).__name__}: {e}"[:500]
    except BaseException:
        return f"{type(e).__name__}: (its message could not be shown)"


def serve_tests(ctl: int) -> None:
    """The judge's loop: one test at a time from the zygote, until it goes away.

    Each request is a one-byte message carrying the call socket to the test's run, then a
    frame with the test (``setup`` and ``code``, each as source the first time and by the
    number the zygote gave it after that, and ``names``); the answer is a frame with the
    result. Every test starts from the same state: fresh globals, this interpreter's
    builtins as they were when the judge started, ``random`` reseeded (as after a fork).
    """
    sock = socket.socket(fileno=ctl)
    sys.set_int_max_str_digits(0)  # a test's message may show a program's huge int
    pristine = dict(vars(builtins))
    compiled: dict[int, object] = {}  # by the number the zygote gave each source
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1, 1)
            raw = _plain.recv(ctl, 1 << 30) if msg else None
        except (OSError, _plain.NotPlain):
            return
        if not msg or raw is None or not fds:
            return
        call = fds[0]
        try:
            test = json.loads(raw)
            random.seed(os.urandom(16))  # as after a fork (16 bytes: seed() reads 2.5 KB)
            try:
                setup = _compiled(compiled, test, "setup")
                code = _compiled(compiled, test, "code")
            except (SyntaxError, ValueError) as e:
                result = {"passed": False, "verdict": "error", "detail": f"bad test: {e}"}
            else:
                result = run(setup, code, list(test.get("names") or []), call)
        except BaseException as e:  # the judge goes on; what broke the test is the test's
            result = {"passed": False, "verdict": "error", "detail": _describe(e)}
        finally:
            os.close(call)
        if vars(builtins) != pristine:  # a test changed builtins: not for the next one
            vars(builtins).clear()
            vars(builtins).update(pristine)
        _plain.send(ctl, json.dumps(result).encode())


def _compiled(cache: dict, test: dict, part: str):  # type: ignore[no-untyped-def]
    """A test's ``setup`` or ``code``: sent as source the first time, then by number."""
    number = test[part + "_id"]
    if part in test:
        source = test[part]
        cache[number] = compile(source, f"<{part}>", "exec") if source else None
    return cache[number]
