"""ReplayPolicy: file order, n, lookups by prompt, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codegym.policies import Policy, PolicyError, ReplayPolicy, SamplingParams


def write(tmp_path: Path, rows: list[dict[str, object]], extra: str = "") -> Path:
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n" + extra, encoding="utf-8")
    return path


ROWS: list[dict[str, object]] = [
    {"task_id": "T/0", "completion": "a0", "prompt": "p0"},
    {"task_id": "T/1", "completion": "b0", "finish_reason": "length", "tokens_out": 9},
    {"task_id": "T/0", "completion": "a1"},
    {"task_id": "T/0", "completion": "a2", "token_ids": [1, 2], "logprobs": [-0.5, -0.1]},
]


async def test_serves_in_file_order_and_honours_n(tmp_path: Path) -> None:
    rp = ReplayPolicy(write(tmp_path, ROWS))
    assert isinstance(rp, Policy) and rp.task_ids == ["T/0", "T/1"] and rp.count("T/0") == 3
    assert [g.text for g in rp.generate_for("T/0", SamplingParams(n=2))] == ["a0", "a1"]
    (last,) = rp.generate_for("T/0", SamplingParams())
    assert last.text == "a2" and last.token_ids == (1, 2) and last.logprobs == (-0.5, -0.1)
    (b,) = rp.generate_for("T/1", SamplingParams())
    assert b.finish_reason == "length" and b.tokens_out == 9
    rp.reset()
    assert rp.remaining("T/0") == 3


async def test_too_few_samples_and_unknown_task(tmp_path: Path) -> None:
    rp = ReplayPolicy(write(tmp_path, ROWS))
    with pytest.raises(PolicyError, match="has 1 samples for 'T/1'") as e:
        rp.generate_for("T/1", SamplingParams(n=2))
    assert e.value.kind == "config"
    with pytest.raises(PolicyError, match="no samples for task 'T/9'"):
        rp.generate_for("T/9", SamplingParams())


async def test_policy_path_finds_task_by_prompt(tmp_path: Path) -> None:
    rp = ReplayPolicy(write(tmp_path, ROWS), prompts={"T/1": "def g():\n"})
    assert [g.text for g in await rp.generate("p0", SamplingParams())] == ["a0"]
    chat = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Solve:\ndef g():\n"},
    ]
    assert [g.text for g in await rp.generate(chat, SamplingParams())] == ["b0"]
    with pytest.raises(PolicyError, match="no task matches"):
        await rp.generate("unknown prompt", SamplingParams())


@pytest.mark.parametrize(
    ("extra", "match"),
    [("{not json\n", r"samples.jsonl:5: not JSON"), ('{"completion": "x"}\n', "missing 'task_id'"),
     ('{"task_id": "T/2"}\n', "missing 'completion'"), ("[1]\n", "a JSON object")],
)  # fmt: skip
def test_malformed_lines_name_the_line(tmp_path: Path, extra: str, match: str) -> None:
    with pytest.raises(PolicyError, match=match) as e:
        ReplayPolicy(write(tmp_path, ROWS, extra))
    assert e.value.kind == "config"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read samples file"):
        ReplayPolicy(tmp_path / "nope.jsonl")
