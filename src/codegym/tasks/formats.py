"""Dataset record formats: one JSON object (a JSONL line) in, one ``Task`` out.

Six formats, detected from their fields (``detect_format``) or forced by the caller:

==============  =====================================================  ==================
format          fields read                                            task shape
==============  =====================================================  ==================
evalplus        task_id, prompt, entry_point, canonical_solution,       assert-style, two
                base_input, plus_input, atol (HumanEval+, MBPP+)        parts: base, plus
                (``codegym.tasks.evalplus``, docs/evalplus.md)
humaneval       task_id, prompt, entry_point, test, canonical_solution  assert-style
mbpp            task_id, text|prompt, code, test_list,                  assert-style
                test_setup_code, test_imports (entry_point optional:
                else the reference function the asserts call)
apps            problem_id, question, input_output (JSON text or         stdin/stdout, or
                object: inputs, outputs, fn_name), solutions,            assert-style when
                starter_code, fn_name, checker                           fn_name is given
codecontests    name, description, public_tests / private_tests /       stdin/stdout
                generated_tests ({input: [...], output: [...]}),
                solutions ({language: [...], solution: [...]}), checker
livecodebench   question_id, question_content, public_test_cases,       stdin/stdout, or
                private_test_cases, metadata (func_name), starter_code, assert-style with
                contest_date (``codegym.tasks.livecodebench``)           a func_name
==============  =====================================================  ==================

``checker`` (optional, stdin/stdout): a special judge, Python source defining
``check(input, output, expected)``, for problems with several right answers
(``codegym.tasks.checker``).

Assert-style programs are ``prompt + completion + test``, so an assert-style prompt must be
valid Python: natural-language statements become ``#`` comments, and the completion is the
whole solution. Stdin/stdout prompts are plain text.

Contract: every converter raises ``RecordError`` naming the field and the fix; the loader
adds the file and line.

More formats plug in by name: a ``DatasetFormat`` (how to recognise a record, how to turn
it into a ``Task``, the fields it expects) in a module of its own, and one registration,
``DATASET_FORMATS.register("mine", "my_package.my_format:FORMAT")``. ``load_dataset``,
``--format`` and detection then know it (detection tries formats in registration order,
the built-in ones first); docs/extending.md has a whole example.
"""

from __future__ import annotations

import ast
import json
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from codegym._registry import Registry
from codegym.tasks import evalplus, livecodebench
from codegym.tasks.task import IOCase, Task
from codegym.tasks.taskset import RecordError as RecordError

Format = str
"""A registered format's name (``DATASET_FORMATS``)."""
FORMATS: Final[tuple[str, ...]] = (
    "evalplus",
    "livecodebench",
    "humaneval",
    "mbpp",
    "apps",
    "codecontests",
)
"""The built-in formats."""

# CodeContests' Language enum: 3 is PYTHON3 (1 is Python 2, which we cannot run).
_CC_PYTHON3: Final = {3, "3", "PYTHON3", "python3", "Python3", "PYTHON_3"}


@dataclass(frozen=True)
class DatasetFormat:
    """A dataset record format (a JSONL line in, a ``Task`` out)."""

    detect: Callable[[Mapping[str, Any]], bool]
    """Whether a record has this format's distinctive fields."""
    convert: Callable[[Mapping[str, Any], str], Task]
    """The record's task (the ``str`` is an id for a record that carries none); raises
    ``RecordError`` naming the field and the fix."""
    fields: str
    """What it expects, for the error when no format matches: ``"HumanEval (prompt, ...)"``."""


DATASET_FORMATS: Registry[DatasetFormat] = Registry(
    "dataset format",
    "add one with codegym.tasks.formats.DATASET_FORMATS.register(name, 'module:FORMAT')",
)


def detect_format(row: Mapping[str, Any]) -> Format | None:
    """The first registered format whose distinctive fields ``row`` has, or None."""
    for name in DATASET_FORMATS.names():
        if DATASET_FORMATS.get(name).detect(row):
            return name
    return None


def expected_fields() -> str:
    """What the registered formats expect, for an error that names them all."""
    return ", ".join(DATASET_FORMATS.get(n).fields for n in DATASET_FORMATS.names())


def to_task(row: Mapping[str, Any], fmt: Format, fallback_id: str) -> Task:
    """Convert one record; ``fallback_id`` is used when the record carries no id.

    Raises:
        RecordError: a field is missing or malformed, or ``fmt`` is not registered.
    """
    return DATASET_FORMATS.get(check_format(fmt)).convert(row, fallback_id)


# --- field helpers ---------------------------------------------------------------------------


