"""The same bad input raises the same error whichever executor would run the episodes
(the local one, or Ray's: checked before any actor starts)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from codegym.envs import EnvError, Resources
from codegym.policies import OpenAIPolicy, SamplingParams
from codegym.rollout import EnvSpec, LocalExecutor, RolloutError
from codegym.rollout.ray_executor import RayExecutor


def _local(spec: EnvSpec, **kw: Any) -> Any:
    policy = OpenAIPolicy("http://127.0.0.1:9/v1", "m")
    return LocalExecutor(spec, policy, SamplingParams(), Resources(), **kw)


def _ray(spec: EnvSpec, **kw: Any) -> Any:
    return RayExecutor(spec, partial(OpenAIPolicy, "http://127.0.0.1:9/v1", "m"),
                       SamplingParams(), **kw)  # fmt: skip


@pytest.mark.parametrize("make", [_local, _ray], ids=["local", "ray"])
def test_bad_input_is_the_same_error_on_every_executor(make: Any) -> None:
    with pytest.raises(EnvError, match=r"unknown env 'nope'; registered: .*code"):
        make(EnvSpec("nope"))
    with pytest.raises(EnvError, match=r"unknown option\(s\) \['stlye'\]"):
        make(EnvSpec("code", {"stlye": "chat"}))
    with pytest.raises(RolloutError, match="prompt='text': use 'chat' or 'completions'"):
        make(EnvSpec("code"), prompt="text")
