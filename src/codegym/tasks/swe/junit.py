"""Test outcomes from pytest's JUnit XML, by test id (never by parsing logs).

pytest writes one ``<testcase>`` per test; with ``-o junit_family=xunit1`` it carries the
test's file, so the id can be written as pytest and SWE-bench write it:
``tests/test_x.py::TestClass::test_name[param]``. The XML comes from a run of untrusted
code: it is size-capped by the run's output limit, parsed by expat (which refuses entity
expansion bombs), and anything that is not a well-formed report is ``None``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

OUTCOMES = ("passed", "failed", "error", "skipped")
PYTEST_JUNIT = ["-o", "junit_family=xunit1", "-p", "no:cacheprovider"]
"""pytest options every codegym test run uses with ``--junitxml``."""


def test_id(case: ET.Element) -> str:
    """pytest's node id of a ``<testcase>``: ``file::Class::name``."""
    name = case.get("name", "")
    file = case.get("file")
    classname = case.get("classname", "")
    if not file:  # xunit2: the module's dotted path is all there is
        parts = classname.split(".")
        return "::".join([*parts, name]) if parts[0] else name
    module = file.removesuffix(".py").replace("/", ".")
    inner = classname.removeprefix(module).strip(".")
    return "::".join([file, *(inner.split(".") if inner else []), name])


def outcome(case: ET.Element) -> str:
    for child in case:
        if child.tag == "failure":
            return "failed"
        if child.tag == "error":
            return "error"
        if child.tag == "skipped":
            return "skipped"
    return "passed"


def parse(xml: str | bytes) -> dict[str, str] | None:
    """Test id -> ``passed``/``failed``/``error``/``skipped``; None when ``xml`` is not a
    pytest report (empty, truncated, something else)."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None
    if root.tag not in ("testsuites", "testsuite"):
        return None
    out: dict[str, str] = {}
    for case in root.iter("testcase"):
        out[test_id(case)] = outcome(case)
    return out


def failures(xml: str | bytes, ids: set[str], limit: int = 4000) -> list[tuple[str, str]]:
    """(test id, message and traceback) of the failing tests among ``ids``, each cut
    to ``limit`` characters: the raw material of a problem statement."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return []
    out = []
    for case in root.iter("testcase"):
        tid = test_id(case)
        if tid not in ids:
            continue
        for child in case:
            if child.tag in ("failure", "error"):
                text = (child.get("message") or "") + "\n" + (child.text or "")
                out.append((tid, text.strip()[:limit]))
                break
    return out


def junit_id(nodeid: str, file: str) -> str:
    """The id ``test_id`` gives the ``<testcase>`` pytest writes for ``nodeid``
    (defined in ``file``): pytest's own mangling of the node id into a class name and a
    name, so a test inherited from a mixin in another file gets the same id both ways."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    case = ET.Element("testcase", classname=".".join(names[:-1]), name=names[-1], file=file)
    return test_id(case)
