"""The grader's own account of a test run: each test's outcome leaves the interpreter as
the test ends, signed, beside canary tests whose outcomes the grader knows, with a check
that pytest's reporting machinery is the one that loaded.

pytest runs the patched package in its own interpreter, so whatever the package's code
does in that process can touch pytest's report. The JUnit file is written when the session
ends, and a patch could rewrite it afterwards (an ``atexit`` hook in the package). A
grading therefore adds a plugin of its own (a module with a random name, written after the
patch's changes were undone) and two canaries:

- The plugin reads a key and its instructions from stdin when it loads, then empties
  stdin (the key is in no file, argument or environment variable, and stdin cannot be
  read back). It keeps everything it uses bound in its functions, not in module globals.
- It writes one line per finished test to a pipe the sandbox reads, as each test ends:
  node id, defining file, outcome (a test with no report at all is an ``error``), with a
  sequence number and an HMAC. It holds the pipe on a private close-on-exec fd.
- The canaries are two module-level tests with plausible names appended to an existing
  test module of the task's (the module of its first ``FAIL_TO_PASS`` test that is a
  Python file): one must fail, one must pass. They are collected like the module's other
  tests (so the module's autouse fixtures apply: a parametrized one makes an instance per
  param, each of which must come out as written or be skipped by the param's marks), and
  added back if a filter (``-k``) dropped them.
- At the end it checks that pytest's report path (``TestReport``, ``CallInfo``, the
  runner's and pluggy's call functions, ``os.write``, its own functions) is made of the
  objects that were there when it loaded, and that no hook implementation that decides or
  records an outcome comes from code in the project other than the project's own
  ``conftest.py`` files; it signs what it found, with the count.

``verify`` accepts a run only when every line is signed, well formed and in sequence, no
test appears twice, the count matches, the integrity check is clean, both canaries came
out as written, and the JUnit file agrees with the stream on whether each of the task's
tests passed. Anything else is tampering: the grade is ``unresolved``, never ``infra``
(the program caused it), and nothing a run prints can make ``verify`` raise.

What this cannot stop: the package and the test runner share one interpreter, as in every
pytest-based grader. Code that finds the plugin's closures, or patches pytest somewhere
the check does not look, and forges only the task's own tests (telling them from the
canaries by knowing the suite as shipped) is not caught; nor is a "fix" that makes the
tests pass without fixing anything (values that compare equal to everything, inputs
special-cased).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from codegym.tasks.swe import junit

MARK = "\n<<codegym-junit>>\n"
"""Printed by the shell between the stream and the JUnit file."""
_OUTCOMES = ("passed", "skipped", "failed", "error")
_WORDS = (
    "empty", "none", "roundtrip", "unicode", "large", "negative", "nested", "repr", "copy",
    "default", "invalid", "order", "compat", "boundary", "types", "single", "many", "basic",
)  # fmt: skip

_PLUGIN = '''\
"""pytest plugin: test outcomes as each test ends."""
import hashlib, hmac, json, os, sys
from pathlib import Path

import pytest


def _make():
    raw = b""
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        raw += chunk
    try:
        os.ftruncate(0, 0)
    except OSError:
        pass
    key, meta = raw[:32], json.loads(raw[32:])
    fd = os.dup(3)
    os.set_inheritable(fd, False)
    os.close(3)
    import _pytest.python, _pytest.reports, _pytest.runner, pluggy._callers

    rep, run, py = _pytest.reports, _pytest.runner, _pytest.python
    paths = {
        "TestReport.from_item_and_call": lambda: vars(rep.TestReport).get("from_item_and_call"),
        "TestReport.__init__": lambda: vars(rep.TestReport).get("__init__"),
        "BaseReport.passed": lambda: vars(rep.BaseReport).get("passed"),
        "BaseReport.failed": lambda: vars(rep.BaseReport).get("failed"),
        "BaseReport.skipped": lambda: vars(rep.BaseReport).get("skipped"),
        "CallInfo.from_call": lambda: vars(run.CallInfo).get("from_call"),
        "runner.call_and_report": lambda: getattr(run, "call_and_report", None),
        "runner.runtestprotocol": lambda: getattr(run, "runtestprotocol", None),
        "runner.call_runtest_hook": lambda: getattr(run, "call_runtest_hook", None),
        "runner.pytest_runtest_makereport": lambda: getattr(run, "pytest_runtest_makereport", None),
        "python.pytest_pyfunc_call": lambda: getattr(py, "pytest_pyfunc_call", None),
        "python.Function.runtest": lambda: vars(py.Function).get("runtest"),
        "pluggy._multicall": lambda: getattr(pluggy._callers, "_multicall", None),
        "os.write": lambda: os.write,
        "hmac.new": lambda: hmac.new,
        "json.dumps": lambda: json.dumps,
    }  # absent in some pytest versions: then absent at the end too
    def state(get):
        obj = get()
        fn = getattr(obj, "__func__", obj)
        return obj, getattr(fn, "__code__", None)  # a function's code can be swapped in place

    loaded = {name: state(get) for name, get in paths.items()}
    root = os.getcwd() + os.sep
    env = root + ".venv" + os.sep  # the image's environment: restored, a patch cannot touch it
    seq, worst, hooks = [0], {}, {}
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
    write, dumps, new, sha = os.write, json.dumps, hmac.new, hashlib.sha256

    def send(*fields):
        body = dumps([seq[0], *fields], separators=(",", ":"))
        data = (body + " " + new(key, body.encode(), sha).hexdigest() + "\\n").encode()
        while data:
            data = data[write(fd, data):]
        seq[0] += 1

    def logreport(report):
        if report.when == "call":
            out = "failed" if report.failed else "skipped" if report.skipped else "passed"
        else:
            out = "error" if report.failed else "skipped" if report.skipped else "passed"
        prev = worst.get(report.nodeid, "passed")
        worst[report.nodeid] = out if rank[out] > rank[prev] else prev

    def logfinish(nodeid, location):
        send("test", nodeid, location[0], worst.pop(nodeid, "error"))

    def modifyitems(session, config, items):
        """The canaries, added back at the end if a filter (-k) dropped them."""
        here = [i for i in items if str(i.path).endswith(os.sep + meta["file"])]
        have = {getattr(i, "originalname", i.name) for i in here}  # [params] of autouse fixtures
        mod = here[0].getparent(pytest.Module) if here else None
        for name in (meta["fail"], meta["pass"]):
            if name not in have:
                if mod is None:
                    mod = pytest.Module.from_parent(session, path=Path(root + meta["file"]))
                items.append(pytest.Function.from_parent(mod, name=name))

    def ours(fn):
        return getattr(fn, "__code__", None) in mine

    def foreign(config):
        """Hook implementations of the report path from the project's code (not its
        conftest.py files) or from no file at all."""
        bad = []
        for hook in ("pytest_runtest_makereport", "pytest_runtest_logreport",
                     "pytest_runtest_protocol", "pytest_runtest_call", "pytest_pyfunc_call",
                     "pytest_report_teststatus", "pytest_runtest_logfinish"):
            for impl in getattr(config.hook, hook).get_hookimpls():
                fn = impl.function
                if ours(fn):
                    continue
                code = getattr(fn, "__code__", None)
                path = os.path.abspath(code.co_filename) if code is not None else "?"
                if path.startswith(root) and os.path.basename(path) == "conftest.py":
                    continue  # the project's own conftest.py files: restored by the grader
                project = path.startswith(root) and not path.startswith(env)
                if code is None or project or not os.path.isfile(path):
                    bad.append(f"{hook} from {path}")
        return bad

    def finish(session, exitstatus):
        changed = [
            name for name, get in paths.items()
            if any(a is not b for a, b in zip(state(get), loaded[name]))
        ]
        changed += [h for h, fn in hooks.items() if getattr(mod_globals.get(h), "__code__", None)
                    is not fn.__code__]
        changed += foreign(session.config)
        send("end", seq[0], sorted(changed))

    modifyitems = pytest.hookimpl(trylast=True)(modifyitems)
    hooks.update(pytest_runtest_logreport=logreport, pytest_runtest_logfinish=logfinish,
                 pytest_collection_modifyitems=modifyitems, pytest_sessionfinish=finish)
    mine = {f.__code__ for f in (send, logreport, logfinish, modifyitems, finish)}
    mod_globals = globals()
    return hooks


globals().update(_make())
'''


@dataclass(frozen=True)
class Channel:
    """One grading's plugin: its module name, key and canaries."""

    module: str
    key: bytes
    file: str
    """The test module the canaries are appended to."""
    text: str
    """That module's source, as the task's image has it."""
    fail: str
    """The canary that must fail."""
    pass_: str
    """The canary that must pass."""
    a: int

    @classmethod
    def new(cls, test_file: str, text: str) -> Channel:
        """Canaries for the test module ``test_file`` (whose source is ``text``), with names
        that module does not use."""
        taken = set(re.findall(r"def\s+(\w+)", text))
        names: list[str] = []
        while len(names) < 2:
            a, b = (_WORDS[secrets.randbelow(len(_WORDS))] for _ in range(2))
            name = f"test_{a}_{b}" if a != b else f"test_{a}"
            if name not in taken and name not in names:
                names.append(name)
        return cls(
            "p" + secrets.token_hex(6),
            secrets.token_bytes(32),
            test_file,
            text,
            names[0],
            names[1],
            secrets.randbelow(10**6),
        )

    @property
    def files(self) -> dict[str, str | bytes]:
        """What to write in the workspace before the suite runs: the plugin, and the test
        module with the canaries at its end."""
        text = self.text
        canaries = (
            f"\n\ndef {self.fail}():\n    assert {self.a} == {self.a + 1}\n"
            f"\n\ndef {self.pass_}():\n    assert {self.a} == {self.a}\n"
        )
        return {f"{self.module}.py": _PLUGIN, self.file: text.rstrip("\n") + "\n" + canaries}

    @property
    def stdin(self) -> bytes:
        meta = {"file": self.file, "fail": self.fail, "pass": self.pass_}
        return self.key + json.dumps(meta).encode()

    def script(self, junit_path: str) -> str:
        """The shell line that runs the suite (``"$@"``) with the plugin and JUnit, pytest's
        own output nowhere, the stream on the run's stdout, then the JUnit file."""
        return (
            f'exec 3>&1; PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$@" {" ".join(junit.PYTEST_JUNIT)} '
            f"--junitxml={junit_path} -p {self.module} >/dev/null 2>&1; "
            f"printf '{MARK.encode('unicode_escape').decode()}'; cat {junit_path}"
        )