def _str(row: Mapping[str, Any], *names: str, required: bool = True) -> str:
    """The first of ``names`` present in ``row`` (must be a string)."""
    for name in names:
        if name in row and row[name] is not None:
            value = row[name]
            if not isinstance(value, str):
                raise RecordError(f"field {name!r} must be a string, got {type(value).__name__}")
            return value
    if required:
        which = " or ".join(repr(n) for n in names)
        raise RecordError(f"missing field {which}")
    return ""


def _id(row: Mapping[str, Any], names: tuple[str, ...], fallback: str) -> str:
    for name in names:
        value = row.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, (str, int)) and str(value):
            return str(value)
    return fallback


def _json_field(row: Mapping[str, Any], name: str) -> Any:
    """A field that datasets store either as JSON text (APPS) or as the object itself."""
    value = row.get(name)
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise RecordError(f"field {name!r} holds malformed JSON text ({e.msg})") from None
    return value


def _checker(row: Mapping[str, Any]) -> str:
    """The record's special judge (``codegym.tasks.checker``), checked to define ``check``."""
    code = _str(row, "checker", required=False)
    if code and "check" not in _defined_names(code, "checker"):
        raise RecordError("field 'checker' must define check(input, output, expected)")
    return code or ""


def _as_comment(text: str) -> str:
    """Text as ``#`` comment lines, so it can lead a Python program."""
    return "".join(f"# {line}".rstrip() + "\n" for line in text.strip().splitlines())


