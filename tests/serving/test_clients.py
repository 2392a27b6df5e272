"""serve-model as the tools people already use see it: inspect_ai (both OpenAI providers,
with a tool) and lm-eval (a likelihood task on a local task file), real clients on
loopback against the real server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from codegym.serving import ModelServer


def _loglikelihood(srv: ModelServer, context: list[int], continuation: list[int]) -> float:
    with torch.inference_mode():
        logits = srv.policy.model(torch.tensor([context + continuation])).logits[0].float()
    lp = torch.log_softmax(logits[len(context) - 1 : -1], dim=-1)
    return float(lp.gather(-1, torch.tensor(continuation)[:, None]).sum())


def test_lm_eval_scores_a_multiple_choice_task_by_likelihood(
    server: ModelServer, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    docs = [
        {"question": "2 + 2 =", "choices": [" 4", " 5", " 22"], "answer": 0},
        {"question": "def add(a, b): return", "choices": [" a + b", " a - b"], "answer": 0},
        {"question": "The list is empty:", "choices": [" []", " {}", " ()"], "answer": 0},
    ]
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "codegym_mc.yaml").write_text(
        "task: codegym_mc\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "{{question}}"\n'
        'doc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n"
    )
    args = (
        f"model={server.model_name},base_url={server.base_url}/completions,"
        f"tokenizer={model_dir},tokenized_requests=True,num_concurrent=1,max_retries=1"
    )
    out = simple_evaluate(
        model="local-completions",
        model_args=args,
        tasks=["codegym_mc"],
        task_manager=TaskManager(include_path=str(tmp_path)),
        log_samples=True,
    )
    assert out is not None
    acc = out["results"]["codegym_mc"]["acc,none"]
    assert 0.0 <= acc <= 1.0
    # every likelihood lm-eval read from the server is the model's own
    tok = server.policy.tokenizer
    for sample in out["samples"]["codegym_mc"]:
        for (context, cont), resp in zip(sample["arguments"], sample["resps"], strict=True):
            ctx_ids, cont_ids = tok.encode(context), tok.encode(cont)
            got = resp[0][0]
            assert got == pytest.approx(_loglikelihood(server, ctx_ids, cont_ids), abs=1e-3)


@pytest.mark.parametrize("provider", ["openai-api/codegym", "openai"])
def test_inspect_runs_a_tool_task_on_the_server(
    server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    """``openai-api/…`` goes through chat completions, ``openai/…`` through the Responses
    API; both send the task's tool definition."""
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import tool

    @tool
    def add():  # type: ignore[no-untyped-def]
        async def execute(x: int, y: int) -> int:
            """Add two numbers.

            Args:
                x: The first number.
                y: The second number.
            """
            return x + y

        return execute

    for var in ("CODEGYM_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.setenv(var, server.base_url)
    for var in ("CODEGYM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.setenv(var, "EMPTY")
    monkeypatch.setenv("INSPECT_LOG_DIR", str(tmp_path))
    task = Task(
        dataset=[Sample(input="def add(a, b):", target="return")],
        solver=[use_tools(add()), generate()],
        scorer=includes(),
    )
    (log,) = inspect_eval(
        task,
        model=f"{provider}/{server.model_name}",
        display="none",
        log_dir=str(tmp_path),
        max_tokens=8,
        max_retries=0,
    )
    assert log.status == "success", log.error
    assert log.samples is not None and isinstance(log.samples[0].output.completion, str)
    assert log.stats.model_usage[f"{provider}/{server.model_name}"].output_tokens > 0
    (call,) = [e.call for e in log.samples[0].events if e.event == "model" and e.call]
    api = "input" if provider == "openai" else "messages"  # Responses API, or chat
    assert api in call.request and call.request["tools"], call.request
    assert os.listdir(tmp_path)
