"""Seeded synthetic task families: the curriculum the RL demo trains and evaluates on.

Every task asks for a small function ``f(x)`` whose body is a chain of primitive ops
(``_ops.OPS``), one line each, ``x = <expr>``, ending in ``return x``:

- ``infer``: the prompt shows three input/output examples; the model writes the body.
  Difficulty ``d`` is the number of ops in the chain.
- ``bugfix``: the prompt shows ``g``, a chain of ``d`` ops with one planted bug (wrong
  operator, off-by-one, swapped arguments), then ``f``'s docstring with examples of the
  correct behaviour; the model writes the fixed body.

Contract:

- ``generate(family, n, seed, difficulty)`` is a pure function: the same arguments give the
  same tasks (same ids, same digests) on any machine and any ``PYTHONHASHSEED``; task ``i``
  depends only on ``(family, difficulty, seed, i)``, so ``n`` only extends the list.
- Ids read ``synthetic/{family}/d{difficulty}/s{seed}/{i}``; ``cluster`` is the family and
  op chain (tasks sharing a template are correlated); ``metadata`` names the ops.
- Each op in a chain matters: dropping any one changes some output, so difficulty ``d``
  really needs ``d`` steps. ``check`` holds the three shown examples plus five unseen
  inputs. For ``bugfix`` the bug changes at least one shown and one unseen output.
- Seed split: seeds ``>= PRETRAIN_SEED_BASE`` are reserved for the tiny model's pretraining
  corpus; RL training and held-out evaluation use seeds below it (the demo's convention:
  ``HELDOUT_SEED`` for evaluation, any other small seed for training).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Final

from codegym.tasks.synthetic._ops import Step, draw_input, draw_step, start_kind
from codegym.tasks.task import Task, TaskError

GENERATOR_VERSION: Final = "1"
"""Bumped whenever generated tasks change; part of every seed stream and the model cache key."""
FAMILIES: Final = ("infer", "bugfix")
MAX_DIFFICULTY: Final = 4
PRETRAIN_SEED_BASE: Final = 1_000_000
"""Seeds at or above this feed the pretraining corpus only."""
HELDOUT_SEED: Final = 0
"""The seed the demo evaluates base vs trained on."""

_SHOWN = 3
_UNSEEN = 5
_MAX_TRIES = 500
_ENTRY = "f"


def generate(family: str, n: int, seed: int, difficulty: int = 1) -> list[Task]:
    """``n`` tasks of ``family`` at ``difficulty`` from ``seed`` (deterministic).

    Raises:
        TaskError: unknown family, negative ``n`` or ``seed``, difficulty outside
            ``1..MAX_DIFFICULTY``.
    """
    if family not in FAMILIES:
        raise TaskError(f"unknown synthetic family {family!r}: choose one of {', '.join(FAMILIES)}")
    if not isinstance(n, int) or n < 0:
        raise TaskError(f"n={n!r}: the number of tasks must be an int >= 0")
    if not isinstance(seed, int) or seed < 0:
        raise TaskError(f"seed={seed!r}: seeds are ints >= 0")
    if not isinstance(difficulty, int) or not 1 <= difficulty <= MAX_DIFFICULTY:
        raise TaskError(f"difficulty={difficulty!r}: choose an int from 1 to {MAX_DIFFICULTY}")
    build = _infer if family == "infer" else _bugfix
    return [build(_rng(family, difficulty, seed, i), difficulty, seed, i) for i in range(n)]


def _rng(family: str, difficulty: int, seed: int, index: int) -> random.Random:
    # A str seed is hashed with sha512 by random, independent of PYTHONHASHSEED.
    return random.Random(f"codegym/{GENERATOR_VERSION}/{family}/{difficulty}/{seed}/{index}")


def _body(steps: Sequence[Step], codes: Sequence[str | None] | None = None) -> str:
    codes = codes or [None] * len(steps)
    lines = [f"    x = {s.render(c)}\n" for s, c in zip(steps, codes, strict=True)]
    return "".join(lines) + "    return x\n"


def _compile(body: str) -> Callable[[object], object]:
    # Our own generated code, not model output: evaluating it in-process is safe.
    scope: dict[str, object] = {}
    exec(compile(f"def {_ENTRY}(x):\n{body}", "<synthetic>", "exec"), scope)
    fn = scope[_ENTRY]
    assert callable(fn)
    return fn


_RAISED = object()


def _outputs(body: str, inputs: Sequence[object]) -> list[object]:
    fn = _compile(body)
    out: list[object] = []
    for value in inputs:
        try:
            # Copy lists: a chain never mutates, but the inputs must stay pristine regardless.
            out.append(fn(list(value) if isinstance(value, list) else value))
        except Exception:  # noqa: BLE001 - any failure marks the variant as different
            out.append(_RAISED)
    return out


def _chain(rng: random.Random, difficulty: int) -> tuple[list[Step], list[object]] | None:
    """A chain of ``difficulty`` steps, every one needed, and its distinct inputs."""
    kind = start_kind(rng)
    steps = []
    for _ in range(difficulty):
        step = draw_step(rng, kind)
        steps.append(step)
        kind = step.op.tout
    start = steps[0].op.tin
    inputs: list[object] = []
    seen: set[str] = set()
    for _ in range(50):
        value = draw_input(rng, start)
        if repr(value) not in seen:
            seen.add(repr(value))
            inputs.append(value)
        if len(inputs) == _SHOWN + _UNSEEN:
            break
    else:
        return None
    want = _outputs(_body(steps), inputs)
    if _RAISED in want or len({repr(o) for o in want[:_SHOWN]}) < 2:
        return None  # a constant on the shown examples teaches nothing
    for i in range(len(steps)):
        shorter = steps[:i] + steps[i + 1 :]
        got = _outputs(_body(shorter), inputs) if shorter else list(inputs)
        if got == want:
            return None  # step i is redundant on every input: the chain is easier than d
    return steps, inputs


def _docstring(title: str, inputs: Sequence[object], outputs: Sequence[object]) -> str:
    shown = "".join(f"    {_ENTRY}({i!r}) == {o!r}\n" for i, o in zip(inputs, outputs, strict=True))
    return f'def {_ENTRY}(x):\n    """{title}\n{shown}    """\n'


def _check(inputs: Sequence[object], outputs: Sequence[object]) -> str:
    lines = "".join(
        f"    assert candidate({i!r}) == {o!r}\n" for i, o in zip(inputs, outputs, strict=True)
    )
    return f"def check(candidate):\n{lines}"


def _task(
    family: str,
    difficulty: int,
    seed: int,
    index: int,
    prompt: str,
    steps: Sequence[Step],
    inputs: Sequence[object],
    outputs: Sequence[object],
    extra: dict[str, str],
) -> Task:
    chain = "+".join(s.label for s in steps)
    return Task(
        id=f"synthetic/{family}/d{difficulty}/s{seed}/{index}",
        prompt=prompt,
        entry_point=_ENTRY,
        test=_check(inputs, outputs),
        reference=_body(steps),
        cluster=f"{family}/{chain}",
        metadata={"family": family, "difficulty": str(difficulty), "ops": chain, **extra},
    )


def _infer(rng: random.Random, difficulty: int, seed: int, index: int) -> Task:
    for _ in range(_MAX_TRIES):
        drawn = _chain(rng, difficulty)
        if drawn is None:
            continue
        steps, inputs = drawn
        outputs = _outputs(_body(steps), inputs)
        prompt = _docstring("Examples:", inputs[:_SHOWN], outputs[:_SHOWN])
        return _task("infer", difficulty, seed, index, prompt, steps, inputs, outputs, {})
    raise RuntimeError(f"infer d={difficulty} seed={seed} #{index}: no valid chain found")


def _bugfix(rng: random.Random, difficulty: int, seed: int, index: int) -> Task:
    for _ in range(_MAX_TRIES):
        drawn = _chain(rng, difficulty)
        if drawn is None:
            continue
        steps, inputs = drawn
        sites = [(i, bug) for i, s in enumerate(steps) for bug in s.op.bugs]
        rng.shuffle(sites)
        outputs = _outputs(_body(steps), inputs)
        for site, bug in sites:
            codes: list[str | None] = [None] * len(steps)
            codes[site] = bug
            buggy = _body(steps, codes)
            wrong = _outputs(buggy, inputs)
            differs = [w != o for w, o in zip(wrong, outputs, strict=True)]
            if any(differs[:_SHOWN]) and any(differs[_SHOWN:]):
                prompt = f"def g(x):\n{buggy}\n\n" + _docstring(
                    "Fix the bug in g.", inputs[:_SHOWN], outputs[:_SHOWN]
                )
                extra = {"bug_line": str(site), "buggy": buggy}
                return _task(
                    "bugfix", difficulty, seed, index, prompt, steps, inputs, outputs, extra
                )
    raise RuntimeError(f"bugfix d={difficulty} seed={seed} #{index}: no valid bug found")
