"""Code extraction on realistic completions, and the truncation policy."""

from __future__ import annotations

import pytest

from codegym.policies import Generation, extract_code, outcome_for_generation
from codegym.policies.extract import prepare_completion

PROMPT = '''from typing import List


def has_close(numbers: List[float], threshold: float) -> bool:
    """True if two numbers are closer than threshold."""
'''
BODY = "    return any(abs(a - b) < threshold for a in numbers for b in numbers if a is not b)\n"
FULL = "def has_close(numbers, threshold):\n" + BODY


def chat(text: str, **kw: str) -> str | None:
    return extract_code(text, task_prompt=PROMPT, style="chat", **kw)


def cont(text: str) -> str | None:
    return extract_code(text, task_prompt=PROMPT, style="continuation")


def test_plain_continuation_unchanged() -> None:
    assert cont(BODY) == BODY


def test_continuation_with_helper_function_unchanged() -> None:
    text = BODY + "\n\ndef helper(x):\n    return x\n"
    assert cont(text) == text


def test_continuation_echoing_the_prompt_is_stripped() -> None:
    assert cont(PROMPT + BODY) == BODY


def test_continuation_with_trailing_prose_is_cut() -> None:
    text = BODY + "\nThis works by comparing every pair of numbers.\n"
    assert cont(text) == BODY


def test_continuation_with_real_syntax_error_kept_for_the_sandbox() -> None:
    text = "    return any(abs(a - b) < threshold for a in numbers\n"
    assert cont(text) == text  # runs, and the sandbox reports the SyntaxError as "error"


def test_continuation_prose_only_is_no_code() -> None:
    assert cont("I'm sorry, I cannot help with that request.") is None


def test_empty_and_whitespace_are_no_code() -> None:
    assert cont("") is None and cont("  \n\n") is None and chat("\n") is None


def test_continuation_that_is_a_fenced_answer() -> None:
    text = f"Here you go:\n```python\n{FULL}```\n"
    assert cont(text) == FULL


def test_chat_single_python_fence() -> None:
    assert chat(f"Sure! Here is the function:\n\n```python\n{FULL}```\n\nHope it helps.") == FULL


def test_chat_py_and_bare_fences() -> None:
    assert chat(f"```py\n{FULL}```") == FULL
    assert chat(f"```\n{FULL}```") == FULL


def test_chat_picks_block_defining_entry_point_over_usage() -> None:
    usage = "print(has_close([1.0, 2.0], 0.5))\n"
    text = f"```python\n{FULL}```\nUsage:\n```python\n{usage}```\n"
    assert chat(text) == FULL


def test_chat_revised_solution_last_defining_block_wins() -> None:
    first = "def has_close(numbers, threshold):\n    return False\n"
    text = f"First try:\n```python\n{first}```\nBetter:\n```python\n{FULL}```\n"
    assert chat(text) == FULL


def test_chat_ignores_other_languages() -> None:
    text = f"Install:\n```bash\npip install numpy\n```\n```python\n{FULL}```\n```text\nTrue\n```"
    assert chat(text) == FULL


def test_chat_without_entry_point_takes_longest_parsing_block() -> None:
    prog = "n = int(input())\nprint(sum(range(n + 1)))\n"
    text = f"Read n:\n```python\nn = int(input(\n```\nFull program:\n```python\n{prog}```"
    assert extract_code(text, task_prompt="Print 1+...+n.", style="chat") == prog


def test_chat_unclosed_fence_counts_to_end() -> None:
    text = f"```python\n{FULL}"
    assert chat(text) == FULL


def test_chat_without_fences_prose_around_code() -> None:
    text = f"The idea is to compare all pairs.\n\n{FULL}\nThat is O(n^2)."
    assert chat(text) == FULL


def test_chat_bare_code_answer() -> None:
    assert chat(FULL) == FULL


def test_chat_prose_only_is_no_code() -> None:
    assert chat("You should compare each pair of numbers and check the distance.") is None
    assert chat("Yes") is None  # parses as a name, but is not code


def test_tilde_fence_and_explicit_entry_point() -> None:
    other = "def other():\n    return 1\n"
    text = f"~~~python\n{FULL}~~~\n~~~python\n{other}~~~\n"
    assert extract_code(text, style="chat", entry_point="has_close") == FULL


def test_prompt_without_trailing_newline_gets_one() -> None:
    prompt = PROMPT.rstrip("\n")
    assert extract_code(f"```python\n{FULL}```", task_prompt=prompt, style="chat") == "\n" + FULL


def test_bad_style_rejected() -> None:
    with pytest.raises(ValueError, match="style"):
        extract_code("x", style="fim")  # type: ignore[arg-type]


def gen(text: str, finish: str) -> Generation:
    return Generation(text=text, finish_reason=finish)


def test_truncated_outcome_by_finish_reason() -> None:
    assert outcome_for_generation(gen(BODY, "length")) == "truncated"
    assert outcome_for_generation(gen(BODY, "stop")) is None


def test_prepare_truncated_is_not_run_by_default() -> None:
    p = prepare_completion(gen(BODY, "length"), task_prompt=PROMPT, style="continuation")
    assert p.code is None and p.outcome == "truncated"


def test_prepare_score_truncated_runs_complete_code_only() -> None:
    done = prepare_completion(
        gen(BODY + "\ndef extra(", "length"),
        task_prompt=PROMPT,
        style="continuation",
        score_truncated=True,
    )
    assert done.code == BODY and done.outcome is None
    cut = prepare_completion(
        gen("```python\ndef has_close(numbers, thr", "length"),
        task_prompt=PROMPT,
        style="chat",
        score_truncated=True,
    )
    assert cut.outcome == "truncated"


def test_prepare_no_code() -> None:
    p = prepare_completion(gen("No idea.", "stop"), task_prompt=PROMPT, style="chat")
    assert p == type(p)(None, "no_code")
