"""Where a HumanEval sample's CPU goes, process by process (the jail tier, as root).

Scores the 164 HumanEval references × 5 with 2 workers and reports, per sample, the CPU of
each worker's zygote, of its other processes in the zygote's pid namespace (the forker
and, once an assert test ran, the judge), of the runs (the cgroup slot's ``cpuacct``), and
of this process. Per-process figures come from ``/proc/PID/stat`` (10 ms ticks, so only
totals over hundreds of samples mean anything).

    .venv/bin/python benchmarks/sandbox_split.py
"""

from __future__ import annotations

import asyncio
import os
import time

from codegym.sandbox import Sandbox
from codegym.tasks import load_humaneval, score

CLK = os.sysconf("SC_CLK_TCK")
SLOTS = "/sys/fs/cgroup/cpuacct/codegym"


def _cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                continue
    return out


def _runs_cpu() -> float:
    total = 0
    for d in os.listdir(SLOTS):
        if d.startswith(f"{os.getpid()}-"):
            with open(f"{SLOTS}/{d}/run/cpuacct.usage") as f:
                total += int(f.read())
    return total / 1e9


async def main() -> None:
    tasks = load_humaneval()
    async with Sandbox(workers=2) as sb:
        await asyncio.gather(*(score(sb, t, t.reference) for t in tasks))  # warm, judge up
        roles: dict[str, list[int]] = {"zygote": [], "forker and judge": []}
        for w in sb._workers:
            assert w.proc is not None
            level = [w.proc.pid]
            for _ in range(2):  # bwrap -> bwrap's pid 1 -> the zygote
                level = [c for p in level for c in _children(p)]
            (z,) = level
            roles["zygote"].append(z)
            ns = os.readlink(f"/proc/{z}/ns/pid")
            roles["forker and judge"] += [
                c for c in _children(z) if os.readlink(f"/proc/{c}/ns/pid") == ns
            ]
        before = {r: sum(map(_cpu, ps)) for r, ps in roles.items()}
        runs0, host0, t0 = _runs_cpu(), time.process_time(), time.perf_counter()
        scores = await asyncio.gather(*(score(sb, t, t.reference) for t in tasks for _ in range(5)))
        wall = time.perf_counter() - t0
        n = len(scores)
        print(f"{n} samples, {n / wall:.0f}/s, all passed: {all(s.passed for s in scores)}")
        for role, pids in roles.items():
            print(f"  {role:18s} {1000 * (sum(map(_cpu, pids)) - before[role]) / n:.2f} ms/sample")
        print(f"  {'runs (slots)':18s} {1000 * (_runs_cpu() - runs0) / n:.2f} ms/sample")
        print(f"  {'this process':18s} {1000 * (time.process_time() - host0) / n:.2f} ms/sample")


if __name__ == "__main__":
    asyncio.run(main())
