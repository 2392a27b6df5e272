"""Make repository tasks from real packages, offline: mutate a function, keep what the
package's own tests catch.

Per package (an image spec whose sdist ships its tests): the clean suite runs ``runs``
times in fresh workspaces, and the tests that pass every time are the stable set (the
flaky and the already failing are dropped). One more clean run, traced (``coverage``),
says which tests run each line: mutants (``mutate``) no test reaches are never judged, and
the rest are judged in waves of one per group of mutants the same tests reach (``aim``).
Each judged mutant runs the whole suite once, in a fresh workspace with the mutated file
written over the source, stopped at the share limit (``--maxfail``). A
mutant becomes a task when at least one stable test fails (``FAIL_TO_PASS``), at most
``max_share`` of them do, every stable test still ran (nothing broke collection), and the
suite finished in time; ``PASS_TO_PASS`` is the stable rest. Tasks are deduplicated by
patch and by ``FAIL_TO_PASS`` set. The gold patch is the reverse of the mutation; the
problem statement is written from the failing tests' names and messages, never from the
change. Last, the gold patches are checked. Every task: each path its bug changes is one
the grader lets a fix change (else it would put the buggy file back over the fix), the
grader's canaries go in one of its test files, and its bug and gold patch, applied with
``git apply`` in a fresh workspace of the clean image, give the judged mutant and then the
image again, byte for byte. Then, graded ``gold_runs`` times as any prediction would be (a
fork of the task's state, tests restored): one task for each test module a grading puts
its canaries in, and random others up to ``gold_sample`` (every task with
``gold_sample=None``). A task whose gold patch fails is dropped, and a failed grading
sends every task of the package not graded yet through the grader.

Why that is the issue's "3 out of 3": the gold tree is the clean tree byte for byte
(checked per task), and every task of a package runs the same command and tests on it
(``FAIL_TO_PASS`` and ``PASS_TO_PASS`` split the same stable set), which passed in each of
the ``runs`` clean runs. What only a grading shows is that the grader's path (fork,
restore, channel) resolves that tree; of that path only the canaries' module depends on
the task, and each module is graded ``gold_runs`` times. Grading every gold patch costs
``gold_runs`` suite runs per task, one of them about what judging it did.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import stat
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from codegym.sandbox import Sandbox, Verdict
from codegym.sandbox.images import Image, ImageError, ImageSpec, ImageStore, build_image
from codegym.sandbox.images.changes import LowerView, file_patch
from codegym.sandbox.images.layers import walk
from codegym.tasks.swe import junit
from codegym.tasks.swe.coverage import Coverage, measure
from codegym.tasks.swe.mutate import Mutant, combine, find_mutants, sample
from codegym.tasks.swe.suite import matches, run_suite
from codegym.tasks.swe.task import SweTask

Log = Callable[[str], None]


@dataclass
class Source:
    """A package to make tasks from: its image, its suite, its files."""

    spec_path: Path
    name: str
    version: str
    image: Image
    source_digest: str
    test_cmd: list[str]
    test_globs: list[str]
    code: dict[str, str]
    """Mutable source files (not tests): path -> text."""
    tests: list[str]
    """Every file of the source that the test globs match."""


def load_source(spec_path: str | Path, store: ImageStore, log: Log | None = None) -> Source:
    """Build (or find) the image of ``spec_path`` and read its source layer."""
    spec = ImageSpec.load(Path(spec_path))
    image = build_image(spec_path, store, log)
    paths = store.layer_paths(image)
    # the source layer: the one that is neither the environment nor Debian's files
    index = next(
        i
        for i, p in enumerate(paths)
        if not (p / ".venv").exists() and not (p / ".debian").exists()
    )
    root = paths[index]
    import_path = spec.source.import_path if spec.source else "."
    code: dict[str, str] = {}
    tests: list[str] = []
    under = "" if import_path in (".", "") else import_path.rstrip("/") + "/"
    for rel, st in walk(root):
        if not stat.S_ISREG(st.st_mode) or "__pycache__" in rel.split("/"):
            continue
        if matches(rel, spec.tests.files):
            tests.append(rel)
        elif rel.endswith(".py") and rel.startswith(under):
            try:
                code[rel] = (root / rel).read_text()
            except (UnicodeDecodeError, OSError):
                continue  # not text: nothing to mutate
    pin = spec.source.pypi if spec.source and spec.source.pypi else f"{spec.name}==0"
    return Source(
        spec_path=Path(spec_path),
        name=spec.name,
        version=pin.split("==")[1],
        image=image,
        source_digest=image.layers[index],
        test_cmd=list(spec.tests.command),
        test_globs=list(spec.tests.files),
        code=code,
        tests=sorted(tests),
    )


@dataclass(frozen=True)
class Baseline:
    stable: frozenset[str]
    """Tests that passed in every clean run."""
    dropped: int
    """Tests that failed, skipped or changed outcome across the clean runs."""
    seconds: float
    """Median wall time of a clean run."""


async def baseline(sb: Sandbox, src: Source, runs: int, timeout_s: float) -> Baseline:
    """The clean suite ``runs`` times, in fresh workspaces."""
    done = await asyncio.gather(
        *(
            run_suite(sb, src.test_cmd, timeout_s=timeout_s, workspace=src.image)
            for _ in range(runs)
        )
    )
    bad = [r for r in done if r.outcome != "ok"]
    if bad:
        raise RuntimeError(
            f"{src.name}: the clean suite did not report ({bad[0].outcome}): "
            f"{bad[0].result.reason} {bad[0].result.stderr[-300:]}"
        )
    ids = set().union(*(r.statuses.keys() for r in done))
    stable = frozenset(i for i in ids if all(r.statuses.get(i) == "passed" for r in done))
    secs = statistics.median(r.result.wall_s for r in done)
    return Baseline(stable, len(ids) - len(stable), secs)


@dataclass
class Report:
    """What a synthesis run did, per package and overall."""

    tried: Counter[str] = field(default_factory=Counter)
    """Mutants judged (their suite run), per package."""
    unreached: Counter[str] = field(default_factory=Counter)
    """Mutants no stable test runs the code of (never judged), per package."""
    kept: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    failed: dict[str, str] = field(default_factory=dict)
    """Packages skipped (their image or clean suite failed): spec name -> why."""
    seconds: float = 0.0


async def judge_mutant(
    sb: Sandbox,
    src: Source,
    base: Baseline,
    mutant: Mutant,
    max_share: float,
    timeout_s: float,
    run_s: float | None = None,
    maxfail: int | None = None,
) -> SweTask | str:
    """The task ``mutant`` makes, or why it makes none. The mutant's suite gets ``run_s``
    CPU seconds (default ``timeout_s``): a bug that makes it much slower than the clean
    suite is rejected as a timeout then, not waited out; the task keeps ``timeout_s``.
    With ``maxfail`` the suite stops at that many failures: more than ``max_share`` fail."""
    files: dict[str, str | bytes] = {p: m for p, (_, m) in mutant.files.items()}
    cmd = [*src.test_cmd, f"--maxfail={maxfail}"] if maxfail else src.test_cmd
    run = await run_suite(sb, cmd, files=files, timeout_s=run_s or timeout_s, workspace=src.image)
    if run.outcome != "ok":
        return {"timeout": "times out", "broken": "breaks the suite"}.get(run.outcome, "infra")
    failed = sum(o in ("failed", "error") for o in run.statuses.values())
    if maxfail and failed >= maxfail:  # stopped early: the rest never ran
        return "fails too much"
    if base.stable - run.statuses.keys():
        return "breaks collection"
    f2p = sorted(t for t in base.stable if run.statuses.get(t) in ("failed", "error"))
    if not f2p:
        return "no test fails"
    if len(f2p) > max_share * len(base.stable):
        return "fails too much"
    gold, bug = patches(mutant)
    return SweTask(
        instance_id=f"{src.name}__{src.version}__{mutant.key}",
        repo=src.name,
        version=src.version,
        base_commit=src.source_digest,
        patch=gold,
        problem_statement=statement(src, run.xml, f2p),
        FAIL_TO_PASS=f2p,
        PASS_TO_PASS=sorted(base.stable - set(f2p)),
        image=src.image.digest,
        image_spec=src.spec_path.name,
        bug=bug,
        test_cmd=src.test_cmd,
        test_files=src.tests,
        timeout_s=timeout_s,
        created_by={
            "family": mutant.family,
            "functions": [e.function for e in mutant.edits],
            "files": [e.path for e in mutant.edits],
        },
    )


def patches(mutant: Mutant) -> tuple[str, str]:
    """The gold patch (mutant to clean) and the bug (clean to mutant), as git diffs."""
    gold = bug = ""
    for path, (original, mutated) in sorted(mutant.files.items()):
        clean, buggy = (0o100644, original.encode()), (0o100644, mutated.encode())
        gold += file_patch(path, buggy, clean)
        bug += file_patch(path, clean, buggy)
    return gold, bug


def statement(src: Source, xml: str, f2p: list[str], shown: int = 5) -> str:
    """An issue written from what the failing tests report: their ids and error messages
    (assertion lines, exception types), never the changed code."""
    lines = [
        f"Some tests of {src.name} {src.version} fail. Find the bug in the library's code "
        "(not in its tests) and fix it, so that these tests pass and every other test "
        "still passes.",
        "",
    ]
    for tid, text in junit.failures(xml, set(f2p))[:shown]:
        errs = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")][:6]
        head = text.splitlines()[0][:200] if text else ""
        lines.append(f"- {tid}")
        for e in errs or [head]:
            lines.append(f"    {e[:200]}")
    if len(f2p) > shown:
        lines.append(f"- … and {len(f2p) - shown} more failing tests")
    return "\n".join(lines)


def candidates(src: Source, n: int, seed: int, combined_share: float) -> list[Mutant]:
    """Up to ``n`` mutants of the package, unaimed: single edits, and a share of 2–3
    combined (what synthesis judges when the suite cannot be traced)."""
    singles = _singles(src)
    rng = random.Random(seed)
    picked = sample(singles, n, seed)
    n_combined = int(len(picked) * combined_share)
    for _ in range(n_combined):
        m = combine(singles, rng.choice((2, 3)), rng)
        if m is not None:
            picked[rng.randrange(len(picked))] = m
    return picked


def _singles(src: Source) -> list[Mutant]:
    singles: list[Mutant] = []
    for path in sorted(src.code):
        singles += find_mutants(path, src.code[path])
    return singles


@dataclass
class _Line:
    """The mutants whose edits the same tests reach, judged a few at a time."""

    reach: frozenset[str]
    queue: list[Mutant]
    cap: int
    tries: int = 0
    misses: int = 0

    duplicated: bool = False

    @property
    def open(self) -> bool:
        return (
            self.tries < min(self.cap, len(self.queue)) and self.misses < 2 and not self.duplicated
        )


def aim(
    singles: list[Mutant], cov: Coverage | None, stable: frozenset[str], seed: int, share: float
) -> tuple[list[_Line], int]:
    """Group ``singles`` by the stable tests that reach them (``coverage``), in a seeded
    order with the groups a bug could fail too much of last; and how many no stable test
    reaches (never judged: no test could fail). Without coverage every mutant is a group of
    its own, as sampled."""
    if cov is None:
        return [_Line(frozenset(), [m], 1) for m in sample(singles, len(singles), seed)], 0
    by_reach: dict[frozenset[str], list[Mutant]] = {}
    unreached = 0
    for m in sample(singles, len(singles), seed):  # spread over functions and families
        reach = cov.reach(m.edits[0]) & stable
        if not reach:
            unreached += 1
            continue
        by_reach.setdefault(reach, []).append(m)
    rng = random.Random(seed)
    groups = list(by_reach.items())
    rng.shuffle(groups)
    limit = share * len(stable)
    groups.sort(key=lambda g: len(g[0]) > limit)
    return [_Line(r, ms, _cap(len(r))) for r, ms in groups], unreached


def _cap(reach: int) -> int:
    """Most mutants judged of a group the same ``reach`` tests see: a bug only one test
    sees can only fail that test (a second is a duplicate); more tests, more distinct
    failing sets, but slowly (1 + log2 of the tests, at most 5)."""
    return min(5, reach.bit_length())


async def synth_package(
    sb: Sandbox,
    src: Source,
    *,
    n: int,
    seed: int,
    runs: int = 3,
    max_share: float = 0.25,
    timeout_s: float = 60.0,
    combined_share: float = 0.2,
    gold_runs: int = 3,
    gold_sample: int | None = 2,
    aimed: bool = True,
    report: Report | None = None,
    log: Log | None = None,
) -> list[SweTask]:
    """Tasks from one package (see the module docstring): at most ``n`` mutants judged,
    in waves of one per group of mutants the same tests reach (``aim``), a group set aside
    after two that make no new task; ``combined_share`` of each wave joins 2–3 bugs that
    were kept on their own. ``aimed=False`` judges sampled mutants without coverage."""
    say = log or (lambda _m: None)
    report = report if report is not None else Report()
    base = await baseline(sb, src, runs, timeout_s)
    say(f"{src.name}: {len(base.stable)} stable tests ({base.dropped} dropped), "
        f"{base.seconds:.2f} s a run")  # fmt: skip
    limit = max(timeout_s, 10 * base.seconds + 5)
    # a mutant that deadlocks or loops would hold a worker for the task's whole limit (and
    # twice that in wall time): ten times the clean suite is plenty to tell
    run_s = min(limit, 10 * base.seconds + 5)
    cov = await measure(sb, src.test_cmd, src.code, src.image, run_s) if aimed else None
    if aimed and cov is None:
        say(f"{src.name}: the suite could not be traced; judging sampled mutants")
    singles = _singles(src)
    lines, unreached = aim(singles, cov, base.stable, seed, max_share)
    report.unreached[src.name] += unreached
    maxfail = int(max_share * len(base.stable)) + 1
    rng = random.Random(seed)
    tasks: list[SweTask] = []
    made_from: list[Mutant] = []
    kept_singles: list[Mutant] = []
    seen_patch: set[str] = set()
    seen_f2p: set[frozenset[str]] = set()
    judged = waves = 0
    while judged < n:
        waves += 1
        wave: list[tuple[_Line | None, Mutant]] = []
        for line in lines:
            if line.open and len(wave) < n - judged:
                wave.append((line, line.queue[line.tries]))
                line.tries += 1
        n_comb = min(
            n - judged - len(wave), round(len(wave) * combined_share / (1 - combined_share + 1e-9))
        )
        for _ in range(n_comb if len(kept_singles) >= 3 else 0):
            m = combine(kept_singles, rng.choice((2, 3)), rng)
            if m is not None:
                wave.append((None, m))
        if not wave:
            break
        judged += len(wave)
        verdicts = await asyncio.gather(
            *(judge_mutant(sb, src, base, m, max_share, limit, run_s, maxfail) for _, m in wave)
        )
        for (group, mutant), verdict in zip(wave, verdicts, strict=True):
            report.tried[src.name] += 1
            if isinstance(verdict, SweTask):
                key = frozenset(verdict.FAIL_TO_PASS)
                digest = hashlib.sha256(verdict.patch.encode()).hexdigest()
                if digest in seen_patch or key in seen_f2p:
                    verdict = "duplicate"
                    if group is not None:  # its tests tell no more bugs apart
                        group.duplicated = True
                else:
                    seen_patch.add(digest)
                    seen_f2p.add(key)
                    tasks.append(verdict)
                    made_from.append(mutant)
                    if len(mutant.edits) == 1:
                        kept_singles.append(mutant)
            if isinstance(verdict, str):
                report.rejected[verdict] += 1
                if group is not None:
                    group.misses += 1
        say(f"{src.name}: wave {waves}: {len(wave)} judged, {len(tasks)} tasks so far")
    tasks = await _gold_checked(
        sb, src, list(zip(tasks, made_from, strict=True)), gold_runs, gold_sample, seed, report, say
    )
    report.kept[src.name] += len(tasks)
    say(f"{src.name}: kept {len(tasks)} of {report.tried[src.name]} mutants judged "
        f"({unreached} of {len(singles)} reached by no test)")  # fmt: skip
    return tasks


async def _gold_holds(sb: Sandbox, task: SweTask, runs: int) -> str:
    """Why the gold patch does not resolve the task ``runs`` times out of ``runs`` ("" when
    it does), graded as any prediction is (a fork of the task's state, tests restored). A
    grading that fails on our side is tried again, twice at most: "infra" if it still does."""
    from codegym.tasks.swe.grade import grade

    for _ in range(runs):
        for _attempt in range(3):
            g = await grade(sb, task, task.patch)
            if g.outcome != "infra":
                break
        if not g.resolved:
            return "infra" if g.outcome == "infra" else f"{g.outcome}: {g.detail[:200]}"
    return ""


async def _gold_checked(
    sb: Sandbox,
    src: Source,
    made: list[tuple[SweTask, Mutant]],
    runs: int,
    sample: int | None,
    seed: int,
    report: Report,
    say: Log,
) -> list[SweTask]:
    """The tasks whose gold patch holds (see the module docstring). Every one must
    round-trip to the clean image (``_round_trip``). Graded ``runs`` times each: one task
    for each module a grading puts its canaries in (the one per-task part of the grader's
    path), and random others up to ``sample`` (every task when None). If a graded one
    fails, it is dropped and every task not graded yet is graded."""
    trips = await asyncio.gather(*(_round_trip(sb, src, t, m) for t, m in made))
    for kind, why in trips:
        if kind:
            report.rejected[kind] += 1
            say(f"{src.name}: {why}")
    tasks = [t for (t, _), (kind, _) in zip(made, trips, strict=True) if not kind]
    if not runs or not tasks:
        return tasks
    rng = random.Random(seed)
    by_module: dict[str | None, list[SweTask]] = {}
    for t in tasks:
        by_module.setdefault(_channel_file(sb, src, t), []).append(t)
    picked = [rng.choice(group) for _, group in sorted(by_module.items(), key=str)]
    if sample is None:
        picked = tasks
    elif len(picked) < sample:
        ids = {t.instance_id for t in picked}
        others = [t for t in tasks if t.instance_id not in ids]
        picked += rng.sample(others, min(len(others), sample - len(picked)))
    ids = {t.instance_id for t in picked}
    rest = [t for t in tasks if t.instance_id not in ids]
    say(f"{src.name}: grading {len(picked)} of {len(tasks)} gold patches {runs} times "
        f"({len(by_module)} canary modules)")  # fmt: skip
    failed = await _failing(sb, picked, runs, report, say)
    if failed and rest:
        say(f"{src.name}: a sampled gold patch did not resolve; grading every other one")
        failed |= await _failing(sb, rest, runs, report, say)
    return [t for t in tasks if t.instance_id not in failed]


async def _failing(
    sb: Sandbox, tasks: list[SweTask], runs: int, report: Report, say: Log
) -> set[str]:
    """The ids of ``tasks`` whose gold patch does not hold, counted in ``report``."""
    whys = await asyncio.gather(*(_gold_holds(sb, t, runs) for t in tasks))
    for t, why in zip(tasks, whys, strict=True):
        if why:
            kind = "gold grading infra" if why == "infra" else "gold does not resolve"
            report.rejected[kind] += 1
            say(f"{t.instance_id}: {kind}: {why}")
    return {t.instance_id for t, why in zip(tasks, whys, strict=True) if why}


def _lower(sb: Sandbox, src: Source) -> LowerView:
    assert sb.images is not None  # synth opens its sandbox with the store
    return LowerView(list(reversed(sb.images.layer_paths(src.image))))


def _channel_file(sb: Sandbox, src: Source, task: SweTask) -> str | None:
    from codegym.tasks.swe.grade import channel_file

    return channel_file(task, _lower(sb, src))


async def _round_trip(sb: Sandbox, src: Source, task: SweTask, mutant: Mutant) -> tuple[str, str]:
    """Why the task's patches do not round-trip, as (the report's reason, detail); ("", "")
    when they do. Every path the bug changes must be one a fix may change (else the grader
    would put the buggy file back over the fix), the grader's canaries must go in one of the
    task's test files, and in a fresh workspace of the clean image ``git apply`` of the bug
    must give the files the mutant's suite was judged on, then ``git apply`` of the gold
    patch the image's bytes."""
    from codegym.tasks.swe.grade import STEP, channel_file, may_change

    paths = sorted(mutant.files)
    lower = _lower(sb, src)
    allowed = may_change(task, lower)
    kept_back = [p for p in paths if not allowed(p, "f", lower.lookup(p))]
    bad, iid = "gold does not restore the clean tree", task.instance_id
    if kept_back:
        return bad, f"{iid}: the grader restores {kept_back[0]}, which the bug changes"
    canaries = channel_file(task, lower)
    if canaries is not None and canaries not in task.test_files:
        return bad, f"{iid}: the grader's canaries would go in {canaries}, not a test"
    want = [hashlib.sha256(mutant.files[p][1].encode()).hexdigest() for p in paths] + [
        hashlib.sha256(lower.read(p)).hexdigest() for p in paths
    ]
    script = (
        'git apply --whitespace=nowarn .cg-bug.patch && sha256sum -- "$@" && '
        'git apply --whitespace=nowarn .cg-gold.patch && sha256sum -- "$@"'
    )
    for _attempt in range(3):  # a run that fails on our side is tried again
        r = await sb.run(
            ["sh", "-c", script, "sh", *paths],
            files={".cg-bug.patch": task.bug, ".cg-gold.patch": task.patch},
            limits=STEP,
            workspace=src.image,
        )
        if r.verdict is not Verdict.INFRA:
            break
    if r.verdict is Verdict.INFRA:
        return "gold check infra", f"{iid}: its patches could not be checked: {r.reason}"
    if r.verdict is not Verdict.OK:
        return bad, f"{iid}: its patches do not apply: {(r.stderr or r.reason)[-300:]}"
    got = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    if got != want:
        return bad, f"{iid}: its patches do not give the mutant and the clean files back"
    return "", ""


