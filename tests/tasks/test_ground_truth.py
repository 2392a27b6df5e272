"""Ground truth: references run in the real sandbox; broken and flaky ones are quarantined."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import pytest

from codegym.sandbox import ExecResult, Limits, Sandbox, Verdict
from codegym.tasks import IOCase, Task, TaskSet, load_humaneval, verify
from codegym.tasks.ground_truth import sized_limits


def _task(task_id: str, reference: str, test: str = "") -> Task:
    return Task(
        id=task_id,
        prompt="def f(x):\n",
        entry_point="f",
        test=test or "def check(candidate):\n    assert candidate(2) == 4\n",
        reference=reference,
    )


GOOD = _task("good", "    return x * 2\n")
WRONG = _task("wrong", "    return x + 3\n")
RAISES = _task("raises", "    raise RuntimeError('reference bug')\n")
# A coin flip per run: with 20 runs, all-same has probability 2 / 2**20.
FLAKY = _task("flaky", "    import random\n    return x * 2 if random.random() < 0.5 else 0\n")
SPINS = _task("spins", "    while True:\n        pass\n")
NO_REF = _task("no_ref", "")
IO_GOOD = Task(
    id="io_good",
    prompt="Print the sum of two integers.",
    io_cases=(IOCase("1 2\n", "3\n"), IOCase("5 5\n", "10\n")),
    reference="print(sum(map(int, input().split())))\n",
)


async def test_sound_references_are_kept_with_measured_limits(sandbox: Sandbox) -> None:
    base = Limits(cpu_s=2.0, wall_s=8.0, memory_mb=256, output_bytes=4096)
    src = TaskSet("mini", (GOOD, IO_GOOD), sha256="ab" * 32, source="mini.jsonl")
    report = await verify(sandbox, src, repeats=3, floor_cpu_s=0.5, factor=4.0, base_limits=base)
    assert report.quarantined == () and report.kept.ids == ("good", "io_good")
    assert report.kept.name == "mini" and report.kept.sha256 == "ab" * 32
    for task in report.kept:
        lim = task.limits
        assert lim is not None
        # rounded up to whole seconds (RLIMIT_CPU granularity; keeps task digests stable)
        assert lim.cpu_s == math.ceil(max(0.5, 4.0 * report.ref_cpu_s[task.id]))
        assert (lim.memory_mb, lim.output_bytes, lim.wall_s) == (256, 4096, 8.0)
    assert report.runs == 6 and report.infra_retries == 0
    # limits are part of the digest: a verified task is a different task for the store
    assert report.kept.get("good").digest() != GOOD.digest()


async def test_broken_and_flaky_references_are_quarantined_with_reasons(
    sandbox: Sandbox,
) -> None:
    report = await verify(
        sandbox,
        [GOOD, WRONG, RAISES, FLAKY, NO_REF],
        repeats=20,
    )
    assert report.kept.ids == ("good",)
    why = {q.id: q for q in report.quarantined}
    assert [q.id for q in report.quarantined] == ["wrong", "raises", "flaky", "no_ref"]
    assert why["wrong"].kind == "fails" and why["wrong"].reason.startswith("reference fail:")
    assert "AssertionError" in why["wrong"].reason
    assert why["raises"].kind == "fails" and "RuntimeError: reference bug" in why["raises"].reason
    assert why["flaky"].kind == "flaky" and "pass" in why["flaky"].outcomes
    assert "fail" in why["flaky"].outcomes and "runs; a failing run: fail" in why["flaky"].reason
    assert why["no_ref"].kind == "no_reference" and why["no_ref"].outcomes == ()
    assert len(why["wrong"].outcomes) == 20
    summary = report.summary()
    assert summary["kept"] == 1 and summary["by_kind"] == {
        "fails": 2,
        "flaky": 1,
        "no_reference": 1,
    }


async def test_reference_over_its_limit_is_quarantined_as_timeout(sandbox: Sandbox) -> None:
    # Few runs: each spins until a limit stops it (a second or so on a loaded host).
    report = await verify(sandbox, [SPINS], repeats=2, base_limits=Limits(cpu_s=0.5, wall_s=1.0))
    (q,) = report.quarantined
    assert q.kind == "fails" and q.reason.startswith("reference timeout")
    assert q.outcomes == ("timeout", "timeout")


class _InfraFirst(Sandbox):
    """The real jail sandbox, except that the first ``fail_first`` batch calls report infra."""

    def __init__(self, fail_first: int) -> None:
        super().__init__(tier="jail", workers=2)
        self.fail_first = fail_first

    async def run_tests(self, code: Any, tests: Sequence[Any], **kw: Any) -> ExecResult:
        if self.fail_first > 0:
            self.fail_first -= 1
            return ExecResult(Verdict.INFRA, None, None, "", "", 0.0, 0.0, reason="worker died")
        return await super().run_tests(code, tests, **kw)


async def test_sandbox_infra_is_retried_not_blamed_on_the_reference() -> None:
    async with _InfraFirst(fail_first=2) as sb:
        report = await verify(sb, [GOOD], repeats=1, infra_retries=2, concurrency=1)
    assert report.kept.ids == ("good",) and report.infra_retries == 2 and report.runs == 3


async def test_persistent_infra_sets_the_task_aside_as_infra() -> None:
    async with _InfraFirst(fail_first=100) as sb:
        report = await verify(sb, [GOOD], repeats=2, infra_retries=1)
    (q,) = report.quarantined
    assert q.kind == "infra" and "worker died" in q.reason and q.outcomes == ("infra", "infra")
    assert report.runs == 4 and len(report.kept) == 0


def test_sized_limits_floor_factor_and_wall() -> None:
    base = Limits(cpu_s=3.0, wall_s=10.0, memory_mb=300)
    assert sized_limits(base, 0.01, 1.0, 5.0).cpu_s == 1.0  # the floor
    big = sized_limits(base, 2.0, 1.0, 5.0)
    assert big.cpu_s == 10.0 and big.wall_s == Limits(cpu_s=10.0).wall and big.memory_mb == 300
    assert sized_limits(Limits(cpu_s=1.0), 0.5, 1.0, 5.0).wall_s is None  # auto backstop kept
    assert sized_limits(base, 10_000.0, 1.0, 5.0).cpu_s == 3600.0


async def test_bad_arguments_are_refused(sandbox: Sandbox) -> None:
    with pytest.raises(ValueError, match="repeats >= 1"):
        await verify(sandbox, [GOOD], repeats=0)


async def test_every_humaneval_reference_is_sound(sandbox: Sandbox) -> None:
    tasks = load_humaneval()
    start = time.perf_counter()
    report = await verify(sandbox, tasks, repeats=3)
    elapsed = time.perf_counter() - start
    assert report.quarantined == (), report.summary()["quarantined"]
    assert len(report.kept) == 164 and report.runs == 492
    assert report.kept.sha256 == tasks.sha256
    assert all(t.limits is not None and t.limits.cpu_s >= 1.0 for t in report.kept)
    print(f"\nverify(HumanEval, repeats=3): {elapsed:.2f} s, {report.runs / elapsed:.0f} runs/s")
