"""What the adversarial tests share: limits, and the check that the pool took no harm."""

from __future__ import annotations

import asyncio

from codegym.sandbox import AssertTest, ExecResult, Limits, Sandbox, TestResult, Verdict

LIMITS = Limits(cpu_s=1, wall_s=4, memory_mb=256, output_bytes=1 << 16)
MODEL = {v for v in Verdict if v is not Verdict.INFRA}


class Clean:
    """Snapshot the pool's failure counters now; ``await`` it later to check them."""

    def __init__(self, sb: Sandbox) -> None:
        self.sb = sb
        self.infra = sb.infra_count
        self.recycles = sb.recycles

    async def __call__(self) -> None:
        sb = self.sb
        runs = await asyncio.gather(*(sb.run_python("print(6 * 7)") for _ in range(sb.size)))
        assert [(r.verdict, r.stdout) for r in runs] == [(Verdict.OK, "42\n")] * sb.size
        probe = await sb.run_tests("def f(x): return x + 1\n", [AssertTest("assert f(1) == 2")])
        assert probe.passed, probe.tests
        assert (sb.infra_count, sb.recycles) == (self.infra, self.recycles), (
            "the program cost the pool an infra failure or a worker restart"
        )


def failed_as_model(result: ExecResult) -> list[TestResult]:
    """Every test failed, each with a model verdict; returns them for further checks."""
    assert result.verdict is not Verdict.INFRA, result.reason
    assert result.tests, result
    for t in result.tests:
        assert not t.passed, t
        assert t.verdict in MODEL, t
    return list(result.tests)
