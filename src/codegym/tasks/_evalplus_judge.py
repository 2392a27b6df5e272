"""EvalPlus's checker, run by the sandbox's judge (standard library only; never imported).

Its source is the trusted set-up of every EvalPlus part (``codegym.tasks.evalplus``): the
judge runs it, then the part's code calls ``__evalplus__(__judge__, spec)``. Everything
lives inside one function so that the only name it adds to the test's globals is
``__evalplus__``, which no program lookup can answer (see ``_judge``).

What it does, as evalplus 0.3.1 defines it (``evalplus.eval.unsafe_execute``,
``untrusted_check`` and ``evaluate.get_groundtruth``):

- expected outputs are the reference's (prompt + canonical solution) on deep copies of the
  inputs, each timed (wall clock up to 3 x CPU time: see ``reference``); computed once
  per judge, before the program starts, and kept
  (``__judge__.memo``);
- each input has max(1 s, 4 x the reference's time) of wall clock, and the whole part
  min(60 s, the sum of those) + 2 s, the program's import included;
- an output matches when it equals the expected one, or, under a tolerance (the task's
  ``atol``; 1e-6 once a float output has been expected, which then holds for the rest of
  the inputs, as in evalplus), when it has the same type and length and is close as
  ``numpy.allclose(out, exp, rtol=1e-07, atol=atol)`` decides;
- MBPP+'s and HumanEval+'s special oracles (set equality, "not None", the tasks whose
  right answer is not unique); HumanEval/32 (``find_zero``) by |poly(x)| <= atol, as
  evalplus means it (0.3.1 fails every program there: its oracle skips the bookkeeping).
"""


