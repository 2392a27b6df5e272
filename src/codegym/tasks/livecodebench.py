"""LiveCodeBench code-generation problems, judged as LiveCodeBench judges them.

A record is a line of LiveCodeBench's ``code_generation`` release files (``test.jsonl``
… ``test6.jsonl``): ``question_id``, ``question_title``, ``question_content``,
``platform``, ``contest_date``, ``starter_code``, ``difficulty``, ``public_test_cases``,
``private_test_cases`` (JSON, or as released: base64 of zlib of a pickled JSON string) and
``metadata`` (JSON; ``func_name`` for LeetCode's functional problems). What the rules are,
as ``lcb_runner.evaluation.testing_util`` defines them:

- the tests are the public ones and the private ones; a problem is functional when its
  ``metadata`` names a ``func_name``, else every test is stdin/stdout;
- every program starts with LiveCodeBench's imports (``from typing import *``, the
  ``math``, ``collections``, ``itertools``… star imports; a recursion limit of 50,000),
  which the model is not shown (``Task.preamble``);
- functional: each input line is one JSON argument, the output one JSON value, the call
  ``Solution().func_name(*args)``; a tuple result is compared as a list, by ``==``;
- stdin/stdout: the output and the expected output stripped, split into lines and each
  stripped; the same number of lines, each equal or the same decimal numbers
  (``compare="lines"``);
- 6 s of wall clock per test.

``contest_date`` becomes ``metadata["date"]``: ``--since`` keeps the problems released on
or after a day, LiveCodeBench's answer to contamination (``TaskSet.since``).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import keyword
import pickle
import zlib
from collections.abc import Mapping
from typing import Any, Final

from codegym.sandbox import Limits
from codegym.tasks.task import IOCase, Task
from codegym.tasks.taskset import RecordError

PER_TEST_S: Final = 6.0  # LiveCodeBench's default timeout, per test

_MODULES: Final = (
    "string re datetime collections heapq bisect copy math random statistics itertools "
    "functools operator io sys json"
).split()
PREAMBLE: Final = (
    "".join(f"from {m} import *\n" for m in [*_MODULES, "builtins", "typing"])
    + "".join(f"import {m}\n" for m in _MODULES)
    + "sys.setrecursionlimit(50000)\n"
)

# The judge's side of a functional problem: the cases stay here, the program is called
# with each one's arguments under LiveCodeBench's per-test time limit.
_CHECK: Final = """\
import json as _json

_CASES = _json.loads({cases!r})


def check(candidate):
    for _i, (_args, _want) in enumerate(_CASES):
        __judge__.deadline({per_test!r})
        _got = candidate(*_args)
        __judge__.deadline(None)
        if isinstance(_got, tuple):
            _got = list(_got)
        if _got != _want:
            _shown = __judge__.show(_got), __judge__.show(_want)
            raise AssertionError("test %d: returned %s, expected %s" % (_i, *_shown))


# the program's import and its Solution() have one test's time, as in LiveCodeBench
__judge__.deadline({per_test!r})
"""


class _NoObjects(pickle.Unpickler):
    """Unpickles plain data only: the released tests are a pickled string."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}; only plain data is read")


def is_livecodebench(row: Mapping[str, Any]) -> bool:
    return {"question_content", "public_test_cases"} <= row.keys()