async def synth(
    specs: list[Path],
    store: ImageStore,
    *,
    per_package: int,
    workers: int,
    seed: int = 0,
    at_once: int = 2,
    log: Log | None = None,
    on_package: Callable[[list[SweTask]], None] | None = None,
    **kw: object,
) -> tuple[list[SweTask], Report]:
    """Tasks from every spec, ``at_once`` packages at a time (one package's last, slowest
    suites leave workers idle that the next one's fill), mutants in parallel. A package
    whose image or clean suite fails is reported in ``Report.failed`` and skipped.
    ``on_package`` sees the tasks so far, in spec order, after each package (so a long run
    that dies keeps what it made)."""
    report = Report()
    start = time.perf_counter()
    made: dict[int, list[SweTask]] = {}
    gate = asyncio.Semaphore(max(1, at_once))

    def so_far() -> list[SweTask]:
        return [t for i in sorted(made) for t in made[i]]

    async def one(i: int, spec: Path) -> None:
        async with gate:
            try:
                src = await asyncio.to_thread(load_source, spec, store, log)
                made[i] = await synth_package(
                    sb,
                    src,
                    n=per_package,
                    seed=seed,
                    report=report,
                    log=log,
                    **kw,  # type: ignore[arg-type]
                )
            except (RuntimeError, ImageError) as e:
                report.failed[Path(spec).name] = str(e)
                if log is not None:
                    log(f"{Path(spec).name}: skipped: {e}")
                return
            if on_package is not None:
                on_package(so_far())

    async with Sandbox(workers=workers, images=store) as sb:
        await asyncio.gather(*(one(i, spec) for i, spec in enumerate(specs)))
    report.seconds = time.perf_counter() - start
    return so_far(), report
