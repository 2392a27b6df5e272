"""The environment contract of ``codegym.envs.env``, directly: options, registration, the
digest, and what the engine does with each way a step can fail (an infra outcome, an
``EnvInfraError``, a bug), through the real engine and executor."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from codegym.envs import Env, EnvError, Resources, StepResult, Turn, make_env, register
from codegym.envs.env import ENVS, EnvInfraError
from codegym.policies import Generation, SamplingParams
from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
from codegym.sandbox import Limits, Sandbox
from codegym.tasks import Task


class _Echo:
    """A policy that answers every prompt with one fixed text (an in-process policy)."""

    name = "echo"

    async def generate(self, prompt: Any, params: SamplingParams) -> list[Generation]:
        return [Generation("answer", "stop", tokens_out=1)] * params.n


class _Failing(Env):
    """Ends every episode the way ``how`` says."""

    defaults: ClassVar[dict[str, Any]] = {"how": "pass", "level": 1}

    async def reset(self, task: Task, seed: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": task.prompt}]

    async def step(self, turn: Turn) -> StepResult:
        how = self.options["how"]
        if how == "infra_outcome":
            return StepResult(done=True, reward=None, outcome="infra")
        if how == "raise_infra":
            raise EnvInfraError("infra", "the tool backend went away")
        if how == "bug":
            raise KeyError("a bug in the env")
        return StepResult(done=True, reward=1.0, outcome="pass")


if "contract_test" not in ENVS:
    register("contract_test")(_Failing)

TASK = Task(id="t/0", prompt="def f():\n", entry_point="f", test="def check(f):\n    pass\n")


def test_unknown_options_are_refused_naming_the_known_ones(sandbox: Sandbox) -> None:
    with pytest.raises(
        EnvError, match=r"unknown option\(s\) \['levle'\]; known: \['how', 'level'\]"
    ):
        make_env("contract_test", Resources(sandbox), levle=2)
    env = make_env("contract_test", Resources(sandbox), level=3)
    assert env.options == {"how": "pass", "level": 3}


def test_a_taken_name_is_refused_and_an_unknown_one_lists_the_registered() -> None:
    class Other(_Failing):
        pass

    with pytest.raises(EnvError, match="'contract_test' is taken by _Failing"):
        register("contract_test")(Other)
    assert register("contract_test")(_Failing) is _Failing  # the same class again: fine
    with pytest.raises(EnvError, match=r"unknown env 'nope'; registered: .*contract_test"):
        make_env("nope", Resources())


def test_the_digest_follows_options_and_limits(sandbox: Sandbox) -> None:
    a = make_env("contract_test", Resources(sandbox))
    b = make_env("contract_test", Resources(sandbox), level=2)
    c = make_env("contract_test", Resources(sandbox, limits=Limits(cpu_s=1)))
    assert len({a.digest(), b.digest(), c.digest()}) == 3
    assert a.digest() == make_env("contract_test", Resources(sandbox)).digest()


@pytest.mark.parametrize(
    ("how", "reason"),
    [("infra_outcome", "infra"), ("raise_infra", "infra"), ("bug", "harness_error")],
)
async def test_each_kind_of_failure_is_retried_then_excluded(
    sandbox: Sandbox, how: str, reason: str
) -> None:
    ex = LocalExecutor(EnvSpec("contract_test", {"how": how}), _Echo(), SamplingParams(),
                       Resources(sandbox))  # fmt: skip
    engine = RolloutEngine(ex, RolloutConfig(group_size=2, retries=1, retry_base_s=0.0),
                           env="contract_test")  # fmt: skip
    (group,) = [g async for g in engine.run([TASK])]
    s = engine.stats.summary()
    assert group.trajectories == () and s["scored"] == 0  # never a reward of 0
    assert s["excluded"] == {reason: 2} and s["retries"] == 2
    assert s["faults"] == {f"contract_test/{reason}": 4}  # each episode, then its retry


async def test_a_passing_episode_is_scored(sandbox: Sandbox) -> None:
    ex = LocalExecutor(EnvSpec("contract_test"), _Echo(), SamplingParams(), Resources(sandbox))
    engine = RolloutEngine(ex, RolloutConfig(group_size=2), env="contract_test")
    (group,) = [g async for g in engine.run([TASK])]
    assert [t.reward for t in group.trajectories] == [1.0, 1.0]
    assert [t.outcome for t in group.trajectories] == ["pass", "pass"]


def test_the_repo_env_refuses_a_sandbox_service() -> None:
    # its images and workspaces live on this host; the code and tool envs run on a service
    from codegym.service import RemoteSandbox

    remote = RemoteSandbox(["http://127.0.0.1:1"])
    with pytest.raises(EnvError, match=r"needs a local sandbox pool .* drop --sandbox-url"):
        make_env("repo", Resources(remote))
    assert make_env("code", Resources(remote)).resources.sandbox is remote
