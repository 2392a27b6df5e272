"""Find the code to run in a model's completion, or say there is none.

``extract_code(text, task_prompt=..., style=...)`` returns a string to use as the sample's
``completion`` (``Task.program`` puts the prompt in front of it for assert-style tasks), or
None, which is the model outcome ``no_code``.

Rules, in order:

* **Fenced blocks** (```` ```python ````, ```` ```py ````, bare ```` ``` ````, ``~~~``; blocks
  in other languages such as ``bash`` or ``text`` are ignored). With an entry point (given,
  or the last ``def`` in a code prompt) the last block that defines it wins, since models
  that revise an answer put the revision last; otherwise the longest block that parses,
  else the longest block. An unclosed fence (a cut-off answer) counts up to the end.
* **Continuation** (``style="continuation"``, a code prompt): an echo of the prompt is
  stripped; if prompt + text parses, the text is returned *unchanged* (so verdicts match the
  official evaluators); otherwise the longest prefix ending before a column-0 line (prose, a
  trailing ``Explanation:``) that parses is returned; if none parses, the text is returned
  as is when it looks like code (the sandbox reports the syntax error as ``error``) and
  None when it is prose.
* **Chat answers without fences**: the whole answer if it parses as Python with real
  statements; else the code region starting at the first column-0 ``def``/``class``/
  ``import``/``from``/``@``, cut to its longest parsing prefix; else None.

Truncation (finish reason ``length``) is decided by ``outcome_for_generation`` *before*
extraction: by default a cut-off completion is the model outcome ``truncated`` and is not
run, because whether its code happens to work then depends on ``max_tokens``, not on the
model; the run records that the model did not finish. ``prepare_completion(...,
score_truncated=True)`` opts into scoring cut-off completions whose extracted code parses
(useful for base models sampled without stop sequences), keeping ``truncated`` for the rest.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

from codegym.policies.errors import PolicyConfigError
from codegym.policies.policy import Generation

Style = Literal["continuation", "chat"]

_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+#.-]*)")
_PY_LANGS = frozenset({"", "python", "py", "python3", "py3"})
_CODE_START = re.compile(r"^(?:async\s+def|def|class|import|from\s+\S+\s+import|@)\b|^@")
_CODE_LINE = re.compile(
    r"^\s*(?:return|if|elif|else|for|while|def|class|import|from|try|except|with|raise|yield"
    r"|assert|print\()\b|^\s*[A-Za-z_][\w.\[\], ]*\s*[-+*/]?=[^=]"
)
_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+([A-Za-z_]\w*)[ \t]*\(", re.M)
_SIGNAL = (
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
    ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.If, ast.Return,
    ast.With, ast.Try, ast.Call,
)  # fmt: skip


@dataclass(frozen=True)
class _Block:
    lang: str
    code: str
    closed: bool


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: NUL bytes
        return None


def _has_signal(tree: ast.AST) -> bool:
    """Real statements, not a lone name or constant (``yes`` and ``None`` parse too)."""
    return any(isinstance(node, _SIGNAL) for node in ast.walk(tree))


def _fenced_blocks(text: str) -> list[_Block]:
    lines = text.splitlines(keepends=True)
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        i += 1
        if not m:
            continue
        fence, lang = m.group(1), m.group(2).lower()
        body: list[str] = []
        closed = False
        while i < len(lines):
            stripped = lines[i].strip()
            i += 1
            if stripped.startswith(fence) and not stripped.lstrip(fence[0]):
                closed = True
                break
            body.append(lines[i - 1])
        blocks.append(_Block(lang, "".join(body), closed))
    return blocks


def _entry_point(task_prompt: str | None) -> str | None:
    names = _DEF.findall(task_prompt or "")
    return names[-1] if names else None


def _is_code_prompt(task_prompt: str | None) -> bool:
    return (
        bool(task_prompt)
        and _parse(task_prompt or "") is not None
        and bool(_DEF.search(task_prompt or ""))
    )


def _parses(code: str, prompt: str) -> bool:
    return _parse(prompt + code) is not None


def _pick_block(blocks: list[_Block], entry_point: str | None, prompt: str) -> str | None:
    py = [b.code for b in blocks if b.lang in _PY_LANGS and b.code.strip()]
    if not py:
        return None
    if entry_point:
        pat = re.compile(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(entry_point)}[ \t]*\(", re.M)
        defining = [c for c in py if pat.search(c)]
        if defining:
            return defining[-1]
    parsing = [c for c in py if _parses(c, "") or (prompt and _parses(c, prompt))]
    return max(parsing or py, key=len)


def _column0_cuts(text: str) -> list[int]:
    """Offsets of lines that start at column 0 (candidate places where code may end)."""
    cuts, pos = [], 0
    for line in text.splitlines(keepends=True):
        if pos and line[:1] not in (" ", "\t", "\n", "\r", ""):
            cuts.append(pos)
        pos += len(line)
    return cuts


def _longest_parsing_prefix(text: str, prompt: str) -> str | None:
    for cut in reversed(_column0_cuts(text)):
        prefix = text[:cut]
        tree = _parse(prompt + prefix)
        if tree is not None and prefix.strip() and _has_signal(ast.parse(_signal_source(prefix))):
            return prefix.rstrip() + "\n"  # drop the blank lines before the prose
    return None


def _signal_source(code: str) -> str:
    """Code that ``ast.parse`` accepts for the signal check, even when it is an indented body."""
    stripped = code.lstrip("\n")
    if stripped[:1] in (" ", "\t"):
        return "def _f():\n" + stripped
    return code if _parse(code) is not None else "pass"


def _looks_like_code(text: str) -> bool:
    return any(_CODE_LINE.match(line) for line in text.splitlines())


def _strip_echo(text: str, prompt: str) -> str:
    if text.startswith(prompt):
        return text[len(prompt) :]
    head = prompt.strip()
    body = text.lstrip()
    if head and body.startswith(head):
        return body[len(head) :]
    return text


def _free_code(text: str) -> str | None:
    """Code in an answer without fences: all of it, or the region from the first def/import."""
    tree = _parse(text)
    if tree is not None and _has_signal(tree):
        return text
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if _CODE_START.match(line):
            region = "".join(lines[i:])
            if (t := _parse(region)) is not None and _has_signal(t):
                return region
            return _longest_parsing_prefix(region, "")
    return None


def extract_code(
    text: str,
    *,
    task_prompt: str | None = None,
    style: Style = "continuation",
    entry_point: str | None = None,
) -> str | None:
    """The code to score from ``text``, or None (outcome ``no_code``); see the module doc.

    Args:
        text: the completion as the model wrote it.
        task_prompt: the task's prompt; a code prompt (HumanEval) is what a continuation
            continues, and names the entry point when ``entry_point`` is not given.
        style: ``"continuation"`` for completions of a code prompt, ``"chat"`` for answers.
        entry_point: the function the tests call, to pick among several fenced blocks.
    """
    if style not in ("continuation", "chat"):
        raise PolicyConfigError(f"extract_code(style={style!r}): use 'continuation' or 'chat'")
    if not text.strip():
        return None
    code_prompt = task_prompt if task_prompt and _is_code_prompt(task_prompt) else ""
    entry = entry_point or _entry_point(code_prompt)
    blocks = _fenced_blocks(text)
    if blocks:
        code = _pick_block(blocks, entry, code_prompt)
        return None if code is None else _join(code, code_prompt)
    if style == "continuation" and code_prompt:
        text = _strip_echo(text, code_prompt)
        if not text.strip():
            return None
        if _parses(text, code_prompt):
            return (
                text
                if _looks_like_code(text) or _has_signal(ast.parse(_signal_source(text)))
                else None
            )
        prefix = _longest_parsing_prefix(text, code_prompt)
        if prefix is not None:
            return prefix
        return text if _looks_like_code(text) else None
    code = _free_code(text)
    return None if code is None else _join(code, code_prompt)


def _join(code: str, code_prompt: str) -> str:
    # Task.program concatenates prompt + completion; a top-level def must start on a new line.
    if code_prompt and not code_prompt.endswith("\n") and code[:1] not in (" ", "\t", "\n"):
        return "\n" + code
    return code


def outcome_for_generation(gen: Generation) -> str | None:
    """``"truncated"`` when the generation was cut at max tokens, else None (score it)."""
    return "truncated" if gen.finish_reason == "length" else None


@dataclass(frozen=True)
class Prepared:
    """A generation made ready for scoring."""

    code: str | None
    """The completion to score; None when ``outcome`` is already decided."""
    outcome: str | None
    """``"truncated"`` or ``"no_code"`` (model outcomes, not run), or None: score ``code``."""


def prepare_completion(
    gen: Generation,
    *,
    task_prompt: str | None,
    style: Style,
    entry_point: str | None = None,
    score_truncated: bool = False,
) -> Prepared:
    """Truncation check then extraction, with the policy of the module doc."""
    truncated = outcome_for_generation(gen)
    if truncated and not score_truncated:
        return Prepared(None, truncated)
    code = extract_code(gen.text, task_prompt=task_prompt, style=style, entry_point=entry_point)
    if truncated:
        prompt = task_prompt if _is_code_prompt(task_prompt) else ""
        if code is None or not _parses(code, prompt or ""):
            return Prepared(None, truncated)
    if code is None:
        return Prepared(None, "no_code")
    return Prepared(code, None)
