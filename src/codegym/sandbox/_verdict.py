"""Turn what the zygote and the cgroup observed into a verdict (pure, no I/O).

What the program itself could have written is not taken at its word: a SIGXCPU death
counts as a timeout only with CPU time to show for it (at least half the limit), and a
batch whose result channel carried anything the harness did not sign
(``reply["forged"]``, or a test the harness saw forged) fails every test, as the
program's fault.
"""

from __future__ import annotations

import signal as _signal
from typing import Any

from codegym.sandbox import _harness
from codegym.sandbox._cgroups import Stats
from codegym.sandbox.limits import Limits
from codegym.sandbox.result import ExecResult, TestResult, Verdict

HARNESS_EXIT = 125  # the harness could not set the program up
# A genuine SIGXCPU lands at RLIMIT_CPU (whole seconds >= cpu_s) by the kernel's
# tick-sampled CPU clock, which on a busy VM runs ahead of what rusage and the cgroup
# report: genuine ones measured 0.84-0.99 of a 1 s limit here. A self-sent one at a
# fraction of that is the program's own doing. One value, the harness's (the jail's side
# judges stdio cases and assert tests with it; this side, plain runs).
XCPU_MIN_FRACTION = _harness.XCPU_MIN_FRACTION
FORGED_DETAIL = "forged: the program wrote to the harness's result channel"


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _signame(num: int) -> str:
    try:
        return _signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def judge(
    reply: dict[str, Any],
    out: bytes,
    err: bytes,
    limits: Limits,
    stats: Stats | None,
    batch_size: int = 0,
) -> ExecResult:
    """Decide the verdict of one execution.

    ``batch_size`` > 0 means per-test limits were enforced inside; the run as a whole
    is then only judged for crashes of the harness, the total deadline and output.
    """
    code = reply.get("exit_code")
    sig = -code if isinstance(code, int) and code < 0 else None
    exit_code = code if isinstance(code, int) and code >= 0 else None
    cpu = stats.cpu_s if stats and stats.cpu_s is not None else reply.get("cpu_s") or 0.0
    peak = stats.peak_bytes / (1 << 20) if stats and stats.peak_bytes else None
    if peak is None and reply.get("maxrss_kb"):
        peak = reply["maxrss_kb"] / 1024
    oom = bool(stats and stats.oom_kills > 0)
    stderr = _decode(err)
    cpu_cap = limits.cpu_s * max(1, batch_size)

    reason = ""
    verdict: Verdict
    if reply.get("setup_error"):
        # an upload the caller asked for could not be written (a bad name for this file
        # system, a full disk, a folder a session's program replaced): theirs, not ours
        verdict, reason = Verdict.ERROR, str(reply["setup_error"])[:1000]
    elif reply.get("timed_out"):
        verdict, reason = (
            Verdict.TIMEOUT,
            f"wall-clock limit of {reply.get('deadline_s', limits.wall):.3g}s",
        )
    elif reply.get("overflow"):
        verdict, reason = Verdict.OUTPUT_LIMIT, f"wrote more than {limits.output_bytes} bytes"
    elif oom:
        verdict, reason = Verdict.MEMORY, f"exceeded {limits.memory_mb} MB"
    elif not reply.get("reported") or not reply.get("ready"):
        if not reply.get("reported"):
            verdict, reason = Verdict.INFRA, "the run's init process died without a report"
        else:
            verdict, reason = Verdict.INFRA, f"harness set-up failed: {stderr.strip()[-300:]}"
    elif (sig == _signal.SIGXCPU and cpu >= XCPU_MIN_FRACTION * limits.cpu_s) or cpu > cpu_cap:
        verdict, reason = Verdict.TIMEOUT, f"CPU limit of {limits.cpu_s:g}s"
    elif sig == _signal.SIGKILL and peak is not None and peak >= 0.9 * limits.memory_mb:
        verdict, reason = Verdict.MEMORY, f"exceeded {limits.memory_mb} MB"
    elif sig is not None:
        verdict, reason = Verdict.KILLED, f"killed by {_signame(sig)}"
    elif exit_code == 0:
        verdict = Verdict.OK
    elif exit_code == 1 and stderr.rstrip().endswith("MemoryError"):
        verdict, reason = Verdict.MEMORY, "MemoryError"
    else:
        verdict, reason = Verdict.ERROR, f"exit code {exit_code}"

    tests: tuple[TestResult, ...] = ()
    if batch_size:
        raw = reply.get("tests") or []
        if reply.get("forged") or any(isinstance(r, dict) and r.get("forged") for r in raw):
            tests = tuple(
                TestResult(i, False, Verdict.ERROR, FORGED_DETAIL) for i in range(batch_size)
            )
        else:
            tests = _tests(raw, batch_size, verdict, reason)
    return ExecResult(
        verdict=verdict,
        exit_code=exit_code,
        signal=_signame(sig) if sig is not None else None,
        stdout=_decode(out),
        stderr=stderr,
        cpu_s=round(float(cpu), 6),
        wall_s=round(float(reply.get("wall_s") or 0.0), 6),
        peak_memory_mb=round(peak, 2) if peak is not None else None,
        truncated=bool(reply.get("overflow")),
        reason=reason,
        tests=tests,
    )


def _tests(
    raw: list[dict[str, Any]], n: int, verdict: Verdict, reason: str
) -> tuple[TestResult, ...]:
    by_index = {r.get("i"): r for r in raw if isinstance(r, dict)}
    out = []
    for i in range(n):
        r = by_index.get(i)
        if r is not None and r.get("cpu_s") is None and verdict != Verdict.OK:
            r = None  # ran in-process: the run's fate (a CPU overrun, say) is the test's
        if r is None:
            # the batch ended before this test reported: it inherits the batch's fate
            fate = Verdict.ERROR if verdict == Verdict.OK else verdict
            out.append(
                TestResult(i, False, fate, f"not completed: {reason or 'the program exited'}")
            )
            continue
        try:
            v = Verdict(str(r.get("verdict")))
        except ValueError:
            v = Verdict.INFRA
        out.append(
            TestResult(
                i,
                bool(r.get("passed")) and v is Verdict.OK,
                v,
                str(r.get("detail", ""))[:1000],
                r.get("cpu_s"),
                r.get("wall_s"),
            )
        )
    return tuple(out)