def to_task(row: Mapping[str, Any], fallback_id: str) -> Task:
    """The record's task.

    Raises:
        RecordError: a field is missing or malformed (the message names it).
    """
    question = row.get("question_content")
    if not isinstance(question, str) or not question.strip():
        raise RecordError("field 'question_content' must be the problem statement (text)")
    task_id = str(row.get("question_id") or fallback_id)
    tests = _tests(row, "public_test_cases") + _tests(row, "private_test_cases")
    if not tests:
        raise RecordError("no tests: 'public_test_cases' and 'private_test_cases' are empty")
    meta = _json(row, "metadata", {})
    if not isinstance(meta, dict):
        raise RecordError("field 'metadata' must hold a JSON object")
    starter = row.get("starter_code") or ""
    if not isinstance(starter, str):
        raise RecordError("field 'starter_code' must be text")
    labels = {"format": "livecodebench"}
    for key, field in (("platform", "platform"), ("difficulty", "difficulty")):
        if isinstance(row.get(field), str):
            labels[key] = row[field]
    date = row.get("contest_date")
    if isinstance(date, str) and date:
        labels["date"] = date[:10]
    fn = meta.get("func_name")
    n = len(tests)
    if not fn:
        return Task(
            id=task_id,
            prompt=question,
            io_cases=tuple(IOCase(i, o) for i, o in tests),
            compare="lines",
            preamble=PREAMBLE,
            limits=Limits(cpu_s=PER_TEST_S, wall_s=PER_TEST_S),
            metadata=labels,
        )
    if (
        not isinstance(fn, str)
        or not fn.isidentifier()
        or keyword.iskeyword(fn)
        or fn.startswith("_")
    ):
        raise RecordError(
            f"metadata 'func_name' must be a public Python name (no keyword, no leading _), "
            f"got {fn!r}"
        )
    cases = []
    for k, (inp, out) in enumerate(tests):
        try:
            cases.append([[json.loads(line) for line in inp.split("\n")], json.loads(out)])
        except (ValueError, RecursionError) as e:  # bad JSON, too deep, an int too long
            raise RecordError(
                f"functional test {k}: each input line and the output must be JSON "
                f"({type(e).__name__}: {str(e)[:200]})"
            ) from None
    prompt = "".join(f"# {line}".rstrip() + "\n" for line in question.splitlines())
    if starter:
        prompt += "# Starter code:\n" + "".join(
            f"# {ln}".rstrip() + "\n" for ln in starter.splitlines()
        )
    return Task(
        id=task_id,
        prompt=prompt,
        entry_point=f"Solution().{fn}" if "class Solution" in starter else fn,
        test=_CHECK.format(cases=json.dumps(cases), per_test=PER_TEST_S),
        preamble=PREAMBLE,
        # LiveCodeBench's limit for the whole program: (timeout + 1) per test, plus 5 s
        limits=Limits(cpu_s=min(3600.0, (PER_TEST_S + 1) * n + 5), wall_s=(PER_TEST_S + 1) * n + 5),
        metadata={**labels, "fn_name": fn},
    )


def _json(row: Mapping[str, Any], name: str, default: Any) -> Any:
    value = row.get(name)
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError) as e:  # bad JSON, nested too deep, an int too long
        raise RecordError(
            f"field {name!r} is not valid JSON ({type(e).__name__}: {str(e)[:200]})"
        ) from None


def _tests(row: Mapping[str, Any], name: str) -> list[tuple[str, str]]:
    """The (input, output) pairs of a test field, as JSON or as LiveCodeBench packs them."""
    value = row.get(name)
    if isinstance(value, str) and value and value.lstrip()[:1] not in "[{":
        try:
            packed = _NoObjects(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load()
        except (binascii.Error, zlib.error, pickle.UnpicklingError, EOFError, ValueError) as e:
            raise RecordError(
                f"field {name!r} is neither JSON nor base64/zlib/pickle-packed JSON ({e})"
            ) from None
        if isinstance(packed, bytes):
            packed = packed.decode("utf-8", "replace")
        if not isinstance(packed, str):
            raise RecordError(f"field {name!r} unpacks to {type(packed).__name__}, not JSON text")
        value = packed
    tests = _json({name: value}, name, [])
    if not isinstance(tests, list):
        raise RecordError(f"field {name!r} must hold a list of tests")
    out = []
    for k, t in enumerate(tests):
        if not (isinstance(t, dict) and isinstance(t.get("input"), str)):
            raise RecordError(f"{name}[{k}] must be an object with text 'input' and 'output'")
        if not isinstance(t.get("output"), str):
            raise RecordError(f"{name}[{k}] must be an object with text 'input' and 'output'")
        out.append((t["input"], t["output"]))
    return out
