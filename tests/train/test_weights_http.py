"""Pushing trained weights to a real model server on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from codegym.serving.server import ModelServer
from codegym.train.weights_http import HttpWeightsHook, WeightsPushError


def test_push_bumps_the_server_version_and_installs_the_weights(
    toy_model: Path, tmp_path: Path
) -> None:
    model = AutoModelForCausalLM.from_pretrained(toy_model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    with ModelServer(toy_model) as srv:
        hook = HttpWeightsHook(srv.base_url, tmp_path / "stage")
        v0 = srv.policy.policy_version
        assert hook.load_weights(model.state_dict()) == v0 + 1
        served = srv.policy.model.state_dict()
        for k, v in model.state_dict().items():
            assert torch.equal(served[k], v), k
        assert hook.load_weights(model.state_dict()) == v0 + 2
        assert hook.current_version() == v0 + 2
        bad = {"not.a.weight": torch.zeros(2)}
        with pytest.raises(WeightsPushError, match="HTTP 4"):
            hook.load_weights(bad)
        hook.close()
    assert len(list((tmp_path / "stage").glob("*.safetensors"))) <= 2


def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    hook = HttpWeightsHook("http://127.0.0.1:9/v1", tmp_path, timeout_s=2)
    with pytest.raises(WeightsPushError, match=r"127\.0\.0\.1:9"):
        hook.load_weights({"w": torch.zeros(1)})