@dataclass(frozen=True)
class Account:
    """What a run reported: ``statuses`` by test id when it is trustworthy, else why not."""

    statuses: dict[str, str] | None
    """None: no account (the run ended before the session did: a timeout, a crash)."""
    tampered: str = ""
    """Non-empty: the report was forged, and how that shows."""
    xml: str = ""


def verify(channel: Channel, stdout: str, names: set[str]) -> Account:
    """Read a run's stdout (see ``Channel.script``). ``names`` are the task's test ids,
    whose outcomes the JUnit file must agree on. Never raises on what a run printed."""
    try:
        return _verify(channel, stdout, names)
    except Exception as e:  # noqa: BLE001 -- a shape _verify did not foresee: the run's doing
        return Account(None, f"the report could not be read ({type(e).__name__})")


def _verify(channel: Channel, stdout: str, names: set[str]) -> Account:
    stream, sep, xml = stdout.partition(MARK)
    seen: dict[str, str] = {}
    canaries: dict[str, list[str]] = {}
    ended = False
    for n, line in enumerate(stream.splitlines()):
        if ended:
            return Account(None, f"line {n} after the end of the report")
        body, _, mac = line.rpartition(" ")
        want = hmac.new(channel.key, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac.encode(), want.encode()):
            return Account(None, f"line {n} of the report is not the grader's")
        fields = _fields(body)
        if fields is None or fields[0] != n:
            return Account(None, f"line {n} of the report is malformed or out of sequence")
        if fields[1] == "end":
            if fields[2] != n:
                return Account(None, "the report's count is wrong")
            if fields[3]:
                return Account(None, f"pytest's report path was altered: {fields[3][:5]}")
            ended = True
            continue
        nodeid, file, outcome = fields[2], fields[3], fields[4]
        head, _, name = nodeid.rpartition("::")
        base = name.partition("[")[0]  # a parametrized autouse fixture makes one per param
        if base in (channel.fail, channel.pass_) and head.endswith(channel.file):
            canaries.setdefault(base, []).append(outcome)
            continue
        tid = junit.junit_id(nodeid, file)
        if tid in seen:
            return Account(None, f"{tid} was reported twice")
        seen[tid] = outcome
    if not ended:
        return Account(None)
    if not (_came_out(canaries.get(channel.fail), "failed")
            and _came_out(canaries.get(channel.pass_), "passed")):  # fmt: skip
        return Account(None, f"the canaries came out {canaries}: outcomes were rewritten")
    if not sep:
        return Account(None, "the suite's JUnit file is missing")
    written = junit.parse(xml)
    if written is None:
        return Account(None, "the suite's JUnit file was destroyed", xml)
    for tid in names:  # what decides a grade is whether a test passed
        if (written.get(tid) == "passed") != (seen.get(tid) == "passed"):
            return Account(
                None,
                f"the JUnit file says {tid} {written.get(tid, 'missing')}, the tests said "
                f"{seen.get(tid, 'missing')}: the report was rewritten",
                xml,
            )
    return Account(seen, "", xml)


def _came_out(outcomes: list[str] | None, expected: str) -> bool:
    """A canary's instances (one per param of an autouse fixture, some maybe skipped by
    its marks) came out as written: at least one ``expected``, the rest skipped."""
    if not outcomes:
        return False
    return expected in outcomes and set(outcomes) <= {expected, "skipped"}


def _fields(body: str) -> list[Any] | None:
    """A signed line's fields when they have one of the two shapes the plugin writes."""
    try:
        fields = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(fields, list) or not fields or type(fields[0]) is not int:
        return None
    if len(fields) == 4 and fields[1] == "end" and type(fields[2]) is int:
        if isinstance(fields[3], list) and all(isinstance(x, str) for x in fields[3]):
            return fields
        return None
    if (
        len(fields) == 5
        and fields[1] == "test"
        and all(isinstance(x, str) for x in fields[2:])
        and fields[4] in _OUTCOMES
    ):
        return fields
    return None
