"""Repository tasks end to end: synthesis on a real package with a real pytest suite,
grading of gold, empty, broken, no-op and test-editing patches, and the score command.

The package is written here (``shapes``: a few functions and a pytest suite); its image's
environment installs pytest from the package index by hash, so these tests skip only when
the index cannot be reached.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from codegym.sandbox import HostUnsupported, Sandbox
from codegym.sandbox.images import ImageStore
from codegym.sandbox.images.layers import remove_tree
from codegym.tasks import DatasetError
from codegym.tasks.swe.grade import grade
from codegym.tasks.swe.mutate import Mutant
from codegym.tasks.swe.synth import Report, load_source, synth_package
from codegym.tasks.swe.task import SweTask, load_tasks
from jail import no_jail

REPO = Path(__file__).resolve().parents[2]
SHAPES = """\
def area(w, h):
    if w < 0 or h < 0:
        raise ValueError("negative side")
    return w * h


def perimeter(w, h):
    return 2 * (w + h)


def scale(points, k):
    return [(x * k, y * k) for x, y in points]


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def untested(x, k=2):
    if x > k:
        return x - k
    return x + k
"""
TESTS = """\
import pytest
from shapes import area, clamp, perimeter, scale


def test_area():
    assert area(2, 3) == 6


def test_area_negative():
    with pytest.raises(ValueError):
        area(-1, 2)


def test_perimeter():
    assert perimeter(2, 3) == 10


def test_scale():
    assert scale([(1, 2)], 3) == [(3, 6)]


def test_clamp():
    assert [clamp(v, 0, 10) for v in (-5, 5, 15)] == [0, 5, 10]
"""


SITE = ".venv/lib/python3.11/site-packages"
PASS_ALL = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    report.outcome = "passed"
"""


