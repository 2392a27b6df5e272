"""Suites whose tests need packages: the environment a task names (``Task.image``) is a
pinned image, and both the program and the test's code run with its packages.

The shipped ``numpy`` environment is built by the set-up; ``prepare`` finds it (or builds
it, from its hash-pinned wheel, where the package index is reachable).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_asyncio

from codegym.sandbox import HostUnsupported, Sandbox
from codegym.sandbox.images import ImageStore
from codegym.tasks import DatasetError, Task, load_suite, score
from codegym.tasks import environments as envs
from jail import no_jail

SHARED = Path(__file__).parents[3] / "shared" / "data" / "evalplus"
CODEGYM = str(Path(sys.executable).with_name("codegym"))
in_module_loop = pytest.mark.asyncio(loop_scope="module")

# a HumanEval record whose test compares with numpy, in the environment it names
_ORIGINAL = {
    "task_id": "HumanEval/900",
    "prompt": "def third(x):\n",
    "entry_point": "third",
    "canonical_solution": "    return x / 3\n",
    "test": (
        "import numpy as np\n\n"
        "def close(out, exp, atol):\n"
        "    assert type(out) is float and np.allclose(out, exp, rtol=1e-07, atol=atol)\n\n"
        "def check(candidate):\n"
        "    for inp, exp in [[[1.0], 1 / 3], [[2.0], 2 / 3], [[9.0], 3.0]]:\n"
        "        close(candidate(*inp), exp, 1e-6)\n"
    ),
    "image": "numpy",
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def box() -> AsyncIterator[Sandbox]:
    if shutil.which("bwrap") is None:
        no_jail("bubblewrap is missing: images run in the jail tier only")
    sb = Sandbox(workers=2, images=ImageStore())
    try:
        await sb.start()
    except HostUnsupported as e:
        no_jail(e)
    try:
        envs.of(sb).prepare(["numpy"])
        yield sb
    finally:
        await sb.close()


def _suite(tmp_path: Path, *rows: dict[str, object], fmt: str | None = None) -> list[Task]:
    path = tmp_path / "suite.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return list(load_suite(str(path), format=fmt))


@in_module_loop
async def test_the_program_and_the_test_both_import_the_environment(
    box: Sandbox, tmp_path: Path
) -> None:
    (task,) = _suite(tmp_path, _ORIGINAL)
    assert task.image == "numpy"
    ok = await score(box, task, task.reference)
    assert ok.passed, ok.detail
    # within the tolerance only numpy's allclose, in the judge, can accept
    near = await score(box, task, "    return x / 3 + 1e-9\n")
    assert near.passed, near.detail
    assert not (await score(box, task, "    return x / 3 + 1e-3\n")).passed
    uses = "    import numpy\n    return float(numpy.float64(x) / 3)\n"
    assert (await score(box, task, uses)).passed  # the program's numpy
    # the same task on the sandbox's own Python: its test cannot even start
    bare = await score(box, replace(task, image=""), task.reference)
    assert not bare.passed and "No module named 'numpy'" in bare.detail, bare.detail


@in_module_loop
async def test_numpy_scalars_cross_as_python_values(box: Sandbox, tmp_path: Path) -> None:
    row = {
        "task_id": "T/1",
        "prompt": "import numpy as np\n\ndef count(x):\n",
        "entry_point": "count",
        "canonical_solution": "    return np.int64(len(x))\n",
        "test": (
            "def check(candidate):\n"
            "    v = candidate([1, 2])\n"
            "    assert v == 2 and type(v) is int\n"
        ),
        "image": "numpy",
    }
    (task,) = _suite(tmp_path, row)
    assert (await score(box, task, task.reference)).passed
    arr = await score(box, task, "    return np.array([len(x)])\n")  # an array is no plain data
    assert not arr.passed and "not plain data" in arr.detail, arr.detail


def test_a_record_names_a_spec_by_path_relative_to_its_file(tmp_path: Path) -> None:
    spec = tmp_path / "envs" / "np.toml"
    spec.parent.mkdir()
    shutil.copy(envs.SHIPPED / "numpy.toml", spec)
    shutil.copy(envs.SHIPPED / "numpy.lock", spec.parent / "numpy.lock")
    (task,) = _suite(tmp_path, {**_ORIGINAL, "image": "envs/np.toml"})
    assert task.image == str(spec.resolve())
    shipped = _suite(tmp_path, _ORIGINAL)[0]
    # the digest covers what the environment is made of, not where its spec lies
    assert task.digest() == shipped.digest()  # same bytes, another place
    (spec.parent / "numpy.lock").write_text(
        (envs.SHIPPED / "numpy.lock").read_text() + "# changed\n"
    )
    envs.spec_key.cache_clear()
    assert _suite(tmp_path, {**_ORIGINAL, "image": "envs/np.toml"})[0].digest() != task.digest()
    assert replace(shipped, image="").digest() != shipped.digest()


@pytest.mark.parametrize(
    ("image", "match"),
    [
        ("scipy", r"suite\.jsonl:1: image 'scipy': no such shipped environment \(numpy\)"),
        (7, r"suite\.jsonl:1: field 'image' must be a string"),
        ("", r"suite\.jsonl:1: image '': name a shipped environment"),
    ],
)
def test_a_bad_image_field_names_its_line(tmp_path: Path, image: object, match: str) -> None:
    with pytest.raises(DatasetError, match=match):
        _suite(tmp_path, {**_ORIGINAL, "image": image})
    without = {k: v for k, v in _ORIGINAL.items() if k != "image"}
    assert _suite(tmp_path, without)[0].image == ""  # no field: the sandbox's own Python


@in_module_loop
async def test_an_environment_that_cannot_be_built_is_infra(box: Sandbox, tmp_path: Path) -> None:
    spec = tmp_path / "old.toml"
    spec.write_text('name = "needs-py39"\npython = "3.9"\n')  # no such Python on this host
    (task,) = _suite(tmp_path, {**_ORIGINAL, "image": "old.toml"})
    first = await score(box, task, task.reference)
    assert first.outcome == "infra" and "old.toml" in first.detail, first  # names the spec
    assert "could not be built" in first.detail and "3.9" in first.detail, first.detail
    again = await score(box, task, task.reference)  # tried once: told at once
    assert again.outcome == "infra" and again.detail == first.detail


def test_score_refuses_a_tier_that_runs_no_images(tmp_path: Path) -> None:
    (task,) = _suite(tmp_path, _ORIGINAL)
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": task.id, "completion": task.reference}) + "\n")
    cmd = [CODEGYM, "score", str(samples), "--suite", str(tmp_path / "suite.jsonl"),
           "--out", str(tmp_path / "out.jsonl"), "--no-store", "--tier", "process"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    said = " ".join((r.stdout + r.stderr).split())  # rich wraps long lines
    assert "run in the environment numpy" in said and "--tier jail" in said, said


# documented in docs/evalplus.md: their references return a Counter or a re.Match, which
# these scripts compare as they are (no loose results, as the release layout's checker has)
_NOT_PLAIN = {"88", "737", "787", "794"}


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/evalplus is not beside the repo")
@pytest.mark.parametrize(
    ("name", "fmt"), [("HumanEvalPlus-OriginFmt", "humaneval"), ("MbppPlus-OriginFmt", "mbpp")]
)
@in_module_loop
async def test_the_original_layout_runs_as_published_only_when_named(
    box: Sandbox, name: str, fmt: str
) -> None:
    path = str(SHARED / f"{name}.jsonl.gz")
    # detected, it is refused: its scripts pay wrong answers that evalplus's checker rejects
    with pytest.raises(DatasetError, match=r"original layout, whose test script accepts wrong"):
        load_suite(path)
    tasks = list(load_suite(path, format=fmt))
    assert len(tasks) in (164, 378)
    # each test that imports numpy runs in the environment (HumanEval/32's needs none)
    assert all(t.image == "numpy" for t in tasks if "import numpy" in t.test)
    assert sum(t.image == "numpy" for t in tasks) >= len(tasks) - 1
    # every 8th task: the references pass every base and plus input, a stub does not
    for t in tasks[::8]:
        if t.id == "HumanEval/15":
            continue  # its reference needs 3.6 s of CPU for the plus inputs (over the default)
        ok = await score(box, t, t.reference)
        if t.id == "HumanEval/32":
            # the release's own test is broken: `_poly(*candidate(*inp), inp)` unpacks the
            # float find_zero returns, so the reference errors (ground truth quarantines it)
            assert ok.outcome == "error" and "after * must be an iterable" in ok.detail
            continue
        if t.id in _NOT_PLAIN:
            assert not ok.passed and "is not plain data" in ok.detail, ok
            continue
        assert ok.passed, (t.id, ok.outcome, ok.detail[:300])
        stub = f"def {t.entry_point}(*args):\n    return None\n"
        wrong = await score(box, t, stub if t.id.startswith("Mbpp") else "    return None\n")
        assert not wrong.passed and wrong.outcome != "infra", (t.id, wrong)
