"""Mutants for SWE-style tasks: each family's exact edit, positions in non-ASCII lines, what
is left alone, and on real files (the standard library's) that every mutant compiles and
changes a line or two; combining, sampling and keys are deterministic."""

from __future__ import annotations

import bisect
import difflib
import hashlib
import random
import textwrap
from collections import Counter

import pytest

from codegym.tasks.swe.mutate import FAMILIES, Edit, Mutant, combine, find_mutants, sample


def mutated(source: str, family: str) -> list[str]:
    return [m.edits[0].mutated for m in find_mutants("m.py", source, [family])]


def real(module: object) -> tuple[str, str]:
    path = str(getattr(module, "__file__", ""))
    with open(path, encoding="utf-8") as f:
        return path, f.read()


def changed_lines(a: str, b: str) -> list[str]:
    diff = difflib.unified_diff(a.splitlines(), b.splitlines(), n=0, lineterm="")
    return [ln for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


# -- each family, exactly -----------------------------------------------------------------


def test_flip_comparison() -> None:
    src = "def f(a, b, c):\n    return a < b == c or a not in c or b is None\n"
    assert mutated(src, "flip_comparison") == [
        "def f(a, b, c):\n    return a <= b == c or a not in c or b is None\n",
        "def f(a, b, c):\n    return a < b != c or a not in c or b is None\n",
        "def f(a, b, c):\n    return a < b == c or a in c or b is None\n",
        "def f(a, b, c):\n    return a < b == c or a not in c or b is not None\n",
    ]


def test_off_by_one() -> None:
    src = "def f(xs):\n    for i in range(10):\n        xs[0] += xs[-1] * 2\n"
    assert mutated(src, "off_by_one") == [
        "def f(xs):\n    for i in range(9):\n        xs[0] += xs[-1] * 2\n",
        "def f(xs):\n    for i in range(10):\n        xs[1] += xs[-1] * 2\n",
        "def f(xs):\n    for i in range(10):\n        xs[0] += xs[-2] * 2\n",
        "def f(xs):\n    for i in range(10):\n        xs[0] += xs[-1] * 1\n",
    ]


def test_change_constant() -> None:
    src = "def f():\n    return g(True, 'ab', 7, n=0x10)\n"
    assert mutated(src, "change_constant") == [
        "def f():\n    return g(False, 'ab', 7, n=0x10)\n",
        "def f():\n    return g(True, '', 7, n=0x10)\n",
        "def f():\n    return g(True, 'ab', 8, n=0x10)\n",
        "def f():\n    return g(True, 'ab', 7, n=0x11)\n",
    ]


def test_drop_branch() -> None:
    src = (
        "def f(x):\n"
        "    if x > 0:\n        x = 1\n    else:\n        x = 2\n"
        "    if x:\n        x += 1\n"
        "    if x is None:\n        return 0\n"
        "    return x\n"
    )
    assert mutated(src, "drop_branch") == [
        src.replace("if x > 0:", "if True:"),
        src.replace("if x:", "if False:"),
    ]


def test_drop_return() -> None:
    src = "def f(x):\n    if x:\n        return 1\n    return x + 1\n"
    assert mutated(src, "drop_return") == [src.replace("return x + 1", "return None")]


def test_swap_arguments() -> None:
    src = "def f(a, b):\n    return pow(a, b, 3) + g(*a, b)\n"
    assert mutated(src, "swap_arguments") == [src.replace("pow(a, b, 3)", "pow(b, a, 3)")]


def test_wrong_operator() -> None:
    src = "def f(a, b, c):\n    a += (b) * c\n    return a and b or '%d' % c\n"
    assert mutated(src, "wrong_operator") == [
        src.replace("a += (b)", "a -= (b)"),
        src.replace("(b) * c", "(b) / c"),
        src.replace("a and b or", "a or b or"),
        src.replace("a and b or", "a and b and"),
    ]


def test_negate_condition() -> None:
    src = "def f(a, b):\n    while a < b:\n        a = 1 if not b else 2\n    if a:\n        pass\n"
    assert mutated(src, "negate_condition") == [
        src.replace("while a < b", "while not (a < b)"),
        src.replace("if not b", "if b"),
        src.replace("if a:", "if not a:"),
    ]


def test_operator_found_across_comments_and_lines() -> None:
    src = "def f(a, b):\n    return (a  # a < b here\n            ) < (\n        b)\n"
    assert mutated(src, "flip_comparison") == [src.replace(") < (", ") <= (")]


# -- positions, scope and what is left alone ----------------------------------------------


def test_non_ascii_text_before_the_node() -> None:
    src = 'def f(café):\n    return café == "é€😀" and len(café) < 3\n'
    assert mutated(src, "flip_comparison") == [
        src.replace("café ==", "café !="),
        src.replace("< 3", "<= 3"),
    ]
    assert mutated(src, "off_by_one") == [src.replace("< 3", "< 2")]
    (m,) = find_mutants("m.py", src, ["off_by_one"])
    assert m.edits[0].line == 2


def test_crlf_bom_and_tabs_keep_their_bytes() -> None:
    src = "\ufeffdef f(x):\r\n\tif x < 1:\r\n\t\treturn 'é' + x\r\n"
    out = mutated(src, "flip_comparison")
    assert out == [src.replace("x < 1", "x <= 1")]


def test_functions_and_methods_named_by_qualified_name() -> None:
    src = (
        "class A:\n    def m(self, x):\n        def inner():\n            return x + 1\n"
        "        return inner\n"
        "def g(x):\n    return x - 1\n"
    )
    funcs = [m.edits[0].function for m in find_mutants("m.py", src, ["wrong_operator"])]
    assert funcs == ["A.m.inner", "g"]


def test_leaves_stubs_module_code_docstrings_and_annotations_alone() -> None:
    src = (
        "X = 1 + 2\nif X > 1:\n    X = 3\n"
        'def stub():\n    """Doc."""\n    raise NotImplementedError\n'
        "def abstract(self) -> int: ...\n"
        "def f(x: int = 1) -> 'int':\n"
        '    """A docstring of 20."""\n'
        "    raise ValueError(x + 1 if x else 'bad')\n"
        "    assert x, 'message'\n"
        "    return f'{x + 1}'\n"
        'if __name__ == "__main__":\n    def main():\n        return 1 + 1\n'
    )
    # left: the default value, and dropping the return of an f-string (not its inside)
    assert [m.edits[0].description for m in find_mutants("m.py", src)] == [
        "`1` became `2` in f (line 8)",
        "`return f'{x + 1}'` became `return None` in f (line 12)",
    ]


def test_a_file_that_does_not_parse_has_no_mutants() -> None:
    assert find_mutants("m.py", "def f(:\n    return 1\n") == []


def test_unknown_family_is_refused() -> None:
    with pytest.raises(ValueError, match="drop_branch"):
        find_mutants("m.py", "def f(): return 1\n", ["drop_brnch"])


def test_nonlocal_and_async_mutants_compile() -> None:
    src = (
        "def outer(xs):\n    n = 0\n    def bump():\n        nonlocal n\n        n += 1\n"
        "    async def agen():\n        async for x in xs:\n            if (y := x) > 0:\n"
        "                yield await y\n"
        "    return bump, agen\n"
    )
    out = find_mutants("m.py", src)
    assert {m.family for m in out} >= {"wrong_operator", "flip_comparison", "negate_condition"}
    for m in out:
        compile(m.edits[0].mutated, "m.py", "exec")


# -- real files ---------------------------------------------------------------------------


@pytest.mark.parametrize("module", [textwrap, bisect], ids=["textwrap", "bisect"])
def test_every_mutant_of_a_real_file_compiles_and_changes_little(module: object) -> None:
    path, src = real(module)
    out = find_mutants(path, src)
    assert len(out) > 50
    assert {m.family for m in out} == set(FAMILIES)
    for m in out:
        (e,) = m.edits
        assert e.mutated != src and e.original == src and e.path == path and e.function
        compile(e.mutated, path, "exec")
        diff = changed_lines(src, e.mutated)
        assert 2 <= len(diff) <= 4, e.description  # at most two lines changed
        assert e.line in [
            i + 1
            for i, (a, b) in enumerate(zip(src.splitlines(), e.mutated.splitlines(), strict=True))
            if a != b
        ]
    assert find_mutants(path, src) == out


def test_mutants_come_in_source_order() -> None:
    path, src = real(textwrap)
    lines = [m.edits[0].line for m in find_mutants(path, src)]
    assert lines == sorted(lines)


def test_keys_are_unique_and_stable() -> None:
    path, src = real(textwrap)
    out = find_mutants(path, src)
    assert len({m.key for m in out}) == len(out)
    m = find_mutants("m.py", "def f(a, b):\n    return a < b\n", ["flip_comparison"])[0]
    expected = hashlib.sha256(b"m.py\0def f(a, b):\n    return a <= b\n\0").hexdigest()[:12]
    assert m.key == expected == "deaf7fd38c14"


# -- combining and sampling ---------------------------------------------------------------


def test_combine_applies_edits_in_different_functions_to_one_text() -> None:
    path, src = real(textwrap)
    singles = find_mutants(path, src)
    for seed in range(20):
        k = 2 + seed % 2
        m = combine(singles, k, random.Random(seed))
        assert m is not None and len(m.edits) == k
        assert len({e.function for e in m.edits}) == k
        assert len({e.mutated for e in m.edits}) == 1
        text = m.edits[0].mutated
        compile(text, path, "exec")
        assert 2 * k <= len(changed_lines(src, text)) <= 4 * k
        assert m.family == "+".join(e.family for e in m.edits)
    assert combine(singles, 3, random.Random(7)) == combine(singles, 3, random.Random(7))


def test_combine_keeps_files_apart_and_needs_k_functions() -> None:
    a = find_mutants("a.py", "def f(x):\n    return x < 1\n", ["flip_comparison"])
    b = find_mutants("b.py", "def g(x):\n    return x > 1\n", ["flip_comparison"])
    m = combine(a + b, 2, random.Random(0))
    assert m is not None
    assert m.files == {
        "a.py": ("def f(x):\n    return x < 1\n", "def f(x):\n    return x <= 1\n"),
        "b.py": ("def g(x):\n    return x > 1\n", "def g(x):\n    return x >= 1\n"),
    }
    assert combine(a, 2, random.Random(0)) is None
    with pytest.raises(ValueError):
        combine(a + b, 4, random.Random(0))


def test_sample_is_deterministic_and_spread() -> None:
    path, src = real(textwrap)
    out = find_mutants(path, src)
    picked = sample(out, 16, seed=3)
    assert picked == sample(out, 16, seed=3)
    assert picked != sample(out, 16, seed=4)
    assert len(picked) == 16 and len({m.key for m in picked}) == 16
    assert {m.family for m in picked[: len(FAMILIES)]} == set(FAMILIES)
    assert len({m.edits[0].function for m in picked}) >= 8
    assert len(sample(out, 10_000, seed=3)) == len(out)
    assert sample(out, 0, seed=3) == []


def test_sample_round_robin_over_buckets() -> None:
    def one(function: str, family: str, i: int) -> Mutant:
        return Mutant((Edit("m.py", "", f"{function}{family}{i}", 1, function, family, ""),))

    pool = [
        one(f, fam, i) for f in "abc" for fam in ("off_by_one", "drop_return") for i in range(5)
    ]
    picked = sample(pool, 6, seed=0)
    assert Counter((m.edits[0].function, m.family) for m in picked) == Counter(
        {(f, fam): 1 for f in "abc" for fam in ("off_by_one", "drop_return")}
    )
