"""Which tests run which lines of a package: the map that aims synthesis at bugs a test
can see.

One run of the clean suite with a small pytest plugin (``PLUGIN``, written into the
workspace for that run only, never into an image or a task) records, per test, the lines
of the package's own source files that ran while the test did (its set-up and teardown
included, threads too). ``Coverage.reach`` turns an edit into the tests that can notice it:
those that ran its line (or the first line of the statement it sits in), or, for an edit
in a function's signature (a default value), those that ran any line of its body. A
mutant no stable test reaches cannot fail one, so it is never judged; a mutant reached by
one test can only fail that test, so one such bug per line is enough.

Limits: tracing sees the interpreter that runs pytest, not subprocesses; a suite whose
tests drive the package in a child process reaches nothing and gets no aimed mutants (the
synthesis falls back to judging what it samples).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from typing import Any

from codegym.sandbox import Verdict
from codegym.tasks.swe.junit import junit_id as junit_id
from codegym.tasks.swe.mutate import Edit
from codegym.tasks.swe.suite import limits

PLUGIN_NAME = "_codegym_cover"
OUT_PATH = "/tmp/.codegym-cover.json"

# The tracer keeps one decision per code object (is it a package file?) and adds a
# (file, line) pair to the current test's set on every line event in package code only,
# so the suite runs at about its usual speed outside the package.
PLUGIN = '''\
"""codegym synthesis: record which package lines each test runs (one clean run only)."""
import json, os, sys, threading
import pytest

_FILES = set(json.loads(%(files)r))
_ROOT = os.getcwd()
_hits = {}
_sink = set()
_cur = _sink
_seen = {}


def _rel(co):
    path = os.path.abspath(co.co_filename)
    rel = os.path.relpath(path, _ROOT) if path.startswith(_ROOT + os.sep) else None
    return rel if rel in _FILES else None


def _trace(frame, event, arg):
    co = frame.f_code
    try:
        rel = _seen[co]
    except KeyError:
        rel = _seen[co] = _rel(co)
    if rel is None:
        return None
    hits = _cur
    hits.add((rel, frame.f_lineno))

    def _line(frame, event, arg):
        if event == "line":
            hits.add((rel, frame.f_lineno))
        return _line

    return _line


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _cur
    _cur = _hits.setdefault((item.nodeid, item.location[0]), set())
    threading.settrace(_trace)
    sys.settrace(_trace)
    try:
        yield
    finally:
        sys.settrace(None)
        threading.settrace(None)
        _cur = _sink


def pytest_sessionfinish(session, exitstatus):
    tests = sorted(_hits)
    lines = {}
    for i, t in enumerate(tests):
        for rel, n in _hits[t]:
            lines.setdefault(rel, {}).setdefault(str(n), []).append(i)
    with open(%(out)r, "w") as f:
        json.dump({"tests": [list(t) for t in tests], "lines": lines}, f, separators=(",", ":"))
'''


@dataclass
class Coverage:
    """Per source file and line, the tests (ids) that ran it."""

    tests: list[str]
    lines: dict[str, dict[int, frozenset[int]]]
    sources: dict[str, str] = field(default_factory=dict, repr=False)
    """path -> text of the files, for the statement and function spans."""
    _spans: dict[str, _Spans] = field(default_factory=dict, repr=False)

    @property
    def reached(self) -> int:
        """How many (file, line) pairs some test ran."""
        return sum(len(v) for v in self.lines.values())

    def reach(self, edit: Edit) -> frozenset[str]:
        """The tests that run the code ``edit`` changes (empty: no test can notice it)."""
        return frozenset(self.tests[i] for i in self._indices(edit))

    def _indices(self, edit: Edit) -> frozenset[int]:
        hits = self.lines.get(edit.path, {})
        spans = self._spans.get(edit.path)
        if spans is None:
            spans = self._spans[edit.path] = _Spans(self.sources.get(edit.path, edit.original))
        body = spans.signature_of(edit.line)
        if body is not None:  # a default value: whoever calls the function sees it
            out: set[int] = set()
            for n in range(body[0], body[1] + 1):
                out |= hits.get(n, frozenset())
            return frozenset(out)
        if edit.line in hits:
            return hits[edit.line]
        return hits.get(spans.statement_of(edit.line), frozenset())


class _Spans:
    """Where functions' signatures and statements start, from one parse of a file."""

    def __init__(self, text: str) -> None:
        self.signatures: list[tuple[int, int, int, int]] = []
        """(def line, last signature line, first body line, last body line)"""
        self.first: dict[int, int] = {}
        """line -> first line of the innermost statement that holds it"""
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return
        for node in ast.walk(tree):
            if isinstance(node, ast.stmt):
                end = node.end_lineno or node.lineno
                for n in range(node.lineno, end + 1):
                    # ast.walk goes outside in: inner statements overwrite outer ones
                    self.first[n] = node.lineno
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
                start = node.body[0].lineno
                last = node.end_lineno or start
                self.signatures.append((node.lineno, start - 1, start, last))
        # nested functions come after their parents in ast.walk; innermost wins below
        self.signatures.sort()

    def signature_of(self, line: int) -> tuple[int, int] | None:
        """The body span of the function whose signature holds ``line``, if any."""
        found = None
        for first, sig_end, body_start, body_end in self.signatures:
            if first <= line <= sig_end:
                found = (body_start, body_end)
        return found

    def statement_of(self, line: int) -> int:
        return self.first.get(line, line)


async def measure(
    sb: Any, test_cmd: list[str], code: dict[str, str], image: Any, timeout_s: float
) -> Coverage | None:
    """Run the clean suite once with the tracer; None when it reports nothing (the suite
    cannot load the plugin, or runs the package out of process)."""
    plugin = PLUGIN % {"files": json.dumps(sorted(code)), "out": OUT_PATH}
    argv = [
        "sh",
        "-c",
        f'PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$@" -p no:cacheprovider -p {PLUGIN_NAME} '
        f">/dev/null 2>&1; cat {OUT_PATH}",
        "sh",
        *test_cmd,
    ]
    # tracing costs a few times the suite's own time; the CPU allowance says so
    r = await sb.run(
        argv,
        files={f"{PLUGIN_NAME}.py": plugin},
        limits=limits(timeout_s * 5),
        workspace=image,
    )
    if r.verdict is not Verdict.OK or not r.stdout.strip():
        return None
    try:
        raw = json.loads(r.stdout)
        tests = [junit_id(str(node), str(file)) for node, file in raw["tests"]]
        lines = {
            path: {int(n): frozenset(int(i) for i in ids) for n, ids in per.items()}
            for path, per in raw["lines"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return Coverage(tests, lines, dict(code))
