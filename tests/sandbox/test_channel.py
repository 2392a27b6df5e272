"""The signed result channel and the verdict rules that distrust the program (pure, no I/O).

The hostile end-to-end versions live in ``test_hostile_state.py`` (``test_forge_*``); these pin
the verification itself: a line counts only with the run's key, over its exact payload.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from codegym.sandbox import _harness
from codegym.sandbox._verdict import FORGED_DETAIL, judge
from codegym.sandbox.limits import Limits
from codegym.sandbox.result import Verdict

LIMITS = Limits(cpu_s=1, wall_s=3)


def _channel() -> tuple[_harness.Channel, bytes]:
    key = os.urandom(16)
    return _harness.Channel([key]), key


def test_the_channel_takes_the_key_out_of_the_list_it_was_handed() -> None:
    secret = [os.urandom(16)]
    _harness.Channel(secret)
    assert secret == []


def test_signed_lines_verify_and_keep_their_order() -> None:
    ch, key = _channel()
    raw = ch.sign(b"one") + ch.sign(b"two")
    assert _harness.verified(raw, key) == ([b"one", b"two"], False)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda line: line.replace(b"false", b"true "),  # payload changed
        lambda line: b"0" * 32 + line[32:],  # tag guessed
        lambda line: line[33:],  # tag dropped
    ],
    ids=["payload", "tag", "untagged"],
)
def test_a_tampered_line_is_dropped_and_flagged(tamper) -> None:  # type: ignore[no-untyped-def]
    ch, key = _channel()
    line = ch.sign(b'{"i": 0, "passed": false}')
    assert _harness.verified(tamper(line), key) == ([], True)


def test_another_runs_key_does_not_verify() -> None:
    ch, _ = _channel()
    assert _harness.verified(ch.sign(b"x"), os.urandom(16)) == ([], True)


def test_junk_around_a_genuine_line_is_flagged_but_does_not_hide_it() -> None:
    ch, key = _channel()
    raw = b"S24" + ch.sign(b"real") + b"trailing junk"
    assert _harness.verified(raw, key) == ([b"real"], True)


def test_a_wiped_channel_signs_nothing_valid() -> None:
    ch, key = _channel()
    ch.wipe()
    assert _harness.verified(ch.sign(b"x"), key) == ([], True)


def test_parse_results_returns_the_genuine_results() -> None:
    ch, key = _channel()
    result = {"i": 0, "passed": True, "verdict": "ok", "detail": ""}
    raw = ch.sign(json.dumps(result).encode())
    assert _harness.parse_results(raw, key) == ([result], False)
    forged = b'{"i": 1, "passed": true}\n'
    assert _harness.parse_results(raw + forged, key) == ([result], True)


def test_only_a_signed_death_mark_names_a_signal() -> None:
    ch, key = _channel()
    assert _harness.death_signal(b"S24", key) is None
    assert _harness.death_signal(b"0" * 32 + b" S24\n", key) is None
    assert _harness.death_signal(b"S24" + ch.sign(b"S15"), key) == 15
    assert _harness.death_signal(ch.sign(b"not a mark"), key) is None


def _reply(**kw: object) -> dict[str, object]:
    return {"reported": True, "ready": True, "wall_s": 0.01, "cpu_s": 0.01, **kw}


def test_sigxcpu_without_the_cpu_time_is_killed_not_timeout() -> None:
    r = judge(_reply(exit_code=-signal.SIGXCPU), b"", b"", LIMITS, None)
    assert (r.verdict, r.signal) == (Verdict.KILLED, "SIGXCPU")


def test_sigxcpu_with_the_cpu_time_is_a_timeout() -> None:
    for cpu in (0.84, 1.0):  # the kernel's clock fires the rlimit ahead of rusage's
        r = judge(_reply(exit_code=-signal.SIGXCPU, cpu_s=cpu), b"", b"", LIMITS, None)
        assert r.verdict == Verdict.TIMEOUT


def test_a_forged_batch_fails_every_test_as_the_programs_fault() -> None:
    passed = {"passed": True, "verdict": "ok", "detail": ""}
    tests = [{"i": 0, **passed}, {"i": 1, **passed}]
    clean = judge(_reply(exit_code=0, tests=tests, forged=False), b"", b"", LIMITS, None, 2)
    assert [t.passed for t in clean.tests] == [True, True]
    for reply in (
        _reply(exit_code=0, tests=tests, forged=True),  # junk on the zygote's channel
        _reply(exit_code=0, tests=[tests[0], {**tests[1], "forged": True}]),  # in a fork
    ):
        r = judge(reply, b"", b"", LIMITS, None, 2)
        assert [(t.passed, t.verdict, t.detail) for t in r.tests] == [
            (False, Verdict.ERROR, FORGED_DETAIL)
        ] * 2
