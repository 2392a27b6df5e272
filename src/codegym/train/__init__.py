"""GRPO training: the loss, the loop over rollout groups, checkpoints, config, TRL adapter.

    from codegym.train import Trainer, load_config
    trainer = Trainer(load_config("configs/grpo_tiny.toml"), model_dir)
    asyncio.run(trainer.run())

``grpo.py`` is the objective, ``trainer.py`` the loop (sync and async), ``checkpoint.py``
exact resume, ``policy.py`` the weights hook and the in-process sampler,
``weights_http.py`` the hook for a model server, ``config.py`` every knob, ``split.py``
the training and held-out tasks (and the lineage that guards them), ``trl_adapter.py``
codegym envs as TRL ``GRPOTrainer`` reward functions.
"""

from codegym.train.checkpoint import CheckpointError, latest_checkpoint
from codegym.train.config import ConfigError, TrainConfig, load_config, parse_config
from codegym.train.grpo import LossStats, group_advantages, grpo_loss, token_logprobs
from codegym.train.policy import PolicyHook, PromptTokenizer, TrainablePolicy, local_policy
from codegym.train.split import HeldoutError, TaskSplit, split_tasks
from codegym.train.trainer import Sample, Trainer, build_batch
from codegym.train.weights_http import HttpWeightsHook, WeightsPushError

__all__ = [
    "CheckpointError",
    "ConfigError",
    "HeldoutError",
    "HttpWeightsHook",
    "LossStats",
    "PolicyHook",
    "PromptTokenizer",
    "Sample",
    "TaskSplit",
    "TrainConfig",
    "TrainablePolicy",
    "Trainer",
    "WeightsPushError",
    "build_batch",
    "group_advantages",
    "grpo_loss",
    "latest_checkpoint",
    "load_config",
    "local_policy",
    "parse_config",
    "split_tasks",
    "token_logprobs",
]