def __evalplus__():
    import contextlib
    import copy
    import io
    import json
    import math
    import signal
    import time

    min_limit, factor, task_cap, slack = 1.0, 4.0, 60.0, 2.0
    stretch = 3.0  # the most a busy machine (a neighbour's run) may stretch the reference
    reference_cap = 120.0  # a reference past this is a broken task, not a slow program
    rtol = 1e-07

    def deep_tuple(x):
        return tuple(deep_tuple(i) for i in x) if isinstance(x, list) else x

    # MBPP+ inputs that JSON cannot hold (tuples, sets, complex numbers), rebuilt as
    # evalplus's ``mbpp_deserialize_inputs`` does, by the rule its task number selects
    rebuild = {
        "args_tuple": lambda inp: [tuple(a) for a in inp],
        "args_tuples": lambda inp: [[tuple(x) for x in a] for a in inp],
        "first_tuples": lambda inp: [[tuple(x) for x in inp[0]], inp[1]],
        "second_tuple": lambda inp: [inp[0], tuple(inp[1])],
        "first_sets": lambda inp: [
            [set(x) if isinstance(x, list) and len(x) else {} for x in inp[0]]
        ],
        "float_complex": lambda inp: (float(inp[0]), complex(inp[1])),
        "first_tuple": lambda inp: [tuple(inp[0]), inp[1]],
        "args_tuple_of_tuples": lambda inp: [tuple(tuple(x) for x in a) for a in inp],
        "first_mixed_tuple": lambda inp: [
            tuple(tuple(x) if isinstance(x, list) else x for x in inp[0])
        ],
        "first_tuple_rest": lambda inp: [tuple(inp[0]), inp[1], inp[2]],
        "dict_of_tuples": lambda inp: [{k: tuple(v) for k, v in inp[0].items()}, *inp[1:]],
        "complex": lambda inp: [complex(inp[0])],
        "deep_tuple": deep_tuple,
    }

    def inputs_of(spec):
        raw = json.loads(spec["inputs"])
        rule = rebuild.get(spec["rebuild"])
        return [rule(inp) for inp in raw] if rule else raw

    class _Late(Exception):
        pass

    def _alarm(signum, frame):
        raise _Late

    def reference(spec, judge):
        """(outputs, seconds per input) of the task's reference, or the exception; the
        outputs as the program's loose results come (``__judge__.plain``).

        The seconds are wall clock, as evalplus times it, but at most ``stretch`` x the
        CPU time. The program has not started yet (it starts at the judge's first call),
        but other runs on the machine, a neighbour's busy loops, would stretch the wall
        clock and with it every budget (for later samples too, through the memo); a busy
        machine stretches the program's own time alike, which that factor allows for.
        The time an answer takes to cross from the program is added, twice, to its budget.
        """
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, reference_cap)
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                ns: dict = {}
                exec(spec["reference"], ns)
                fn = ns[spec["entry"]]
                outs, times = [], []
                for inp in inputs_of(spec):
                    inp = copy.deepcopy(inp)
                    t0, w0 = time.process_time(), time.monotonic()
                    outs.append(fn(*inp))
                    cpu, wall = time.process_time() - t0, time.monotonic() - w0
                    times.append(min(wall, stretch * cpu))
                # what crossing from the program costs the answer (not the program's time)
                # (twice, in the budget: 4 x a half)
                times = [t + judge.wire_seconds(o) / 2 for t, o in zip(times, outs, strict=True)]
                outs = [judge.plain(o) for o in outs]
        except _Late:
            return RuntimeError(f"it ran past {reference_cap:g}s")
        except BaseException as e:  # noqa: BLE001 - anything it raised: a broken task
            return e
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if spec["oracle"] == "not_none":
            outs = [o is not None for o in outs]
        return outs, times

    def is_floats(x):
        if isinstance(x, float):
            return True
        if isinstance(x, (list, tuple)) and x:
            return all(isinstance(i, float) for i in x)
        return False

    def flat(x, depth=0):
        """(shape, numbers) of a nested list/tuple of numbers, as numpy would see it."""
        if type(x) in (bool, int, float, complex):
            return (), [x]
        if depth > 64 or not isinstance(x, (list, tuple)):
            raise TypeError(f"{type(x).__name__} is not numeric")
        shapes, values = set(), []
        for item in x:
            shape, vals = flat(item, depth + 1)
            shapes.add(shape)
            values.extend(vals)
        if len(shapes) > 1:
            raise ValueError("ragged")
        return (len(x), *(shapes.pop() if shapes else ())), values

    def close(a, b, atol):
        if a == b:  # equal infinities included
            return True
        try:
            if math.isinf(abs(a)) or math.isinf(abs(b)) or a != a or b != b:
                return False
        except OverflowError:
            return False
        return abs(a - b) <= atol + rtol * abs(b)

    def allclose(out, exp, atol):
        try:
            (so, vo), (se, ve) = flat(out), flat(exp)
        except (TypeError, ValueError):
            return False  # numpy raises on these: evalplus fails the input
        if so != se:
            if so == ():
                vo = vo * len(ve)
            elif se == ():
                ve = ve * len(vo)
            else:
                return False  # other broadcasts: see docs/evalplus.md
        return all(close(a, b, atol) for a, b in zip(vo, ve, strict=True))

    def poly(xs, x):
        return sum(c * math.pow(x, i) for i, c in enumerate(xs))

    def surface_area(base_edge, height):
        slant = math.sqrt((base_edge / 2) ** 2 + height**2)
        return round(base_edge**2 + 4 * (base_edge * slant) / 2)

    def digit_distance(a, b):
        x, y = str(a), str(b)
        n = max(len(x), len(y))
        return sum(abs(int(p) - int(q)) for p, q in zip(x.zfill(n), y.zfill(n), strict=True))

    def run(judge, spec):
        part, oracle = spec["part"], spec["oracle"]
        inputs = inputs_of(spec)
        got = judge.memo(spec["key"], lambda: reference(spec, judge))
        if isinstance(got, BaseException):
            raise judge.task_fault(f"its reference solution raised {type(got).__name__}: {got}")
        expected, ref_times = got
        limits = [max(min_limit, factor * t) for t in ref_times]
        budget = min(task_cap, sum(limits)) + slack
        start = time.monotonic()
        judge.deadline(budget)
        try:
            fn = judge.loose(judge.program(spec["entry"]))
        except KeyError:
            raise NameError(f"the program defines no {spec['entry']!r}") from None
        atol = spec["atol"]
        for i, inp in enumerate(inputs):
            left = budget - (time.monotonic() - start)
            judge.deadline(min(limits[i], left))
            # a copy: what the program does to its arguments comes back into them, and
            # the oracles below read the inputs (find_zero's poly of zeroed coefficients)
            out = fn(*copy.deepcopy(inp))
            judge.deadline(None)
            exp = expected[i]
            if oracle == "poly_root":
                if not abs(poly(*inp, out)) <= atol:
                    raise AssertionError(f"{part} input {i}: {judge.show(out)} is no root")
                continue
            same = out == exp
            if oracle == "any":
                same = True
            elif oracle == "sum_div":
                same = same or out == 0
            elif oracle == "surface_area":
                same = same or abs(out - surface_area(*inp)) <= atol
            elif oracle == "digit_distance":
                same = same or out == digit_distance(*inp)
            elif oracle == "set_eq":
                same = set(out) == set(exp)
            elif oracle == "not_none":
                same = out == exp if isinstance(out, bool) else exp == (out is not None)
            if atol == 0 and is_floats(exp):
                atol = 1e-6  # and so for the inputs after this one, as in evalplus
            if not same and atol != 0:
                same = (
                    type(out) is type(exp)
                    and (not isinstance(exp, (list, tuple)) or len(out) == len(exp))
                    and allclose(out, exp, atol)
                )
            if not same:
                raise AssertionError(
                    f"{part} input {i}: expected {judge.show(exp)}, got {judge.show(out)}"
                    + (f" (atol {atol:g})" if atol else "")
                )

    return run


__evalplus__ = __evalplus__()
