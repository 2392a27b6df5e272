"""TaskSet, hash-pinned JSONL loaders (HumanEval, MBPP, APPS, CodeContests), suite specs."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from codegym.sandbox import Sandbox
from codegym.tasks import (
    DatasetError,
    Task,
    TaskSet,
    UnknownTaskError,
    load_jsonl,
    load_suite,
    loaders,
    register_family,
    register_manifest,
    score,
)
from codegym.tasks.loaders import SynthSpec, parse_jsonl, parse_synth_spec

DATA = Path(__file__).parent / "data"
FIXTURES = {
    "humaneval": DATA / "humaneval_style.jsonl",
    "mbpp": DATA / "mbpp_style.jsonl",
    "apps": DATA / "apps_style.jsonl",
    "codecontests": DATA / "codecontests_style.jsonl",
}


def _assert_task(i: int) -> Task:
    return Task(
        id=f"t/{i}",
        prompt=f"def f{i}(x):\n",
        entry_point=f"f{i}",
        test=f"def check(candidate):\n    assert candidate({i}) == {i}\n",
        reference="    return x\n",
    )


def _write(path: Path, lines: Sequence[str | bytes]) -> Path:
    raw = b"".join((ln.encode() if isinstance(ln, str) else ln) + b"\n" for ln in lines)
    path.write_bytes(raw)
    return path


def _he_line(task_id: str) -> str:
    return json.dumps(
        {
            "task_id": task_id,
            "prompt": "def f(x):\n",
            "entry_point": "f",
            "test": "def check(candidate):\n    assert candidate(1) == 1\n",
            "canonical_solution": "    return x\n",
        }
    )


# --- TaskSet ---------------------------------------------------------------------------------


def test_taskset_is_an_ordered_sequence_with_lookup_by_id() -> None:
    ts = TaskSet("demo", tuple(_assert_task(i) for i in range(3)))
    assert len(ts) == 3 and [t.id for t in ts] == ["t/0", "t/1", "t/2"]
    assert ts[1].id == "t/1" and ts.get("t/2") is ts[2]
    assert "t/0" in ts and "t/9" not in ts and ts[0] in ts
    assert ts.select(["t/2", "t/0"]).ids == ("t/2", "t/0")
    with pytest.raises(TypeError, match=r"\.get\('t/0'\)"):
        ts["t/0"]  # type: ignore[call-overload]


def test_unknown_id_lists_near_matches_and_is_a_key_error() -> None:
    ts = TaskSet("demo", tuple(_assert_task(i) for i in range(3)))
    with pytest.raises(UnknownTaskError) as info:
        ts.get("t/7")
    assert isinstance(info.value, KeyError) and isinstance(info.value, DatasetError)
    assert "unknown task id 't/7'" in str(info.value) and "did you mean" in str(info.value)
    with pytest.raises(KeyError):
        ts.select(["t/0", "nope"])


def test_taskset_refuses_duplicate_ids() -> None:
    with pytest.raises(DatasetError, match="duplicate task id 't/1'"):
        TaskSet("demo", (_assert_task(1), _assert_task(1)))


def test_digest_tracks_task_content_and_order() -> None:
    tasks = tuple(_assert_task(i) for i in range(3))
    ts = TaskSet("a", tasks)
    assert ts.digest == TaskSet("other-name", tasks).digest  # content, not the label
    assert ts.digest != TaskSet("a", tasks[::-1]).digest
    changed = (replace(tasks[0], test=tasks[0].test + "    assert True\n"), *tasks[1:])
    assert ts.digest != TaskSet("a", changed).digest


# --- formats ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(FIXTURES))
def test_format_is_detected_and_matches_forcing_it(fmt: str) -> None:
    detected = load_jsonl(FIXTURES[fmt])
    forced = load_jsonl(FIXTURES[fmt], format=fmt)
    assert detected == forced and detected.digest == forced.digest
    assert all(t.metadata["format"] == fmt for t in detected)


def test_mbpp_records_become_assert_tasks_with_the_called_function() -> None:
    ts = load_jsonl(FIXTURES["mbpp"])
    assert ts.ids == ("11", "2")
    occ, shared = ts
    assert occ.kind == "assert" and occ.entry_point == "remove_Occ"
    # the helper _as_set is defined first but not called by the asserts
    assert shared.entry_point == "similar_elements"
    assert shared.test.startswith("import math\n")
    # the prompt leads a Python program, so it must be comments only
    assert all(ln.startswith("#") for ln in shared.prompt.splitlines())


def test_apps_records_become_io_or_call_based_tasks() -> None:
    stdin_task, leet, plain = load_jsonl(FIXTURES["apps"])
    assert stdin_task.kind == "io" and [c.stdin for c in stdin_task.io_cases] == [
        "1 2\n",
        "10 -3\n",
    ]
    assert stdin_task.metadata["difficulty"] == "introductory"
    assert leet.kind == "assert" and leet.entry_point == "Solution().countVowels"
    assert plain.entry_point == "min_max" and "class Solution" not in plain.reference


def test_codecontests_uses_all_test_splits_and_the_python3_solution() -> None:
    (task,) = load_jsonl(FIXTURES["codecontests"])
    assert task.id == "1_A. Theatre Square" and len(task.io_cases) == 4
    assert task.reference.startswith("n, m, a =")


@pytest.mark.parametrize("fmt", list(FIXTURES))
async def test_references_pass_and_wrong_answers_fail_in_the_sandbox(
    sandbox: Sandbox, fmt: str
) -> None:
    for task in load_jsonl(FIXTURES[fmt]):
        good = await score(sandbox, task, task.reference)
        assert good.passed, (task.id, good.outcome, good.detail)
        wrong = "print(0)\n" if task.kind == "io" else _wrong_completion(task)
        bad = await score(sandbox, task, wrong)
        assert not bad.passed and bad.outcome in ("fail", "error"), (task.id, bad)


def _wrong_completion(task: Task) -> str:
    if task.metadata["format"] == "humaneval":
        return "    return None\n"
    name = task.entry_point.rsplit(".", 1)[-1]
    if task.entry_point.startswith("Solution()"):
        return f"class Solution:\n    def {name}(self, *a):\n        return -1\n"
    return f"def {name}(*a):\n    return -1\n"


# --- hash pinning ----------------------------------------------------------------------------


def test_sha256_is_recorded_and_checked() -> None:
    path = FIXTURES["humaneval"]
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    assert load_jsonl(path).sha256 == actual
    assert load_jsonl(path, sha256=f"sha256:{actual.upper()}").sha256 == actual
    with pytest.raises(DatasetError) as info:
        load_jsonl(path, sha256="ab" * 32)
    assert actual in str(info.value) and "ab" * 32 in str(info.value)
    assert "pin the new digest" in str(info.value)
    with pytest.raises(DatasetError, match="not 64 hex digits"):
        load_jsonl(path, sha256="abc")


def test_gzip_file_is_hashed_as_stored(tmp_path: Path) -> None:
    gz = tmp_path / "he.jsonl.gz"
    gz.write_bytes(gzip.compress(FIXTURES["humaneval"].read_bytes()))
    ts = load_jsonl(gz, sha256=hashlib.sha256(gz.read_bytes()).hexdigest())
    assert ts.ids == ("tiny/add", "tiny/rev")
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(DatasetError, match="not valid gzip"):
        load_jsonl(tmp_path / "bad.jsonl.gz")


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"task_id": "x", "prompt": ', "malformed JSON"),
        (b'{"task_id": "caf\xe9"}', "not UTF-8 (byte 0xe9"),
        ("[1, 2]", "expected a JSON object, got list"),
        (json.dumps({"task_id": "x", "prompt": "p", "entry_point": "f", "test": 3}), "'test'"),
        (
            json.dumps({"test_list": ["assert f(1) == 1"], "code": "def f(x): return x"}),
            "missing field 'text' or 'prompt'",
        ),
        (json.dumps({"input_output": "{oops", "question": "q"}), "malformed JSON text"),
        (json.dumps({"hello": 1}), "cannot tell the format"),
    ],
)
def test_bad_record_names_file_line_and_fix(
    tmp_path: Path, line: str | bytes, message: str
) -> None:
    # The bad record comes first, so format detection sees it too.
    path = _write(tmp_path / "d.jsonl", ["", line, _he_line("ok/1")])
    with pytest.raises(DatasetError) as info:
        load_jsonl(path)
    text = str(info.value)
    assert f"{path}:2:" in text and message in text and "on_bad_line='skip'" in text


def test_skip_mode_keeps_good_lines_and_lists_the_bad(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "d.jsonl",
        [_he_line("a"), "{broken", b"\xff\xfe", _he_line("b"), _he_line("a")],
    )
    ts = load_jsonl(path, on_bad_line="skip")
    assert ts.ids == ("a", "b")
    assert [s.split(": ", 1)[0] for s in ts.skipped] == [f"{path}:{n}" for n in (2, 3, 5)]
    assert "duplicate task id 'a' (first on line 1)" in ts.skipped[-1]


def test_duplicate_ids_stop_by_default(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", [_he_line("a"), _he_line("a")])
    with pytest.raises(DatasetError, match=r"d\.jsonl:2: duplicate task id 'a'"):
        load_jsonl(path)


@pytest.mark.parametrize("content", [b"", b"\n  \n\n"])
def test_empty_file_is_an_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "e.jsonl").write_bytes(content)
    with pytest.raises(DatasetError, match="is empty"):
        load_jsonl(tmp_path / "e.jsonl")


def test_all_lines_bad_is_an_error_even_when_skipping(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", ["{", "{"])
    with pytest.raises(DatasetError, match="no usable task"):
        load_jsonl(path, on_bad_line="skip")


def test_missing_file_and_unknown_format_are_clear(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read dataset file"):
        load_jsonl(tmp_path / "absent.jsonl")
    with pytest.raises(DatasetError, match="unknown format 'xml'"):
        load_jsonl(FIXTURES["mbpp"], format="xml")


# the shapes of EvalPlus's releases (HumanEval+ and MBPP+, and MBPP+ in MBPP's layout)
_PLUS = {"task_id": "HumanEval/0", "prompt": "def f(x):\n", "entry_point": "f",
         "canonical_solution": "    return x\n", "test": "def check(candidate):\n    pass\n",
         "base_input": [[1]], "plus_input": [[2]], "atol": 0}  # fmt: skip
_MBPP_PLUS = {"task_id": "Mbpp/2", "prompt": "Return x.", "entry_point": "f", "atol": 0,
              "canonical_solution": "def f(x):\n    return x\n", "assertion": "assert f(1) == 1",
              "base_input": [[1]], "plus_input": [[2]]}  # fmt: skip
_MBPP_PLUS_ORIGIN = {"task_id": 2, "prompt": "Return x.", "code": "def f(x):\n    return x",
                     "test_list": ["assert f(1) == 1"], "test_imports": [],
                     "test": "import numpy\nfor i in [2]:\n    assert f(i) == i\n"}  # fmt: skip


@pytest.mark.parametrize("row", [_PLUS, _MBPP_PLUS], ids=["he+", "mbpp+"])
def test_an_evalplus_file_is_read_as_evalplus_never_as_a_weaker_format(
    tmp_path: Path, row: dict[str, object]
) -> None:
    path = tmp_path / "plus.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (task,) = load_suite(str(path))
    assert task.metadata["format"] == "evalplus" and task.part_names == ("base", "plus")
    with pytest.raises(DatasetError, match=r"an EvalPlus record.*--format evalplus"):
        load_jsonl(path, format="humaneval")  # naming a weaker format does not reduce it


def test_evalplus_in_the_original_layout_runs_as_published_only_when_named(
    tmp_path: Path,
) -> None:
    path = tmp_path / "plus.jsonl"
    path.write_text(json.dumps(_MBPP_PLUS_ORIGIN) + "\n")
    with pytest.raises(DatasetError, match=r"plus\.jsonl:1: an EvalPlus record in the original"):
        load_suite(str(path))  # detected: refused, its script pays wrong answers
    (mbpp,) = load_suite(str(path), format="mbpp")
    # named: the script (every base and plus input) is the test, not the three asserts
    assert mbpp.image == "numpy" and mbpp.metadata["layout"] == "evalplus-original"
    assert "for i in [2]:" in mbpp.test and "assert f(1) == 1" not in mbpp.test
    he = {**_PLUS, "test": "import numpy as np\ndef assertion(out, exp, atol):\n    pass\n"}
    for k in ("base_input", "plus_input", "atol"):
        he.pop(k)
    path.write_text(json.dumps(he) + "\n")
    with pytest.raises(DatasetError, match=r"MbppPlus\.jsonl"):
        load_suite(str(path))
    (task,) = load_suite(str(path), format="humaneval")
    assert task.image == "numpy" and task.test == he["test"]
    # a plain HumanEval record runs on the sandbox's own Python, as before
    path.write_text(json.dumps({**he, "test": "def check(candidate):\n    pass\n"}) + "\n")
    assert load_suite(str(path))[0].image == ""


def test_mbpp_without_a_callable_entry_point_asks_for_the_field(tmp_path: Path) -> None:
    row = {"task_id": 1, "text": "t", "code": "def g(x): return x", "test_list": ["assert 1"]}
    path = _write(tmp_path / "m.jsonl", [json.dumps(row)])
    with pytest.raises(DatasetError, match="add an 'entry_point' field"):
        load_jsonl(path)
    path = _write(tmp_path / "m.jsonl", [json.dumps({**row, "entry_point": "g"})])
    assert load_jsonl(path)[0].entry_point == "g"


async def test_sanitized_mbpp_test_imports_run_before_the_asserts(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    row = {
        "task_id": 7,
        "prompt": "Return the square root of x.",
        "code": "import math\ndef root(x):\n    return math.sqrt(x)\n",
        "test_imports": ["import math"],
        "test_list": ["assert math.isclose(root(2), 1.41421356, rel_tol=1e-6)"],
    }
    (task,) = load_jsonl(_write(tmp_path / "s.jsonl", [json.dumps(row)]))
    assert task.test.startswith("import math\n")
    ok = await score(sandbox, task, "def root(x):\n    return x ** 0.5\n")
    assert ok.passed, ok.detail


# --- suites, synth specs, manifests ----------------------------------------------------------


def test_load_suite_resolves_names_and_paths() -> None:
    he = load_suite("humaneval")
    assert he.name == "humaneval" and len(he) == 164 and he.sha256 is not None
    assert load_suite(str(FIXTURES["apps"])).ids == ("4001", "4002", "4003")
    assert (
        load_suite(str(FIXTURES["apps"]), format="apps").digest
        == load_suite(str(FIXTURES["apps"])).digest
    )
    with pytest.raises(DatasetError, match="expected 00"):
        load_suite("humaneval", sha256="00" * 32)


def test_unknown_suite_suggests_a_name() -> None:
    with pytest.raises(DatasetError, match="Did you mean 'humaneval'"):
        load_suite("humaneva")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("synth:infer", SynthSpec("infer")),
        ("synth:bugfix?n=200&seed=1&difficulty=2", SynthSpec("bugfix", 200, 1, 2)),
        ("synth:x?seed=7", SynthSpec("x", seed=7)),
    ],
)
def test_synth_spec_parses(spec: str, expected: SynthSpec) -> None:
    assert parse_synth_spec(spec) == expected
    assert parse_synth_spec(str(expected)) == expected  # the canonical name round-trips


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("synth:", "must be an identifier"),
        ("synth:a b", "must be an identifier"),
        ("synth:f?n=ten", "n='ten' is not an integer"),
        ("synth:f?n=1&n=2", "given twice"),
        ("synth:f?size=3", "unknown parameter 'size'"),
        ("synth:f?n=0", "n must be >= 1"),
        ("synth:f?n", "malformed parameters"),
    ],
)
def test_bad_synth_spec_is_explained(spec: str, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        parse_synth_spec(spec)


class _Counting:
    """A tiny family: task i asks for a function returning seed + i (difficulty adds tests)."""

    def __call__(self, *, n: int, seed: int, difficulty: int) -> list[Task]:
        checks = "".join(f"    assert candidate() == {seed + i}\n" for i in range(1))
        return [
            Task(
                id=f"count/{seed}/{i}",
                prompt="def f():\n",
                entry_point="f",
                test="def check(candidate):\n" + checks * (difficulty + 1),
                reference=f"    return {seed + i}\n",
                metadata={"family": "count"},
            )
            for i in range(n)
        ]


@pytest.fixture
def count_family() -> Iterator[None]:
    register_family("count", _Counting())
    yield
    loaders.unregister_family("count")


def test_registered_family_loads_by_spec(count_family: None) -> None:
    ts = load_suite("synth:count?seed=5&n=3")
    assert ts.name == "synth:count?n=3&seed=5&difficulty=1" and len(ts) == 3
    assert ts[2].reference == "    return 7\n" and ts.sha256 is None
    assert load_suite("synth:count?n=3&seed=5").digest == ts.digest  # same args, same tasks
    assert load_suite("synth:count?n=3&seed=6").digest != ts.digest
    with pytest.raises(ValueError, match="already registered"):
        register_family("count", _Counting())
    with pytest.raises(DatasetError, match="no file to check"):
        load_suite("synth:count?n=1", sha256="00" * 32)


def test_unknown_family_lists_known_ones(count_family: None) -> None:
    with pytest.raises(DatasetError, match=r"unknown synthetic family 'nope'; known: .*count"):
        load_suite("synth:nope?n=2")


def test_shipped_synthetic_families_load_through_the_hook() -> None:
    from codegym.tasks import synthetic

    family = sorted(synthetic.FAMILIES)[0]
    ts = load_suite(f"synth:{family}?n=3&seed=1&difficulty=1")
    assert len(ts) == 3 and all(isinstance(t, Task) for t in ts)


def test_manifest_registers_pinned_suites(tmp_path: Path) -> None:
    data = tmp_path / "he.jsonl"
    data.write_bytes(FIXTURES["humaneval"].read_bytes())
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    manifest = tmp_path / "datasets.json"
    manifest.write_text(
        json.dumps(
            {
                "datasets": {
                    "tiny-he": {"path": "he.jsonl", "sha256": digest, "format": "humaneval"},
                    "tiny-he-stale": {"path": "he.jsonl", "sha256": "0" * 64},
                }
            }
        )
    )
    try:
        assert register_manifest(manifest) == ["tiny-he", "tiny-he-stale"]
        assert load_suite("tiny-he").ids == ("tiny/add", "tiny/rev")
        with pytest.raises(DatasetError, match=f"has sha256 {digest}, expected 0000"):
            load_suite("tiny-he-stale")
    finally:
        loaders.unregister_suite("tiny-he")
        loaders.unregister_suite("tiny-he-stale")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("{", "not valid UTF-8 JSON"),
        ('{"datasets": {}}', "expected"),
        ('{"datasets": {"a": {"path": "x"}}}', "missing string field"),
        (
            '{"datasets": {"a": {"path": "x", "sha256": "' + "0" * 64 + '", "format": "csv"}}}',
            "format 'csv'",
        ),
    ],
)
def test_bad_manifest_is_explained(tmp_path: Path, doc: str, message: str) -> None:
    (tmp_path / "m.json").write_text(doc)
    with pytest.raises(DatasetError, match=message):
        register_manifest(tmp_path / "m.json")


MBPP_56 = {
    "task_id": 56,
    "text": "Write a python function to check if a given number is one less than twice its "
    "reverse.",
    "code": "def rev(num):\n    rev_num = 0\n    while (num > 0):\n        rev_num = (rev_num * 10 "
    "+ num % 10)\n        num = num // 10\n    return rev_num\ndef check(n):\n    return (2 * "
    "rev(n) == n + 1)",
    "test_list": ["assert check(70) == False", "assert check(23) == False",
                  "assert check(73) == True"],
}  # fmt: skip


async def test_a_task_whose_function_is_called_check_is_judged_by_its_own_tests(
    sandbox: Sandbox,
) -> None:
    """MBPP/56 names its function ``check``, the name of the test's own function: the
    reference once failed (the test's check hid the program's and called itself)."""
    (task,) = list(parse_jsonl((json.dumps(MBPP_56) + "\n").encode(), source="m", name="m"))
    assert task.entry_point == "check"
    good = await score(sandbox, task, task.reference)
    assert good.passed, (good.outcome, good.detail)
    wrong = task.reference.replace("n + 1", "n - 1")
    assert not (await score(sandbox, task, wrong)).passed
