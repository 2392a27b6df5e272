"""The grader's own account of a test run: each test's outcome leaves the interpreter as
the test ends, signed, with canary tests whose outcomes the grader knows.

pytest runs the patched package in its own interpreter, so whatever the package's code
does in that process can touch pytest's report. The JUnit file is written when the session
ends, and a patch could rewrite it afterwards (an ``atexit`` hook in the package); that is
the forgery three adversarial reviews left open. A grading therefore adds a plugin of its
own (a module with a random name, written after the patch's changes were undone) that:

- writes one line per finished test to a pipe the sandbox reads, as each test ends: the
  test's node id, the file that defines it and the outcome, with a sequence number and an
  HMAC under a key read from stdin when the plugin loads (the key is in no file, argument
  or environment variable); the plugin keeps the pipe on a private close-on-exec fd;
- adds two canary tests with random names after every other plugin has filtered the
  collection: one that must fail, one that must pass;
- ends with a signed count.

``verify`` accepts a run only when every line is signed and in sequence, no test appears
twice, the count matches, both canaries came out as written, and the JUnit file agrees
with the stream on every test the task names. Anything else is tampering: the grade is
``unresolved``, never ``infra`` (the program caused it).

What this raises and what it cannot stop: rewriting the report after a test ended (the
JUnit file, pytest's terminal output) is caught by the cross-check; forging outcomes
wholesale (every test passes) is caught by the failing canary; writing forged lines into
the pipe needs the key. Code that patches pytest's own objects while the package is
imported, for exactly the task's tests and not the canaries, and leaves the JUnit file
consistent, is not caught: the package and the test runner share one interpreter, as in
every pytest-based grader.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from codegym.tasks.swe import junit

MARK = "\n<<codegym-junit>>\n"
"""Printed by the shell between the stream and the JUnit file."""

_PLUGIN = '''\
"""codegym grading: each test's outcome, signed, as it ends; two canaries."""
import hashlib, hmac, json, os
import pytest

_KEY = os.read(0, 64)
_FD = os.dup(3)
os.set_inheritable(_FD, False)
os.close(3)
_seq = 0
_worst = {}
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _send(*fields):
    global _seq
    body = json.dumps([_seq, *fields], separators=(",", ":"))
    mac = hmac.new(_KEY, body.encode(), hashlib.sha256).hexdigest()
    data = (body + " " + mac + "\\n").encode()
    while data:
        data = data[os.write(_FD, data):]
    _seq += 1


def pytest_runtest_logreport(report):
    if report.when == "call":
        out = "failed" if report.failed else "skipped" if report.skipped else "passed"
    else:
        out = "error" if report.failed else "skipped" if report.skipped else "passed"
    prev = _worst.get(report.nodeid, "passed")
    _worst[report.nodeid] = out if _RANK[out] > _RANK[prev] else prev


def pytest_runtest_logfinish(nodeid, location):
    _send("test", nodeid, location[0], _worst.pop(nodeid, "passed"))


def %(fail)s():
    assert %(a)d == %(b)d


def %(pass_)s():
    assert %(a)d == %(a)d


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    mod = pytest.Module.from_parent(session, path=__import__("pathlib").Path(__file__))
    for name in (%(fail)r, %(pass_)r):
        items.append(pytest.Function.from_parent(mod, name=name, callobj=globals()[name]))


def pytest_sessionfinish(session, exitstatus):
    _send("end", _seq)
'''


@dataclass(frozen=True)
class Channel:
    """One grading's plugin: its module name, key and canaries."""

    module: str
    key: bytes
    fail: str
    """The canary that must fail."""
    pass_: str
    """The canary that must pass."""
    a: int
    b: int

    @classmethod
    def new(cls) -> Channel:
        def word() -> str:
            return "test_" + secrets.token_hex(6)

        a = secrets.randbelow(10**9)
        return cls("_cg_" + secrets.token_hex(6), secrets.token_bytes(32), word(), word(), a, a + 1)

    @property
    def files(self) -> dict[str, str | bytes]:
        """What to write in the workspace (its root) before the suite runs."""
        text = _PLUGIN % {"fail": self.fail, "pass_": self.pass_, "a": self.a, "b": self.b}
        return {f"{self.module}.py": text}

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
    whose outcomes the JUnit file must agree on."""
    from codegym.tasks.swe.coverage import junit_id

    stream, sep, xml = stdout.partition(MARK)
    seen: dict[str, str] = {}
    canaries: dict[str, str] = {}
    ended = False
    for n, line in enumerate(stream.splitlines()):
        if ended:
            return Account(None, f"line {n} after the end of the report")
        body, _, mac = line.rpartition(" ")
        want = hmac.new(channel.key, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac.encode(), want.encode()):
            return Account(None, f"line {n} of the report is not the grader's")
        fields = json.loads(body)  # signed: written by the plugin
        if fields[0] != n:
            return Account(None, f"line {n} is out of sequence")
        if fields[1] == "end":
            ended = fields[2] == n
            if not ended:
                return Account(None, "the report's count is wrong")
            continue
        nodeid, file, outcome = fields[2], fields[3], fields[4]
        name = nodeid.rpartition("::")[2]
        if name in (channel.fail, channel.pass_) and channel.module in nodeid:
            canaries[name] = outcome
            continue
        tid = junit_id(nodeid, file)
        if tid in seen:
            return Account(None, f"{tid} was reported twice")
        seen[tid] = outcome
    if not ended:
        return Account(None)
    if canaries.get(channel.fail) != "failed" or canaries.get(channel.pass_) != "passed":
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
