"""codegym envs as TRL GRPOTrainer reward functions: real sandbox, real TRL, toy model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from codegym.envs import EnvError
from codegym.tasks.synthetic import generate
from codegym.train.trl_adapter import EnvReward, task_dataset

TASKS = generate("infer", 4, 1, 1)


@pytest.fixture(scope="module")
def reward() -> EnvReward:
    r = EnvReward(TASKS, "code", {"style": "continuation"})
    yield r  # type: ignore[misc]
    r.close()


def test_reward_runs_the_tests_in_the_sandbox(reward: EnvReward) -> None:
    ds = task_dataset(TASKS)
    assert ds.column_names == ["prompt", "task_id"] and ds[0]["prompt"] == TASKS[0].prompt
    ids = [t.id for t in TASKS[:2]] * 2
    good = [t.reference for t in TASKS[:2]]
    bad = ["    return None\n", "    x = (\n"]  # wrong answer; syntax error
    got = reward(prompts=[""] * 4, completions=good + bad, task_id=ids)
    assert got == [1.0, 1.0, 0.0, 0.0]
    assert reward.stats["pass"] == 2 and reward.stats["fail"] + reward.stats["error"] == 2
    conv = [[{"role": "assistant", "content": TASKS[0].reference}]]
    assert reward(prompts=[""], completions=conv, task_id=[TASKS[0].id]) == [1.0]


def test_reward_refuses_what_it_cannot_score(reward: EnvReward) -> None:
    with pytest.raises(EnvError, match="task_id column"):
        reward(prompts=[""], completions=["x"])
    with pytest.raises(EnvError, match="unknown task_id"):
        reward(prompts=[""], completions=["x"], task_id=["nope"])
    with pytest.raises(EnvError, match="unknown env"):
        EnvReward(TASKS, "no-such-env")


@pytest.mark.slow
def test_trl_grpo_trainer_trains_with_a_codegym_reward(
    reward: EnvReward, toy_model: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    calls: list[int] = []

    def counted(**kw: object) -> list[float | None]:
        out = reward(**kw)  # type: ignore[arg-type]
        calls.append(len(out))
        return out

    counted.__name__ = "codegym_code"  # type: ignore[attr-defined]
    import train_helpers  # noqa: F401  (registers the graded test env)

    graded = EnvReward(TASKS, "test_letters", {})
    model = AutoModelForCausalLM.from_pretrained(toy_model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=12,
        max_steps=2,
        learning_rate=1e-2,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[counted, graded],
        args=args,
        train_dataset=task_dataset(TASKS),
        processing_class=AutoTokenizer.from_pretrained(toy_model),
    )
    try:
        trainer.train()
    finally:
        graded.close()
    assert calls and all(n == 4 for n in calls)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert logged and all(0.0 <= h["reward"] <= 1.0 for h in logged)
    assert sum(graded.stats.values()) == sum(calls)  # both envs scored every completion
    # The sandbox-scored reward is 0 for the toy model; the graded env gives the signal.
    after = trainer.model.state_dict()
    assert any(not torch.equal(before[k], after[k].cpu()) for k in before)