def _new(path: str, text: str) -> str:
    """A git patch that creates ``path`` with ``text``."""
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def _index_reachable() -> bool:
    try:
        return httpx.get("https://pypi.org/simple/pytest/", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


needs_index = pytest.mark.skipif(
    not _index_reachable(), reason="the package index (pytest's wheels) cannot be reached"
)
in_module_loop = pytest.mark.asyncio(loop_scope="module")
MADE_REPORT: list[Report] = []


@pytest.fixture(scope="module")
def shapes() -> Iterator[tuple[ImageStore, Path]]:
    root = Path(tempfile.mkdtemp(prefix="codegym-test-swe-"))
    os.chmod(root, 0o755)
    (root / "src" / "tests").mkdir(parents=True)
    (root / "src" / "shapes.py").write_text(SHAPES)
    (root / "src" / "tests" / "test_shapes.py").write_text(TESTS)
    spec = root / "shapes.toml"
    spec.write_text(
        'name = "shapes"\npython = "3.11"\n[source]\npath = "src"\n'
        f'[environment]\nlock = "{REPO}/examples/images/pytest.lock"\n'
    )
    try:
        yield ImageStore(root / "cache"), spec
    finally:
        remove_tree(root)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def made(shapes: tuple[ImageStore, Path]) -> AsyncIterator[tuple[Sandbox, list[SweTask]]]:
    store, spec = shapes
    src = load_source(spec, store)
    box = Sandbox(workers=2, images=store)
    try:
        await box.start()
    except HostUnsupported as e:
        no_jail(e)
    try:
        report = Report()
        tasks = await synth_package(box, src, n=60, seed=1, combined_share=0.0, report=report)
        MADE_REPORT.append(report)
        yield box, tasks
    finally:
        await box.close()


@needs_index
@in_module_loop
async def test_synthesis_keeps_bugs_the_suite_catches(made: tuple[Sandbox, list[SweTask]]):
    _, tasks = made
    assert len(tasks) >= 4  # of at most 6 failing sets five tests can tell apart
    names = ("test_area", "test_area_negative", "test_perimeter", "test_scale", "test_clamp")
    everything = {f"tests/test_shapes.py::{n}" for n in names}
    for t in tasks:
        assert t.FAIL_TO_PASS and set(t.FAIL_TO_PASS) | set(t.PASS_TO_PASS) == everything
        assert not set(t.FAIL_TO_PASS) & set(t.PASS_TO_PASS)
        assert t.patch.startswith("diff --git a/shapes.py b/shapes.py")
        assert t.test_files == ["tests/test_shapes.py"] and t.test_patch == ""
        fixed = [ln[1:] for ln in t.patch.splitlines() if ln.startswith("+") and ln[1:].strip()]
        assert not any(f.strip() in t.problem_statement for f in fixed if f.strip() != "+++")
    assert len({frozenset(t.FAIL_TO_PASS) for t in tasks}) == len(tasks)  # deduplicated
    # aimed by coverage: no test runs `untested`, so none of its mutants was judged
    from codegym.tasks.swe.mutate import find_mutants

    report = MADE_REPORT[0]
    assert report.unreached["shapes"] >= 5
    assert not any("untested" in t.created_by["functions"] for t in tasks)
    # a bug only test_clamp sees can only fail test_clamp: one of clamp's many mutants is
    # judged, not each (the budget of 60 is more than there are mutants)
    singles = find_mutants("shapes.py", SHAPES)
    assert report.tried["shapes"] < len(singles) - report.unreached["shapes"] < 60


def test_coverage_reaches_the_tests_that_run_an_edit() -> None:
    """Without a sandbox: the statement and signature rules of ``Coverage.reach``."""
    from codegym.tasks.swe.coverage import Coverage, junit_id
    from codegym.tasks.swe.mutate import find_mutants

    tests = ["t::a", "t::b"]
    # line 2 (the `if`) ran in both tests, line 3 only in b; nothing ran line 5
    cov = Coverage(tests, {"m.py": {2: frozenset({0, 1}), 3: frozenset({1})}}, {"m.py": SRC})
    reach = {(m.edits[0].line, m.edits[0].family): cov.reach(m.edits[0])
             for m in find_mutants("m.py", SRC)}  # fmt: skip
    assert reach[(2, "flip_comparison")] == {"t::a", "t::b"}
    assert reach[(3, "off_by_one")] == {"t::b"}
    assert reach[(5, "wrong_operator")] == frozenset()
    assert reach[(1, "change_constant")] == {"t::a", "t::b"}  # a default: whoever calls it
    # a test inherited from a mixin in another file keeps pytest's JUnit id
    assert junit_id("tests/test_c.py::CacheTest::test_x[1]", "tests/__init__.py") == (
        "tests/__init__.py::tests::test_c::CacheTest::test_x[1]"
    )


SRC = """def f(x, k=1):
    if x > k:
        return x + 1
    return x
    x = x * 2
"""


@needs_index
@in_module_loop
async def test_gold_patches_must_give_the_clean_tree_back(
    made: tuple[Sandbox, list[SweTask]], shapes: tuple[ImageStore, Path]
):
    """The per-task check behind grading a sample of gold patches: applied to the clean
    image, the bug must give the judged mutant and the gold patch the image's bytes."""
    from codegym.tasks.swe.mutate import find_mutants
    from codegym.tasks.swe.synth import _round_trip, patches

    sb, tasks = made
    src = load_source(shapes[1], shapes[0])
    mutants = find_mutants("shapes.py", SHAPES)
    first = mutants[0]  # in area, far from clamp: the two diffs apply on top of each other
    far = next(m for m in mutants if m.edits[0].function == "clamp")
    gold, bug = patches(first)
    task = tasks[0].model_copy(update={"patch": gold, "bug": bug})
    assert await _round_trip(sb, src, task, first) == ("", "")
    # a gold patch that applies but adds another bug instead of removing this one
    far_gold, far_bug = patches(far)
    wrong = task.model_copy(update={"patch": far_bug})
    assert "clean files back" in (await _round_trip(sb, src, wrong, first))[1]
    # a bug that is not the one judged (the gold patch then fits nothing), and one that
    # does not apply to the image
    other = task.model_copy(update={"bug": far_bug})
    assert "do not apply" in (await _round_trip(sb, src, other, first))[1]
    stale = task.model_copy(update={"bug": far_gold})
    assert "do not apply" in (await _round_trip(sb, src, stale, first))[1]
    # a bug in a file the grader restores (a helper under test/): the fix would be undone
    edit = dataclasses.replace(first.edits[0], path="test/helpers.py")
    helper = Mutant((edit,))
    kind, why = await _round_trip(sb, src, task, helper)
    assert kind == "gold does not restore the clean tree" and "restores test/helpers.py" in why


def test_gold_sample_covers_each_canary_module_and_falls_back(monkeypatch: pytest.MonkeyPatch):
    """Which gold patches are graded, without a sandbox: one per canary module and random
    others up to the sample; a failed grading drops its task and grades all the rest."""
    import asyncio
    import types

    from codegym.tasks.swe import synth as s

    tasks = [
        SweTask(
            instance_id=f"p__1__{i}", repo="p", version="1", base_commit="d", patch="x",
            problem_statement="?", FAIL_TO_PASS=[f"tests/test_{i % 3}.py::t"], image="i",
            test_files=[f"tests/test_{k}.py" for k in range(3)], bug="y", test_cmd=["pytest"],
        )
        for i in range(12)
    ]  # fmt: skip
    graded: list[str] = []
    broken: set[str] = set()

    async def trip(_sb: object, _src: object, t: SweTask, _m: object) -> tuple[str, str]:
        return (
            ("gold does not restore the clean tree", "no")
            if t.instance_id.endswith("11")
            else ("", "")
        )

    async def holds(_sb: object, t: SweTask, runs: int) -> str:
        graded.append(t.instance_id)
        return "unresolved: x" if t.instance_id in broken else ""

    monkeypatch.setattr(s, "_round_trip", trip)
    monkeypatch.setattr(s, "_gold_holds", holds)
    monkeypatch.setattr(s, "_channel_file", lambda _sb, _src, t: t.FAIL_TO_PASS[0].split("::")[0])

    def check(sample: int | None) -> tuple[list[str], s.Report]:
        report = s.Report()
        made = [(t, None) for t in tasks]
        src = types.SimpleNamespace(name="p")
        say = lambda _m: None  # noqa: E731
        kept = asyncio.run(s._gold_checked(None, src, made, 3, sample, 0, report, say))  # type: ignore[arg-type]
        return [t.instance_id for t in kept], report

    kept, report = check(sample=5)
    assert len(kept) == 11 and report.rejected["gold does not restore the clean tree"] == 1
    assert len(graded) == 5 and len(set(graded)) == 5  # 3 modules, then 2 more at random
    modules = {next(t for t in tasks if t.instance_id == g).FAIL_TO_PASS[0] for g in graded}
    assert len(modules) == 3
    graded.clear()
    kept, _ = check(sample=0)
    assert len(graded) == 3 and len(kept) == 11  # one per module
    graded.clear()
    broken.update(t.instance_id for t in tasks[0:11:3])  # module 0's: whichever is picked
    kept, report = check(sample=0)
    assert sorted(graded) == sorted(t.instance_id for t in tasks[:11])  # each once: the rest
    assert kept == [t.instance_id for t in tasks[:11] if t.instance_id not in broken]
    assert report.rejected["gold does not resolve"] == 4
    graded.clear()
    broken = {t.instance_id for t in tasks}
    kept, report = check(sample=None)
    assert kept == [] and report.rejected["gold does not resolve"] == 11 and len(graded) == 11


@needs_index
@in_module_loop
async def test_gold_resolves_and_what_cannot_resolve_does_not(made: tuple[Sandbox, list[SweTask]]):
    sb, tasks = made
    t = tasks[0]
    for _ in range(3):
        assert (await grade(sb, t, t.patch)).outcome == "resolved"
    assert (await grade(sb, t, "")).outcome == "empty_patch"
    assert (await grade(sb, t, "not a diff\n")).outcome == "patch_apply_failed"
    noop = (
        "diff --git a/NOTES b/NOTES\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES\n"
        "@@ -0,0 +1 @@\n+x\n"
    )
    assert (await grade(sb, t, noop)).outcome == "unresolved"
    # a patch that guts the tests, or adds a conftest that skips everything, gains nothing
    gut = (
        "diff --git a/tests/test_shapes.py b/tests/test_shapes.py\ndeleted file mode 100644\n"
        "--- a/tests/test_shapes.py\n+++ /dev/null\n"
        + f"@@ -1,{len(TESTS.splitlines())} +0,0 @@\n"
        + "".join("-" + line + "\n" for line in TESTS.splitlines())
    )
    assert (await grade(sb, t, gut)).outcome == "unresolved"
    skip_all = (
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/conftest.py\n@@ -0,0 +1,3 @@\n+import pytest\n"
        "+def pytest_collection_modifyitems(items):\n+    items.clear()\n"
    )
    assert (await grade(sb, t, skip_all)).outcome == "unresolved"
    assert (await grade(sb, t, t.patch + skip_all)).outcome == "resolved"  # conftest removed
    # plugins that mark every test passed, loaded from places a fix has no business in
    for forged in (_new("pytest.ini", "[pytest]\naddopts = -p zzp\n") + _new("zzp.py", PASS_ALL),
                   _new(f"{SITE}/zz.pth", "import os; os.environ['PYTEST_PLUGINS'] = 'zzp'\n")
                   + _new(f"{SITE}/zzp.py", PASS_ALL),
                   _new("pytest.py", "import sys; sys.exit(0)\n")):  # fmt: skip
        assert (await grade(sb, t, forged)).outcome == "unresolved", forged


@needs_index
@in_module_loop
async def test_what_a_second_review_found_gains_nothing(made: tuple[Sandbox, list[SweTask]]):
    """Routes an adversarial review found after the first fixes: the bug fixed while code
    elsewhere raises SkipTest on what it broke; a forging conftest hidden behind hundreds
    of paths to undo; a path too long to export (once a crash of the grader)."""
    from codegym.sandbox.images.changes import file_patch
    from codegym.tasks.swe.grade import task_state

    sb, tasks = made
    t = tasks[0]
    async with await sb.workspace(await task_state(sb, t)) as ws:
        buggy = await ws.read_file("shapes.py")
        await ws.run(["git", "apply", "-"], stdin=t.patch)
        fixed = await ws.read_file("shapes.py")
    kept = next(x for x in t.PASS_TO_PASS if "negative" not in x).rsplit("test_", 1)[1]
    hide = f"\n\ndef {kept}(*a):\n    import unittest\n    raise unittest.SkipTest('x')\n"
    skips = file_patch("shapes.py", (0o100644, buggy), (0o100644, fixed + hide.encode()))
    assert (await grade(sb, t, skips)).outcome == "unresolved"
    crowd = "".join(_new(f"tests/d{i}/{'x' * 200}/t.py", "x = 1\n") for i in range(400))
    forged = crowd + _new("conftest.py", PASS_ALL)
    assert (await grade(sb, t, forged)).outcome == "unresolved"
    assert (await grade(sb, t, t.patch + crowd)).outcome == "resolved"  # the crowd undone
    deep = "/".join(["y" * 250] * 13)
    graded = await grade(sb, t, t.patch + _new(f"tests/{deep}/t.py", "x = 1\n"))
    assert graded.outcome == "unresolved" and "cannot be checked" in graded.detail, graded


REWRITE_JUNIT = """
import atexit, re
def _rewrite():
    path = "/tmp/.codegym-junit.xml"
    text = re.sub(r"<failure[^>]*>.*?</failure>|<failure[^>]*/>", "", open(path).read(), flags=re.S)
    open(path, "w").write(text)
atexit.register(_rewrite)
"""
PATCH_REPORTS = """
import _pytest.reports
_init = _pytest.reports.TestReport.__init__
def _passed(self, *a, **k):
    _init(self, *a, **k)
    self.outcome, self.longrepr = "passed", None
_pytest.reports.TestReport.__init__ = _passed
"""
PATCH_HOOKS = """
import pluggy._hooks
_call = pluggy._hooks.HookCaller.__call__
def _passing(self, *a, **k):
    out = _call(self, *a, **k)
    if self.name == "pytest_runtest_makereport" and out is not None:
        out.outcome, out.longrepr = "passed", None
    return out
pluggy._hooks.HookCaller.__call__ = _passing
"""
WRITE_FDS = """
import os
for fd in range(3, 64):
    try:
        os.write(fd, b'[0,"test","tests/test_shapes.py::test_area","x","passed"] 00\\n')
    except OSError:
        pass
"""


@needs_index
@in_module_loop
async def test_a_package_that_forges_the_report_in_process_gains_nothing(
    made: tuple[Sandbox, list[SweTask]],
):
    """The bug left in place, with package code that forges pytest's report from inside the
    interpreter: an exit hook that rewrites the JUnit file (which alone would then say every
    test passed), pytest's report objects patched to pass, every report passed on its way
    out of pluggy, lines written to every open fd. The grader's signed stream, its check
    of pytest's report path, its canaries and the cross-check make each unresolved."""
    from codegym.sandbox.images.changes import file_patch
    from codegym.tasks.swe.grade import task_state
    from codegym.tasks.swe.suite import run_suite

    sb, tasks = made
    t = tasks[0]
    state = await task_state(sb, t)
    async with await sb.workspace(state) as ws:
        buggy = await ws.read_file("shapes.py")
    for payload, shows in ((REWRITE_JUNIT, "JUnit file says"),
                           (PATCH_REPORTS, "report path was altered: ['TestReport.__init__']"),
                           (PATCH_HOOKS, "canaries"), (WRITE_FDS, "not the grader's")):  # fmt: skip
        forged = buggy + payload.encode()
        graded = await grade(sb, t, file_patch("shapes.py", (0o100644, buggy), (0o100644, forged)))
        assert graded.outcome == "unresolved" and "tampered" in graded.detail, graded
        assert shows in graded.detail, graded.detail
    # the first forgery is real: JUnit alone, as graders read it, says the bug is fixed
    async with await sb.workspace(state) as ws:
        await ws.write_file("shapes.py", buggy + REWRITE_JUNIT.encode())
        plain = await run_suite(ws, t.test_cmd, timeout_s=30)
    assert all(plain.statuses[x] == "passed" for x in t.FAIL_TO_PASS), plain.statuses


@needs_index
@in_module_loop
async def test_a_full_cache_disk_is_infra_never_the_patch(
    made: tuple[Sandbox, list[SweTask]], shapes: tuple[ImageStore, Path]
) -> None:
    """The image cache's disk fills before the task's state is made: the grading is ours
    (``infra``), never a model outcome; with room again the same patch resolves."""
    if os.geteuid() != 0:
        pytest.skip("a small filesystem to fill needs root (mount -t tmpfs)")
    _, tasks = made
    store, _ = shapes
    disk = Path(tempfile.mkdtemp(prefix="codegym-test-disk-"))
    os.chmod(disk, 0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m,mode=0755", "tmpfs", str(disk)],
                   check=True)  # fmt: skip
    try:
        small = ImageStore(disk / "cache")
        image = store.get(tasks[0].image)
        for layer in store.layer_paths(image):
            subprocess.run(["cp", "-a", str(layer), str(small.layers_dir / layer.name)], check=True)
        small.add(image, tag=False)
        async with Sandbox(workers=1, images=small) as sb:
            with open(disk / "fill", "wb") as f:  # to the last block
                try:
                    while f.write(bytes(1 << 20)):
                        f.flush()
                except OSError:
                    pass
            full = await grade(sb, tasks[0], tasks[0].patch)
            assert full.outcome == "infra" and "disk" in full.detail, full
            (disk / "fill").unlink()
            assert (await grade(sb, tasks[0], tasks[0].patch)).outcome == "resolved"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
        disk.rmdir()


@needs_index
def test_score_command_grades_predictions_and_resumes(
    made: tuple[Sandbox, list[SweTask]], shapes: tuple[ImageStore, Path], tmp_path: Path
):
    _, tasks = made
    store, _ = shapes
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(t.model_dump_json() + "\n" for t in tasks[:3]))
    preds = tmp_path / "preds.jsonl"
    rows = [
        {"instance_id": tasks[0].instance_id, "model_patch": tasks[0].patch},
        {"instance_id": tasks[1].instance_id, "model_patch": ""},
    ]
    rows = [{**r, "model_name_or_path": "m"} for r in rows]
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = [str(Path(sys.executable).parent / "codegym"), "score", "--suite", str(task_file),
           str(preds), "--out", str(tmp_path / "res.jsonl"), "--json",
           "--store", str(tmp_path / "store.duckdb")]  # fmt: skip
    env = {**os.environ, "CODEGYM_IMAGE_CACHE": str(store.root)}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["resolved"] == 1 and summary["scored"] == 2, summary
    out = [json.loads(line) for line in (tmp_path / "res.jsonl").read_text().splitlines()]
    assert [(o["resolved"], o["outcome"]) for o in out] == [
        (True, "resolved"),
        (False, "empty_patch"),
    ]
    assert out[0]["model_name_or_path"] == "m"
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert json.loads(again.stdout) == summary  # from the store
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "nope", "model_patch": ""}\n')
    r3 = subprocess.run([*cmd[:4], str(bad), *cmd[5:]], capture_output=True, text=True, env=env)
    assert r3.returncode == 2 and "unknown instance_id 'nope'" in r3.stderr