def _as_text(value: Any, what: str) -> str:
    """A stdin/stdout payload: a string, or a list of lines (some APPS records)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value) + "\n"
    raise RecordError(f"{what} must be a string or a list of strings, got {value!r:.60}")


def _defined_names(code: str, field: str) -> list[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise RecordError(
            f"field {field!r} is not valid Python (line {e.lineno}: {e.msg})"
        ) from None
    return [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]


def _called_names(code: str) -> set[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    return {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }


# --- converters -------------------------------------------------------------------------------


def refuse_evalplus(row: Mapping[str, Any]) -> None:
    """Refuse an EvalPlus record rather than read it as a weaker format: HumanEval+ and
    MBPP+ carry base and plus inputs and a float tolerance (``base_input``, ``plus_input``,
    ``atol``), which the ``evalplus`` format reads. (Their "original format" files are
    ``refuse_original_layout``'s.)

    Raises:
        RecordError: ``row`` is one of those (the message says what to use instead).
    """
    plus = [k for k in ("base_input", "plus_input", "atol") if k in row]
    if plus:
        raise RecordError(
            f"an EvalPlus record (fields {plus}): read it with --format evalplus (or leave "
            "the format to detection); as HumanEval or MBPP it would lose its plus inputs "
            "and tolerance"
        )


ORIGINAL_LAYOUT_IMAGE: Final = "numpy"
"""The environment EvalPlus's original-layout files run in: their tests import numpy."""


def refuse_original_layout(row: Mapping[str, Any]) -> None:
    """Refuse, when its format was only detected, a record of EvalPlus's original-layout
    files: their test scripts judge more weakly than evalplus does, so as a reward they
    pay wrong answers. Named as ``humaneval`` or ``mbpp`` (``--format``), such a file runs
    as published, in the ``numpy`` environment (docs/evalplus.md lists what it lets pass).

    Raises:
        RecordError: ``row`` is one of those.
    """
    if evalplus_original(row):
        raise RecordError(
            "an EvalPlus record in the original layout, whose test script accepts wrong "
            "answers (its numpy.allclose broadcasts [] against a float answer; MBPP+ 737, 787 "
            "and 794 never assert): use the same release's HumanEvalPlus.jsonl / "
            "MbppPlus.jsonl, which codegym judges as evalplus does, or name --format "
            "humaneval / mbpp to run the script as published (in the numpy environment)"
        )


def evalplus_original(row: Mapping[str, Any]) -> bool:
    """Whether ``row`` is from an EvalPlus file in the original layout
    (``HumanEvalPlus-OriginFmt``, ``MbppPlus-OriginFmt``): a ``test`` script with every base
    and plus input that compares outputs with numpy (``assertion``)."""
    test = row.get("test")
    if not isinstance(test, str) or not test.strip():
        return False
    return "test_list" in row or ("import numpy" in test and "def assertion(" in test)


def _humaneval(row: Mapping[str, Any], fallback_id: str) -> Task:
    refuse_evalplus(row)
    task_id = _str(row, "task_id")
    original = evalplus_original(row)
    return Task(
        id=task_id,
        prompt=_str(row, "prompt"),
        entry_point=_str(row, "entry_point"),
        test=_str(row, "test"),
        reference=_str(row, "canonical_solution", required=False),
        cluster=_str(row, "cluster", required=False) or task_id,
        image=ORIGINAL_LAYOUT_IMAGE if original else "",
        metadata={"format": "humaneval", **({"layout": "evalplus-original"} if original else {})},
    )


def _mbpp(row: Mapping[str, Any], fallback_id: str) -> Task:
    refuse_evalplus(row)
    text = _str(row, "text", "prompt")
    code = _str(row, "code", required=False)
    tests = row.get("test_list")
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise RecordError("field 'test_list' must be a non-empty list of assert strings")
    setup = _str(row, "test_setup_code", required=False)
    imports = row.get("test_imports") or []  # sanitized MBPP lists imports separately
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise RecordError("field 'test_imports' must be a list of import lines")
    setup = "\n".join([*imports, setup]).strip()
    entry = _str(row, "entry_point", required=False)
    if not entry:
        if not code:
            raise RecordError(
                "missing field 'code' (or 'entry_point'): cannot tell which function the tests call"
            )
        called = _called_names("\n".join(tests))
        candidates = [n for n in _defined_names(code, "code") if n in called]
        if not candidates:
            raise RecordError(
                "cannot choose an entry point: no function defined in 'code' is called by "
                "'test_list'; add an 'entry_point' field"
            )
        entry = candidates[0]
    original = evalplus_original(row)
    if original:
        # MBPP+'s original layout: the script itself calls the function on every base and
        # plus input (the three asserts of test_list are its first inputs); it runs as the
        # test's top level, and check() has nothing left to do
        script = _str(row, "test")
        test = (f"{setup}\n\n" if setup.strip() else "") + (
            f"{script}\n\ndef check(candidate):\n    pass  # the script above is the test\n"
        )
    else:
        # The asserts name the function directly; wrapping them in check() gives the same
        # shape as HumanEval, so scoring has one assert-style path.
        body = textwrap.indent("\n".join(tests), "    ")
        test = (f"{setup}\n\n" if setup.strip() else "") + f"def check(candidate):\n{body}\n"
    prompt = _as_comment(f"{text}\nYour code should pass these tests:\n" + "\n".join(tests))
    return Task(
        id=_id(row, ("task_id",), fallback_id),
        prompt=prompt,
        entry_point=entry,
        test=test,
        reference=code,
        cluster=_str(row, "cluster", required=False),
        image=ORIGINAL_LAYOUT_IMAGE if original else "",
        metadata={
            "format": "mbpp",
            "text": text,
            **({"layout": "evalplus-original"} if original else {}),
        },
    )


# Inlined into call-based APPS tests: APPS stores each expected return value wrapped in a
# list and JSON has no tuples, so compare after mapping tuples to lists, and also against
# the unwrapped value (what APPS' own testing_util accepts).
_APPS_CHECK = """\
import json as _json

_CASES = _json.loads({cases!r})


def _plain(value):
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {{k: _plain(v) for k, v in value.items()}}
    return value


def check(candidate):
    for _i, (_args, _want) in enumerate(_CASES):
        _got = _plain(candidate(*_args))
        _ok = _got == _want or (isinstance(_want, list) and len(_want) == 1 and _got == _want[0])
        if not _ok:
            _shown = __judge__.show(_got), __judge__.show(_want)
            raise AssertionError("case %d: returned %s, expected %s" % (_i, *_shown))
"""


def _apps(row: Mapping[str, Any], fallback_id: str) -> Task:
    question = _str(row, "question", "prompt")
    io = _json_field(row, "input_output")
    if not isinstance(io, dict):
        raise RecordError("field 'input_output' must hold an object with 'inputs' and 'outputs'")
    inputs, outputs = io.get("inputs"), io.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs:
        raise RecordError("field 'input_output' needs non-empty lists 'inputs' and 'outputs'")
    if len(inputs) != len(outputs):
        raise RecordError(
            f"field 'input_output' has {len(inputs)} inputs but {len(outputs)} outputs"
        )
    solutions = _json_field(row, "solutions") or []
    if not isinstance(solutions, list) or not all(isinstance(s, str) for s in solutions):
        raise RecordError("field 'solutions' must be a list of program strings (or its JSON)")
    reference = solutions[0] if solutions else ""
    task_id = _id(row, ("problem_id", "task_id", "id"), fallback_id)
    meta = {"format": "apps"}
    if isinstance(row.get("difficulty"), str):
        meta["difficulty"] = row["difficulty"]
    fn_name = io.get("fn_name") or row.get("fn_name")
    if not fn_name:
        cases = tuple(
            IOCase(_as_text(i, f"input {n}"), _as_text(o, f"output {n}"))
            for n, (i, o) in enumerate(zip(inputs, outputs, strict=True))
        )
        return Task(
            id=task_id,
            prompt=question,
            io_cases=cases,
            reference=reference,
            checker=_checker(row),
            metadata=meta,
        )
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise RecordError(f"'fn_name' must be a Python identifier, got {fn_name!r}")
    if not all(isinstance(i, list) for i in inputs):
        raise RecordError("call-based 'inputs' must each be a list of arguments")
    # LeetCode-style problems define the function as a method of class Solution.
    starter = _str(row, "starter_code", required=False)
    in_class = "class Solution" in (starter or reference)
    entry = f"Solution().{fn_name}" if in_class else fn_name
    cases_json = json.dumps([[i, o] for i, o in zip(inputs, outputs, strict=True)])
    prompt = _as_comment(question)
    if starter:
        prompt += _as_comment("Starter code:\n" + starter)
    return Task(
        id=task_id,
        prompt=prompt,
        entry_point=entry,
        test=_APPS_CHECK.format(cases=cases_json),
        reference=reference,
        metadata={**meta, "fn_name": fn_name},
    )


def _cc_tests(row: Mapping[str, Any]) -> tuple[IOCase, ...]:
    cases: list[IOCase] = []
    for split in ("public_tests", "private_tests", "generated_tests"):
        block = row.get(split)
        if block is None:
            continue
        if not isinstance(block, dict):
            raise RecordError(f"field {split!r} must be an object with 'input' and 'output' lists")
        ins, outs = block.get("input", []), block.get("output", [])
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
            raise RecordError(f"field {split!r} needs 'input' and 'output' lists of equal length")
        for n, (i, o) in enumerate(zip(ins, outs, strict=True)):
            cases.append(
                IOCase(_as_text(i, f"{split} input {n}"), _as_text(o, f"{split} output {n}"))
            )
    if not cases:
        raise RecordError(
            "no test cases: public_tests, private_tests and generated_tests are all empty"
        )
    return tuple(cases)


def _cc_reference(row: Mapping[str, Any]) -> str:
    sols = row.get("solutions")
    if sols is None:
        return ""
    if not isinstance(sols, dict):
        raise RecordError("field 'solutions' must be an object with 'language' and 'solution'")
    langs, codes = sols.get("language", []), sols.get("solution", [])
    if not isinstance(langs, list) or not isinstance(codes, list) or len(langs) != len(codes):
        raise RecordError("field 'solutions' needs 'language' and 'solution' lists of equal length")
    for lang, code in zip(langs, codes, strict=True):
        if lang in _CC_PYTHON3 and isinstance(code, str):
            return code
    return ""  # no Python 3 solution: usable for evals, quarantined by ground truth


def _codecontests(row: Mapping[str, Any], fallback_id: str) -> Task:
    task_id = _id(row, ("name", "task_id"), fallback_id)
    return Task(
        id=task_id,
        prompt=_str(row, "description", "prompt"),
        io_cases=_cc_tests(row),
        reference=_cc_reference(row),
        checker=_checker(row),
        metadata={"format": "codecontests", "source": str(row.get("source", ""))},
    )


_BUILTIN: Final[dict[str, Callable[[Mapping[str, Any], str], Task]]] = {
    "humaneval": _humaneval,
    "mbpp": _mbpp,
    "apps": _apps,
    "codecontests": _codecontests,
}


def check_format(fmt: str) -> Format:
    """``fmt``, a registered format.

    Raises:
        RecordError: not a registered format (the message lists them).
    """
    if fmt not in DATASET_FORMATS:
        names = ", ".join(DATASET_FORMATS.names())
        raise RecordError(f"unknown format {fmt!r}; use one of {names}")
    return fmt


# detection order: the most distinctive fields first
DATASET_FORMATS.register(
    "evalplus",
    DatasetFormat(
        evalplus.is_evalplus,
        evalplus.to_task,
        "EvalPlus (base_input, plus_input, canonical_solution, entry_point, atol)",
    ),
)
DATASET_FORMATS.register(
    "livecodebench",
    DatasetFormat(
        livecodebench.is_livecodebench,
        livecodebench.to_task,
        "LiveCodeBench (question_content, public_test_cases, private_test_cases, metadata)",
    ),
)
DATASET_FORMATS.register(
    "codecontests",
    DatasetFormat(
        lambda r: any(k in r for k in ("public_tests", "private_tests", "generated_tests")),
        _BUILTIN["codecontests"],
        "CodeContests (public_tests)",
    ),
)
DATASET_FORMATS.register(
    "apps", DatasetFormat(lambda r: "input_output" in r, _BUILTIN["apps"], "APPS (input_output)")
)
DATASET_FORMATS.register(
    "mbpp", DatasetFormat(lambda r: "test_list" in r, _BUILTIN["mbpp"], "MBPP (test_list)")
)
DATASET_FORMATS.register(
    "humaneval",
    DatasetFormat(
        lambda r: {"prompt", "entry_point", "test"} <= r.keys(),
        _BUILTIN["humaneval"],
        "HumanEval (prompt, entry_point, test)",
    ),
)
