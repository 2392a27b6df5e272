"""Environments: what an episode is, and the trajectory it leaves.

    from codegym.envs import Env, register, make_env, Resources, Turn, StepResult

``Env`` is the contract (``reset`` → first messages, ``step`` → observation, reward, done);
``CodeEnv`` (``"code"``) and ``ToolEnv`` (``"tool"``) are the built-in ones; ``Rubric``
weighs reward functions; ``Trajectory`` is the per-episode record the rollout engine emits.
"""

from codegym.envs.code_env import CodeEnv
from codegym.envs.env import (
    ENVS,
    Env,
    EnvError,
    EnvInfraError,
    Message,
    Resources,
    StepResult,
    Turn,
    make_env,
    register,
)
from codegym.envs.repo_env import RepoEnv
from codegym.envs.rewards import RewardContext, RewardFn, Rubric, tests_passed
from codegym.envs.tokens import ByteTokenizer, Tokenizer, TokenPolicy
from codegym.envs.tool_env import TOOLS, ToolEnv
from codegym.envs.trajectory import ModelTurn, Trajectory, task_from_record, task_to_record

__all__ = [
    "ENVS",
    "TOOLS",
    "ByteTokenizer",
    "CodeEnv",
    "Env",
    "EnvError",
    "EnvInfraError",
    "Message",
    "ModelTurn",
    "RepoEnv",
    "Resources",
    "RewardContext",
    "RewardFn",
    "Rubric",
    "StepResult",
    "TokenPolicy",
    "Tokenizer",
    "ToolEnv",
    "Trajectory",
    "Turn",
    "make_env",
    "register",
    "task_from_record",
    "task_to_record",
    "tests_passed",
]