def test_a_bad_task_file_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"instance_id": "a"}\n')
    with pytest.raises(DatasetError, match=r"t\.jsonl:1: not a repository task"):
        load_tasks(p)


class _Calls:
    """A chat policy that plays tool calls from a function of the task's prompt."""

    name = "scripted"

    def __init__(self, plan: Any) -> None:
        self.plan = plan

    async def generate(self, prompt: Any, params: Any) -> list[Any]:
        from codegym.policies import Generation

        n = 1 + sum(m["role"] == "assistant" for m in prompt)  # this episode's turn
        name, args = self.plan(prompt, n)
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip
        return [Generation("", "tool_calls", tool_calls=(call,), tokens_out=5)]


def _hunk_edit(patch: str) -> dict[str, str]:
    """The gold patch as one `edit` call: the hunk's text before and after."""
    path = patch.split(" b/", 1)[1].split("\n", 1)[0]
    body = patch.split("@@", 2)[2].split("\n", 1)[1]
    old = "".join(ln[1:] + "\n" for ln in body.splitlines() if ln[:1] in (" ", "-"))
    new = "".join(ln[1:] + "\n" for ln in body.splitlines() if ln[:1] in (" ", "+"))
    return {"path": path, "old": old, "new": new}


@needs_index
@in_module_loop
async def test_agents_through_the_repo_env(made: tuple[Sandbox, list[SweTask]], tmp_path: Path):
    from codegym.envs import Resources
    from codegym.policies import SamplingParams
    from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
    from codegym.tasks.swe.task import as_taskset, swe_of

    sb, tasks = made
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(t.model_dump_json() + "\n" for t in tasks[:3]))
    taskset = as_taskset(task_file)

    def gold(prompt: Any, n: int) -> tuple[str, dict[str, str]]:
        swe = next(t for t in tasks if t.problem_statement == prompt[1]["content"])
        steps = [("run_tests", {}), ("edit", _hunk_edit(swe.patch)), ("view", {"path": "."}),
                 ("submit", {})]  # fmt: skip
        return steps[n - 1]

    def noop(prompt: Any, n: int) -> tuple[str, dict[str, str]]:
        return ("bash", {"command": "ls"}) if n == 1 else ("submit", {})

    def cheat(prompt: Any, n: int) -> tuple[str, dict[str, str]]:  # makes the tests pass
        if n == 1:
            return "bash", {"command": "sed -i 's/assert /assert True or /' tests/test_shapes.py"}
        return ("run_tests", {}) if n == 2 else ("submit", {})

    outcomes = {}
    for name, plan in (("gold", gold), ("noop", noop), ("cheat", cheat)):
        ex = LocalExecutor(EnvSpec("repo", {}), _Calls(plan), SamplingParams(), Resources(sb))
        engine = RolloutEngine(ex, RolloutConfig(group_size=2), env="repo")
        groups = [g async for g in engine.run(list(taskset.tasks))]
        trajs = [t for g in groups for t in g.trajectories]
        assert engine.stats.scored == len(trajs) == 6, engine.stats
        outcomes[name] = sorted({(t.outcome, t.reward) for t in trajs})
    assert outcomes["gold"] == [("resolved", 1.0)]
    assert outcomes["noop"] == [("empty_patch", 0.0)]  # changed nothing
    assert outcomes["cheat"] == [("unresolved", 0.0)]
    assert swe_of(taskset.tasks[0]).instance_id == tasks[0].instance_id


@needs_index
def test_rollout_runs_the_repo_env_on_a_task_file(
    made: tuple[Sandbox, list[SweTask]], shapes: tuple[ImageStore, Path], tmp_path: Path
) -> None:
    from codegym.testing import FakeOpenAIServer

    _, tasks = made
    store, _ = shapes
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(t.model_dump_json() + "\n" for t in tasks[:2]))

    def agent(prompt: Any, params: Any, index: int) -> str:  # looks once, then submits
        acted = isinstance(prompt, list) and any(m.get("role") == "assistant" for m in prompt)
        return "```submit\n```" if acted else "```bash\nls\n```"

    with FakeOpenAIServer(responder=agent) as srv:
        cmd = [str(Path(sys.executable).parent / "codegym"), "rollout", "--env", "repo",
               "--suite", str(task_file), "--model", srv.model, "--base-url", srv.base_url,
               "--out", str(tmp_path / "run"), "--groups", "2", "--group-size", "2",
               "--no-store", "--workers", "2"]  # fmt: skip
        env = {**os.environ, "CODEGYM_IMAGE_CACHE": str(store.root)}
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["requested"], summary["scored"]) == (4, 4), summary
    lines = (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()
    assert {json.loads(x)["outcome"] for x in lines} == {"empty_patch"}


@needs_index
def test_eval_runs_agents_on_repository_tasks(
    made: tuple[Sandbox, list[SweTask]], shapes: tuple[ImageStore, Path], tmp_path: Path
) -> None:
    from codegym.testing import FakeOpenAIServer

    _, tasks = made
    store, _ = shapes
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(t.model_dump_json() + "\n" for t in tasks[:2]))

    def agent(prompt: Any, params: Any, index: int) -> str:
        """Applies the gold patch with git on the first task; gives up on the second."""
        if any(m.get("role") == "assistant" for m in prompt):
            return "```submit\n```"
        if prompt[1]["content"] != tasks[0].problem_statement:
            return "```bash\nls\n```"
        return f"```bash\ngit apply <<'EOF'\n{tasks[0].patch}EOF\n```"

    codegym = str(Path(sys.executable).parent / "codegym")
    env = {**os.environ, "CODEGYM_IMAGE_CACHE": str(store.root)}
    with FakeOpenAIServer(responder=agent) as srv:
        cmd = [codegym, "eval", "--env", "repo", "--mode", "chat", "--suite", str(task_file),
               "--model", srv.model, "--base-url", srv.base_url, "-n", "2",
               "--out", str(tmp_path / "run"), "--no-store", "--workers", "2",
               "--json"]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        plain = subprocess.run([*cmd[:2], *cmd[4:]], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout)
    assert summary["outcomes"] == {"empty_patch": 2, "resolved": 2}, summary
    assert summary["pass_at_k"]["1"]["estimate"] == 0.5 and summary["tasks"] == 2
    rows = [json.loads(x) for x in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert [(x["task_id"], x["sample_index"], x["passed"]) for x in rows] == [
        (tasks[0].instance_id, 0, True), (tasks[0].instance_id, 1, True),
        (tasks[1].instance_id, 0, False), (tasks[1].instance_id, 1, False),
    ]  # fmt: skip
    assert rows[0]["completion"] == tasks[0].patch  # what was graded: the workspace's diff
    trajs = (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()
    assert len(trajs) == 4
    # without an agent env, a repository task cannot be answered: say so, do nothing
    assert plain.returncode == 2 and "add --env repo" in " ".join(plain.stderr.split())


def test_what_a_fix_may_leave(tmp_path: Path) -> None:
    """The undo plan on a package tree, without a sandbox: a fix keeps its edits to the
    project's code and new modules in its packages; everything a review used to forge a
    report (a ``sitecustomize.py`` in ``src/``, a doctest ``.txt``, a ``test/`` package,
    bytecode, compiled modules, metadata, new folders) is removed or put back."""
    from codegym.sandbox.images.changes import Changes, LowerView
    from codegym.tasks.swe.grade import _plan, may_change

    layer = tmp_path / "layer"
    for rel, text in {"src/pkg/__init__.py": "", "src/pkg/core.py": "x = 1\n",
                      "src/pkg/test/__init__.py": "", "src/pkg/data.txt": "d\n",
                      "src/pkg.egg-info/entry_points.txt": ""}.items():  # fmt: skip
        (layer / rel).parent.mkdir(parents=True, exist_ok=True)
        (layer / rel).write_text(text)
    lower = LowerView([layer])
    task = SweTask(instance_id="p__1__x", repo="p", version="1", base_commit="c", patch="",
                   problem_statement="", FAIL_TO_PASS=["src/pkg/test/test_a.py::t"],
                   image="i", bug="", test_cmd=["pytest"])  # fmt: skip
    entries = [
        ["src/pkg/core.py", "f", 0o644, 0],  # the fix: kept
        ["src/pkg/extra.py", "f", 0o644, 1],  # a new module in the package: kept
        ["src/pkg/data.txt", "f", 0o644, 1],  # an existing data file: kept
        ["src/sitecustomize.py", "f", 0o644, 1],  # on a sys.path root: removed
        ["src/pkg/test_zz.txt", "f", 0o644, 1],  # a doctest: removed
        ["src/pkg/test/__init__.py", "f", 0o644, 1],  # the tests' package: restored
        ["src/pkg/fast.cpython-311-x86_64-linux-gnu.so", "f", 0o755, 1],
        ["src/pkg/__pycache__", "d", 0o755, False],
        ["src/pkg.egg-info/entry_points.txt", "f", 0o644, 1],
        ["src/pkg/sub", "d", 0o755, False],  # a new folder
        ["src/pkg/sub/__init__.py", "f", 0o644, 1],
    ]
    changes = Changes(entries, [b"x = 2\n", b"evil\n"])
    remove, restore = _plan(changes, may_change(task, lower), lower)
    assert set(remove) == {
        "src/sitecustomize.py", "src/pkg/test_zz.txt", "src/pkg/test/__init__.py",
        "src/pkg/fast.cpython-311-x86_64-linux-gnu.so", "src/pkg/__pycache__",
        "src/pkg.egg-info/entry_points.txt", "src/pkg/sub", "src/pkg/sub/__init__.py",
    }  # fmt: skip
    assert set(restore) == {"src/pkg/test/__init__.py", "src/pkg.egg-info/entry_points.txt"}
